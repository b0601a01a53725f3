import { conceptDecider } from '../../domain/concept/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { packVector } from '../../interchange/vectors.js';
import { embeddingsConfigured, PermanentJobError, requireEmbedder, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { conceptSubject, loadStream, sharedCommandFrom, stageMetadata } from './common.js';

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
  return {
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
      if (state.status !== 'active' || state.embeddedWith === deps.embedder.modelId) return;
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
        { type: 'RecordEmbedding', model: deps.embedder.modelId, dimensions: deps.embedder.dimensions, vector: packVector(vector) },
        stageMetadata(context),
      );
    },
  };
}

/** The registry's entry: runs only with an embedder. */
export const embedConceptsStage: StageDefinition = {
  kind: 'embed_concepts',
  enabled: embeddingsConfigured,
  create: (deps) => createEmbedConceptsStage({ store: deps.store, embedder: requireEmbedder(deps, 'embed_concepts') }),
};
