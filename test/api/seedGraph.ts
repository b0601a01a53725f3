import { randomUUID } from 'node:crypto';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { conceptIdFor } from '../../src/domain/concept/decider.js';
import { contentHash } from '../../src/interchange/hashing.js';
import { packVector } from '../../src/interchange/vectors.js';
import type { Embedder } from '../../src/providers/embeddings/port.js';
import type { TestService } from '../helpers/service.js';

/**
 * Appends pipeline events straight to the store (the stages are another part's work) and waits
 * for the read models, so the read surface is tested on real projections of real events.
 */
export async function appendEvents(
  service: TestService,
  repositoryId: string,
  streamId: string,
  events: { type: string; data: Record<string, unknown> }[],
): Promise<RecordedEvent[]> {
  const metadata = { repositoryId, actor: 'system:test', causationId: null, correlationId: null };
  const result = await service.context.store.append(
    streamId,
    events.map((event) => ({ ...event, metadata })),
    'any',
  );
  await service.context.commands.settle({
    position: result.lastPosition,
    streamId,
    streamVersion: result.nextExpectedVersion,
    types: events.map((event) => event.type),
  });
  return result.events;
}

export interface SeededFact {
  id: string;
  content: string;
}

/**
 * FactsExtracted on the source's stream for `contents`, in that order, in chunk 0, with random
 * fact ids (ids derived as the pipeline derives them are not needed here). `sentences: 'unknown'`
 * leaves out their sentence indexes (-1), as a decomposition by the OpenAI-compatible model does.
 */
export async function extractFacts(
  service: TestService,
  repositoryId: string,
  sourceId: string,
  contents: string[],
  sentences: 'known' | 'unknown' = 'known',
): Promise<SeededFact[]> {
  const facts = contents.map((content, position) => ({
    fact_id: randomUUID(),
    content,
    content_hash: contentHash(content),
    source_text: content,
    chunk_index: 0,
    fact_kind: 'text',
    image_id: null,
    sentence_index: sentences === 'known' ? position : -1,
  }));
  await appendEvents(service, repositoryId, `source-${sourceId}`, [{ type: 'FactsExtracted', data: { model_id: 'local', promptset_hash: '', facts } }]);
  return facts.map((fact) => ({ id: fact.fact_id, content: fact.content }));
}

export async function stabilize(service: TestService, repositoryId: string, sourceId: string, facts: SeededFact[]): Promise<void> {
  for (const fact of facts) await appendEvents(service, repositoryId, `fact-${fact.id}`, [{ type: 'FactStabilized', data: { source_id: sourceId } }]);
}

export async function embedFacts(service: TestService, repositoryId: string, sourceId: string, embedder: Embedder, facts: SeededFact[]): Promise<void> {
  const vectors = await embedder.embed(facts.map((fact) => fact.content));
  await appendEvents(service, repositoryId, `source-${sourceId}`, [
    {
      type: 'FactsEmbedded',
      data: {
        model: embedder.modelId,
        dimensions: embedder.dimensions,
        vectors: facts.map((fact, position) => ({ fact_id: fact.id, vector: packVector(vectors[position]) })),
      },
    },
  ]);
}

export async function createConcept(
  service: TestService,
  repositoryId: string,
  canonicalName: string,
  context: string,
  aliases: string[] = [],
): Promise<string> {
  const id = conceptIdFor(repositoryId, canonicalName, context);
  await appendEvents(service, repositoryId, `concept-${id}`, [
    { type: 'ConceptCreated', data: { canonical_name: canonicalName, context, ontology_class: null, aliases, source_id: null } },
  ]);
  return id;
}

/** ConceptsExtracted: links each fact to the given concepts. */
export async function linkFacts(service: TestService, repositoryId: string, sourceId: string, links: Record<string, string[]>): Promise<void> {
  await appendEvents(service, repositoryId, `source-${sourceId}`, [
    {
      type: 'ConceptsExtracted',
      data: {
        model_id: 'local',
        promptset_hash: '',
        batch_index: 0,
        batch_count: 1,
        links: Object.entries(links).map(([fact_id, concept_ids]) => ({ fact_id, concept_ids })),
      },
    },
  ]);
}

/** ConceptRelationsRefreshed with the pairs ordered as the event requires (a < b). */
export async function refreshRelations(service: TestService, repositoryId: string, pairs: [string, string, number][]): Promise<void> {
  await appendEvents(service, repositoryId, `repository-${repositoryId}`, [
    {
      type: 'ConceptRelationsRefreshed',
      data: {
        changes: pairs.map(([x, y, count]) => {
          const [concept_a, concept_b] = x < y ? [x, y] : [y, x];
          return { concept_a, concept_b, shared_fact_count: count };
        }),
      },
    },
  ]);
}

/** The bakery's five stable facts, from one source, that the merge-following read tests (test/read/) stale: yeast and its twin, oven, knife, and one to retract. */
export async function seedBakeryFacts(service: TestService, repositoryId: string, sourceId: string): Promise<Record<'yeast' | 'oven' | 'knife' | 'twin' | 'gone', SeededFact>> {
  const seeded = await extractFacts(service, repositoryId, sourceId, ['Bread needs yeast.', 'Ovens bake bread.', 'Knives cut bread.', 'Bread requires yeast.', 'Bread is sold warm.']);
  await stabilize(service, repositoryId, sourceId, seeded);
  return { yeast: seeded[0], oven: seeded[1], knife: seeded[2], twin: seeded[3], gone: seeded[4] };
}
