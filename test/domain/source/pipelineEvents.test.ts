import t from 'tap';
import { conceptDecider } from '../../../src/domain/concept/decider.js';
import type { DomainEvent } from '../../../src/domain/event.js';
import { factDecider } from '../../../src/domain/fact/decider.js';
import { repositoryDecider } from '../../../src/domain/repository/decider.js';
import { sourceDecider } from '../../../src/domain/source/decider.js';
import { EventSchemaRegistry } from '../../../src/eventstore/schemas.js';
import { packVector } from '../../../src/interchange/vectors.js';

/** Every event the pipeline deciders produce is valid under schemas/events, and comes back unchanged. */
t.test('decider output validates against the Avro schemas', async (t) => {
  const schemas = await EventSchemaRegistry.load();
  const produced: DomainEvent[] = [
    ...factDecider.decide({ type: 'StabilizeFact', sourceId: 's' }, { status: 'new' }),
    ...factDecider.decide({ type: 'MergeFact', survivorId: 'f0', similarity: 0.95, sourceId: null, catchup: true }, { status: 'stable' }),
    ...factDecider.decide({ type: 'RemoveFact' }, { status: 'merged', survivorId: 'f0' }),
  ];
  const conceptCreated = conceptDecider.decide(
    { type: 'CreateConcept', canonicalName: 'X-ray', context: 'technology', ontologyClass: null, aliases: ['x ray'], sourceId: null },
    { status: 'none' },
  );
  const concept = conceptCreated.reduce(conceptDecider.evolve, conceptDecider.initialState());
  produced.push(
    ...conceptCreated,
    ...conceptDecider.decide({ type: 'AddAliases', aliases: ['Röntgen rays'] }, concept),
    ...conceptDecider.decide({ type: 'RemoveAlias', alias: 'x ray', reason: 'spelling' }, concept),
    ...conceptDecider.decide({ type: 'RecordEmbedding', model: 'm', dimensions: 2, vector: packVector([1, 0]) }, concept),
    ...conceptDecider.decide({ type: 'MergeConcept', survivorId: 'c2', reason: 'same' }, concept),
  );
  const repository = repositoryDecider.evolve(repositoryDecider.initialState(), {
    type: 'RepositoryCreated',
    data: { name: 'R', slug: 'r', description: '', preset: 'general', tier: 'shared', accepted_promptset_hashes: [], registry_id: null },
  });
  produced.push(
    ...repositoryDecider.decide({ type: 'SetPrompts', prompts: { synthesis: 'S', posture: 'P' } }, repository),
    ...repositoryDecider.decide({ type: 'SetCustomContexts', customContexts: [{ name: 'gadget', description: 'A gadget.' }] }, repository),
    ...repositoryDecider.decide({ type: 'RequestContextMigration', fromContext: 'topic', toContext: 'field' }, repository),
    ...repositoryDecider.decide({ type: 'RecordRelationChanges', changes: [{ concept_a: 'a', concept_b: 'b', shared_fact_count: 2 }] }, repository),
  );
  const processed = [
    { type: 'SourceRegistered', data: { origin: 'url', url: 'u', doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null } },
    { type: 'FactsExtracted', data: { model_id: 'm', promptset_hash: '', facts: [] } },
  ].reduce((state, event) => sourceDecider.evolve(state, event as never), sourceDecider.initialState());
  produced.push(
    ...sourceDecider.decide({ type: 'RecordEmbeddings', model: 'm', dimensions: 1, vectors: [{ fact_id: 'f', vector: packVector([1]) }] }, processed),
    ...sourceDecider.decide({ type: 'RecordDeduplication', stableFactIds: ['f'], merged: [{ fact_id: 'g', survivor_id: 'f' }] }, processed),
    ...sourceDecider.decide({ type: 'RecordConceptBatch', modelId: 'm', promptsetHash: 'h', batchIndex: 0, batchCount: 1, links: [{ fact_id: 'f', concept_ids: ['c'] }] }, processed),
  );
  const fetched = { type: 'SourceFetched', data: { final_url: null, content_type: 'text/html', body_sha256: 'a', body_bytes: 1, document_kind: 'html', title: null, published_at: null, text_sha256: 'b', markdown_sha256: 'c', text_chars: 1 } };
  const upload = sourceDecider.evolve(sourceDecider.initialState(), {
    type: 'SourceRegistered',
    data: { origin: 'upload', url: null, doi: null, filename: 'f', content_type: null, body_sha256: 'a', body_bytes: 1 },
  });
  const image = { image_id: 'i', sha256: 'd', content_type: 'image/png', bytes: 3, url: null, alt_text: 'alt', caption: null };
  produced.push(
    ...sourceDecider.decide({ type: 'RecordFetch', fetched: { ...fetched.data, images: [image] } }, upload),
    ...sourceDecider.decide(
      {
        type: 'RecordFacts',
        modelId: 'm',
        promptsetHash: 'h',
        facts: [{ fact_id: 'f', content: 'c', content_hash: 'h', source_text: 's', chunk_index: 0, fact_kind: 'image', image_id: 'i', sentence_index: 0 }],
      },
      sourceDecider.evolve(upload, fetched as never),
    ),
  );
  const types = new Set(produced.map((event) => event.type));
  for (const type of ['FactStabilized', 'FactMergedInto', 'FactRemoved', 'ConceptCreated', 'ConceptAliasAdded', 'ConceptAliasRemoved', 'ConceptEmbedded',
    'ConceptMergedInto', 'RepositoryPromptsChanged', 'RepositoryContextsChanged', 'ContextMigrationRequested', 'ConceptRelationsRefreshed',
    'FactsEmbedded', 'SourceFactsDeduplicated', 'ConceptsExtracted', 'SourceFetched', 'FactsExtracted']) {
    t.ok(types.has(type), `produced ${type}`);
  }
  for (const event of produced) {
    t.same(schemas.validate(event.type, event.data), event.data, `${event.type} validates unchanged`);
  }
});

t.test('events recorded before the pipeline still validate, with defaults', async (t) => {
  const schemas = await EventSchemaRegistry.load();
  const fact = { fact_id: 'f', content: 'c', content_hash: 'h', source_text: 's', chunk_index: 3 };
  t.same(schemas.validate('FactsExtracted', { model_id: 'm', facts: [fact] }), {
    model_id: 'm',
    promptset_hash: '',
    facts: [{ ...fact, fact_kind: 'text', image_id: null, sentence_index: -1 }],
  });
  const fetched = { final_url: null, content_type: 'text/html', body_sha256: 'a', body_bytes: 1, document_kind: 'html', title: null, published_at: null, text_sha256: 'b', markdown_sha256: 'c', text_chars: 1 };
  t.same(schemas.validate('SourceFetched', fetched), { ...fetched, images: [] });
  t.throws(() => schemas.validate('FactsExtracted', { model_id: 'm', facts: [{ ...fact, fact_kind: 'video' }] }), /fact_kind/);
  t.throws(() => schemas.validate('RepositoryPromptsChanged', { prompts: { synthesis: null } }), /synthesis/, 'a removed override is absent, not null');
  t.same(schemas.validate('FactMergedInto', { survivor_id: 'f', similarity: 1, source_id: 's' }), { survivor_id: 'f', similarity: 1, source_id: 's', catchup: false });
});
