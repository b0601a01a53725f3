import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { packVector } from '../../interchange/vectors.js';
import { embeddingsConfigured, PermanentJobError, requireEmbedder, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { commandFrom, failSourceOfDeadJob, loadStream, recordingSourceFailure, sourceSubject, stageMetadata, throwIfAborted } from './common.js';

export interface EmbedFactsDeps {
  store: EventStore;
  embedder: Embedder;
  /** Texts per embedder call (`providers.ai.embed_batch_size`); adapters may batch further. */
  batchSize: number;
  /** The runtime's attempt budget: the last failed attempt marks the source failed. */
  maxAttempts: number;
}

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;

/** The facts of the latest FactsExtracted among a source's events (a source records it once; a retry never re-records it). */
export function extractedFactsOf(events: readonly RecordedEvent[]): FactsExtracted['data']['facts'] {
  for (let index = events.length - 1; index >= 0; index--) {
    const event = events[index];
    if (event.type === 'FactsExtracted') return (event.data as FactsExtracted['data']).facts;
  }
  return [];
}

/**
 * embed_facts: one vector per fact of the source, recorded in FactsEmbedded (packed float32) so
 * replaying the log never calls the model; the search-index projection stores them for k-NN.
 * A fact listed twice in the source is embedded once.
 */
export function createEmbedFactsStage(deps: EmbedFactsDeps): Stage {
  if (!Number.isInteger(deps.batchSize) || deps.batchSize < 1) throw new RangeError('batchSize must be a positive integer');
  return {
    kind: 'embed_facts',
    onDead: failSourceOfDeadJob(deps.store, 'embed_facts'),
    triggers: ['FactsExtracted'],
    subjectOf: sourceSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    async run(context: JobContext) {
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const loaded = await loadStream(deps.store, stream, sourceDecider);
      const { state } = loaded;
      // Not processed (yet, or any more): the FactsExtracted that makes it processed triggers a new job.
      if (state.status !== 'processed' || state.deleted) return;
      if (state.embeddedWith.includes(deps.embedder.modelId)) return;
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'embed_facts', maxAttempts: deps.maxAttempts }, async () => {
        const unique = new Map<string, string>();
        for (const fact of extractedFactsOf(loaded.events)) if (!unique.has(fact.fact_id)) unique.set(fact.fact_id, fact.content);
        const ids = [...unique.keys()];
        const texts = [...unique.values()];
        const vectors: Array<{ fact_id: string; vector: string }> = [];
        for (let start = 0; start < texts.length; start += deps.batchSize) {
          throwIfAborted(context.signal);
          const batch = texts.slice(start, start + deps.batchSize);
          const embedded = await deps.embedder.embed(batch, context.signal);
          if (embedded.length !== batch.length) {
            throw new PermanentJobError(`embedder ${deps.embedder.modelId} returned ${embedded.length} vectors for ${batch.length} texts`);
          }
          embedded.forEach((vector, offset) => {
            if (vector.length !== deps.embedder.dimensions) {
              throw new PermanentJobError(
                `embedder ${deps.embedder.modelId} returned a vector of ${vector.length} dimensions, not ${deps.embedder.dimensions}`,
              );
            }
            vectors.push({ fact_id: ids[start + offset], vector: packVector(vector) });
          });
        }
        throwIfAborted(context.signal);
        await commandFrom(
          deps.store,
          stream,
          sourceDecider,
          loaded,
          { type: 'RecordEmbeddings', model: deps.embedder.modelId, dimensions: deps.embedder.dimensions, vectors },
          stageMetadata(context),
          { retries: 0 },
        );
      });
    },
  };
}

/** The registry's entry. Without an embedder there are no vectors: deduplication follows decomposition directly. */
export const embedFactsStage: StageDefinition = {
  kind: 'embed_facts',
  enabled: embeddingsConfigured,
  create: (deps) =>
    createEmbedFactsStage({
      store: deps.store,
      embedder: requireEmbedder(deps, 'embed_facts'),
      batchSize: deps.config.providers.ai.embed_batch_size,
      maxAttempts: deps.config.task.retry.max_attempts,
    }),
};
