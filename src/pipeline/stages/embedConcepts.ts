import { conceptDecider, conceptUnreadData } from '../../domain/concept/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { packVector } from '../../interchange/vectors.js';
import { embeddingsConfigured, PermanentJobError, requireEmbedder, type JobContext, type JobRunOutcome, type Stage, type StageDefinition } from '../types.js';
import { commandOnSharedStream, conceptSubject, firstsAndRepeats, foldStream, loadStream, runRepeatsAlone, sharedCommandFrom, stageMetadata, type LoadedStream } from './common.js';
import type { ConceptState } from '../../domain/concept/events.js';

export interface EmbedConceptsDeps {
  store: EventStore;
  embedder: Embedder;
}

/** What a concept's vector is computed from: the name plus its context, which tells homonyms apart. */
export function conceptEmbeddingText(canonicalName: string, context: string): string {
  return `${canonicalName} (${context})`;
}

/** embed_concepts: the vector of a new concept, recorded in ConceptEmbedded (packed float32). */
export function createEmbedConceptsStage(deps: EmbedConceptsDeps): Stage {
  type Known = Exclude<ConceptState, { status: 'none' }>;
  const needsEmbedding = (state: ConceptState): state is Known => state.status === 'active' && state.embeddedWith !== deps.embedder.modelId;
  const embeddingCommand = (vector: number[]) =>
    ({ type: 'RecordEmbedding', model: deps.embedder.modelId, dimensions: deps.embedder.dimensions, vector: packVector(vector) }) as const;

  const stage: Stage = {
    kind: 'embed_concepts',
    triggers: ['ConceptCreated'],
    subjectOf: conceptSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    async run(context: JobContext) {
      const stream = streamName('concept', context.job.subjectId);
      const loaded = await loadStream(deps.store, stream, conceptDecider);
      const { state } = loaded;
      // Merged concepts are not searched; an embedding of this model is already there.
      if (!needsEmbedding(state)) return;
      const [vector] = await deps.embedder.embed([conceptEmbeddingText(state.canonicalName, state.context)], context.signal);
      if (!vector || vector.length !== deps.embedder.dimensions) {
        throw new PermanentJobError(`embedder ${deps.embedder.modelId} returned no vector of ${deps.embedder.dimensions} dimensions`);
      }
      // Decided on the stream as read. Extraction adds aliases to the same stream meanwhile: a
      // lost race is re-decided (a twin's embedding makes the decider record nothing), never
      // taken for this job's own result.
      await sharedCommandFrom(
        deps.store,
        stream,
        conceptDecider,
        loaded,
        embeddingCommand(vector),
        stageMetadata(context),
      );
    },

    /**
     * run for many concepts at once: their streams in one read, their texts in one embedding
     * call, their embeddings in one multi-stream append. Each concept is decided as run decides
     * it, and a stream that moved meanwhile is re-decided alone (commandOnSharedStream), as
     * sharedCommandFrom does; a concept listed twice runs alone after the others.
     */
    async runMany(contexts: readonly JobContext[], signal: AbortSignal): Promise<JobRunOutcome[]> {
      const outcomes: JobRunOutcome[] = contexts.map(() => ({ ok: true }));
      const streams = contexts.map((context) => streamName('concept', context.job.subjectId));
      const { firsts, repeats } = firstsAndRepeats(streams);
      const read = await deps.store.readStreams(
        firsts.map((index) => streams[index]),
        { omitData: conceptUnreadData },
      );
      const todo: Array<{ index: number; loaded: LoadedStream<ConceptState>; state: Known }> = [];
      for (const index of firsts) {
        const loaded = foldStream(read.get(streams[index]) ?? [], conceptDecider);
        if (needsEmbedding(loaded.state)) todo.push({ index, loaded, state: loaded.state });
      }
      if (todo.length > 0) {
        const texts = todo.map(({ state }) => conceptEmbeddingText(state.canonicalName, state.context));
        const vectors = await deps.embedder.embed(texts, signal);
        const parts: Array<{ index: number; command: ReturnType<typeof embeddingCommand>; events: ReturnType<typeof conceptDecider.decide>; loaded: LoadedStream<ConceptState> }> = [];
        for (const [position, { index, loaded }] of todo.entries()) {
          const vector = vectors[position];
          if (!vector || vector.length !== deps.embedder.dimensions) {
            outcomes[index] = { ok: false, error: new PermanentJobError(`embedder ${deps.embedder.modelId} returned no vector of ${deps.embedder.dimensions} dimensions`) };
            continue;
          }
          const command = embeddingCommand(vector);
          const events = conceptDecider.decide(command, loaded.state);
          if (events.length > 0) parts.push({ index, command, events, loaded });
        }
        const appended = await deps.store.appendToStreams(
          parts.map(({ index, events, loaded }) => ({
            streamId: streams[index],
            events: events.map((event) => ({ type: event.type, data: event.data, metadata: stageMetadata(contexts[index]) })),
            expected: loaded.version === null ? 'no_stream' : loaded.version,
          })),
        );
        for (const [position, { index, command }] of parts.entries()) {
          if (appended[position]?.result) continue;
          try {
            await commandOnSharedStream(deps.store, streams[index], conceptDecider, command, stageMetadata(contexts[index]));
          } catch (error) {
            outcomes[index] = { ok: false, error };
          }
        }
      }
      await runRepeatsAlone(stage, contexts, repeats, outcomes);
      return outcomes;
    },
  };
  return stage;
}

/** The registry's entry: runs only with an embedder. */
export const embedConceptsStage: StageDefinition = {
  kind: 'embed_concepts',
  enabled: embeddingsConfigured,
  create: (deps) => createEmbedConceptsStage({ store: deps.store, embedder: requireEmbedder(deps, 'embed_concepts') }),
};
