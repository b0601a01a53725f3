import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { handleCommand, loadState } from '../../eventstore/commandHandler.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { packVector } from '../../interchange/vectors.js';
import { PermanentJobError, type JobContext, type Stage } from '../types.js';
import { recordingSourceFailure, sourceSubject, stageMetadata, throwIfAborted } from './common.js';

export interface EmbedFactsDeps {
  store: EventStore;
  embedder: Embedder;
  /** Texts per embedder call (`providers.ai.embed_batch_size`); adapters may batch further. */
  batchSize: number;
  /** The runtime's attempt budget: the last failed attempt marks the source failed. */
  maxAttempts: number;
}

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;

/** The facts of the source's latest FactsExtracted (a source records it once; a retry never re-records it). */
export async function extractedFactsOf(store: EventStore, sourceId: string): Promise<FactsExtracted['data']['facts']> {
  const events = await store.readStream(streamName('source', sourceId));
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
    triggers: ['FactsExtracted'],
    subjectOf: sourceSubject,
    async run(context: JobContext) {
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const { state } = await loadState(deps.store, stream, sourceDecider);
      // Not processed (yet, or any more): the FactsExtracted that makes it processed triggers a new job.
      if (state.status !== 'processed') return;
      if (state.embeddedWith.includes(deps.embedder.modelId)) return;
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'embed_facts', maxAttempts: deps.maxAttempts }, async () => {
        const unique = new Map<string, string>();
        for (const fact of await extractedFactsOf(deps.store, sourceId)) if (!unique.has(fact.fact_id)) unique.set(fact.fact_id, fact.content);
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
        await handleCommand(
          deps.store,
          stream,
          sourceDecider,
          { type: 'RecordEmbeddings', model: deps.embedder.modelId, dimensions: deps.embedder.dimensions, vectors },
          stageMetadata(context),
          { retries: 0 },
        );
      });
    },
  };
}
