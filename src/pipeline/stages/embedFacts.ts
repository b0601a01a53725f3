import { mixedDimensions, sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
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

/**
 * The most vector bytes one FactsEmbedded holds (each vector's JSON entry: fact id and base64
 * floats): half of EventStoreDB's default maximum append size (1 MiB; the event's envelope adds
 * a few hundred bytes), and so a few hundred KB under Kafka's default message size too. 63
 * facts at 1,536 dimensions, 31 at 3,072, 6 at 16,000, 875 at the local model's 100.
 */
export const FACTS_EMBEDDED_PART_BYTES = 512 * 1024;

/** A vector's bytes in a FactsEmbedded, as JSON: `{"fact_id":"…","vector":"…"},`. */
function entryBytes(entry: { fact_id: string; vector: string }): number {
  return Buffer.byteLength(entry.fact_id) + entry.vector.length + '{"fact_id":"","vector":""},'.length;
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
 * A fact listed twice in the source is embedded once. A source whose vectors are more than
 * FACTS_EMBEDDED_PART_BYTES records them in several FactsEmbedded, each its own append (no append comes near
 * EventStoreDB's maximum append size), as they are embedded: the source's state knows which facts
 * have a vector of the model, so a retry after a failure between parts embeds and records only
 * the rest, and the stage is done once every fact has one (docs/pipeline.md).
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
      let loaded = await loadStream(deps.store, stream, sourceDecider);
      const { state } = loaded;
      // Not processed (yet, or any more): the FactsExtracted that makes it processed triggers a new job.
      if (state.status !== 'processed' || state.deleted) return;
      const model = deps.embedder.modelId;
      if (state.embeddedWith.includes(model)) return;
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'embed_facts', maxAttempts: deps.maxAttempts }, async () => {
        // Refused before any model call: no part of another dimension joins the model's earlier ones.
        const mixed = mixedDimensions(state, model, deps.embedder.dimensions);
        if (mixed !== null) throw new PermanentJobError(mixed);
        // The facts without a vector of the model: all of them, or what a failed run left.
        const recorded = new Set(state.embeddedFactIds[model] ?? []);
        const unique = new Map<string, string>();
        for (const fact of extractedFactsOf(loaded.events)) if (!unique.has(fact.fact_id) && !recorded.has(fact.fact_id)) unique.set(fact.fact_id, fact.content);
        const ids = [...unique.keys()];
        const texts = [...unique.values()];
        let part: Array<{ fact_id: string; vector: string }> = [];
        let bytes = 0;
        let parts = 0;
        const record = async () => {
          throwIfAborted(context.signal);
          ({ after: loaded } = await commandFrom(
            deps.store,
            stream,
            sourceDecider,
            loaded,
            { type: 'RecordEmbeddings', model, dimensions: deps.embedder.dimensions, vectors: part },
            stageMetadata(context),
            { retries: 0 },
          ));
          parts += 1;
          part = [];
          bytes = 0;
        };
        for (let start = 0; start < texts.length; start += deps.batchSize) {
          throwIfAborted(context.signal);
          const batch = texts.slice(start, start + deps.batchSize);
          const embedded = await deps.embedder.embed(batch, context.signal);
          if (embedded.length !== batch.length) {
            throw new PermanentJobError(`embedder ${model} returned ${embedded.length} vectors for ${batch.length} texts`);
          }
          for (const [offset, vector] of embedded.entries()) {
            if (vector.length !== deps.embedder.dimensions) {
              throw new PermanentJobError(`embedder ${model} returned a vector of ${vector.length} dimensions, not ${deps.embedder.dimensions}`);
            }
            const entry = { fact_id: ids[start + offset], vector: packVector(vector) };
            // The part is recorded when the next vector would take it over the budget.
            if (part.length > 0 && bytes + entryBytes(entry) > FACTS_EMBEDDED_PART_BYTES) await record();
            part.push(entry);
            bytes += entryBytes(entry);
          }
        }
        // The last part; a source without facts records its one empty FactsEmbedded.
        if (part.length > 0 || parts === 0) await record();
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
