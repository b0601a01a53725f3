import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { ExtractedFactRecord } from '../../src/domain/source/decider.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import { factsProjection } from '../../projections/facts.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { createPostgresSearchIndex } from '../../src/search/postgres.js';
import { concepts, facts } from '../../src/search/collections/index.js';
import type { SearchIndex } from '../../src/search/port.js';
import { packVector } from '../../src/interchange/vectors.js';
import { DIMENSIONS } from '../search/contract.js';
import { deleteIndices, ensureOpenSearch, uniquePrefix } from '../search/helpers.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

t.setTimeout(600_000);

let position = 0;

function recorded(type: string, streamId: string, repositoryId: string | null, data: Record<string, unknown>, occurredAt: string): RecordedEvent {
  position += 1;
  return {
    eventId: randomUUID(),
    streamId,
    streamVersion: 0,
    globalPosition: position,
    type,
    schemaVersion: 1,
    data,
    occurredAt,
    repositoryId,
    actor: 'system:test',
    causationId: null,
    correlationId: null,
  };
}

function extracted(repositoryId: string, facts: ExtractedFactRecord[], occurredAt: string): RecordedEvent {
  return recorded('FactsExtracted', `source-${randomUUID()}`, repositoryId, { model_id: 'local', facts }, occurredAt);
}

function deleted(repositoryId: string): RecordedEvent {
  return recorded('RepositoryDeleted', `repository-${repositoryId}`, repositoryId, { reason: null }, new Date().toISOString());
}

function factRecord(content: string): ExtractedFactRecord {
  return {
    fact_id: randomUUID(),
    content,
    content_hash: `hash-${randomUUID()}`,
    source_text: content,
    chunk_index: 0,
    fact_kind: 'text',
    image_id: null,
    sentence_index: -1,
  };
}

function onStream(type: string, streamId: string, version: number, repositoryId: string, data: Record<string, unknown>): RecordedEvent {
  return { ...recorded(type, streamId, repositoryId, data, new Date().toISOString()), streamVersion: version };
}

function embedded(repositoryId: string, vectors: Record<string, number[]>): RecordedEvent {
  return onStream('FactsEmbedded', `source-${randomUUID()}`, 3, repositoryId, {
    model: 'test',
    dimensions: DIMENSIONS,
    vectors: Object.entries(vectors).map(([fact_id, vector]) => ({ fact_id, vector: packVector(vector) })),
  });
}

const factEvent = (type: string, factId: string, version: number, repositoryId: string, data: Record<string, unknown>) =>
  onStream(type, `fact-${factId}`, version, repositoryId, data);
const conceptEvent = (type: string, conceptId: string, version: number, repositoryId: string, data: Record<string, unknown>) =>
  onStream(type, `concept-${conceptId}`, version, repositoryId, data);

const ids = (items: { id: string }[]) => items.map((item) => item.id);

async function listing(index: SearchIndex, repositoryId: string) {
  return index.search(facts, { repositoryId, query: '', limit: 100, offset: 0 });
}

t.test('search-index projection on OpenSearch', async (t) => {
  const node = await ensureOpenSearch();
  const prefix = uniquePrefix('projection');
  const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true, retireDelayMs: 100 });
  t.teardown(async () => {
    await index.close();
    await deleteIndices(node, prefix);
  });
  const projection = createSearchIndexProjection(index);
  // OpenSearch writes outside the database: the adapter never touches the transaction.
  const noTransaction = undefined as unknown as Knex.Transaction;
  const apply = (event: RecordedEvent) => projection.apply(noTransaction, event);

  t.equal(projection.name, 'search-index');
  t.same(projection.eventTypes, [
    'FactsExtracted',
    'FactsEmbedded',
    'FactStabilized',
    'FactMergedInto',
    'FactRemoved',
    'FactRetracted',
    'ConceptCreated',
    'ConceptAliasAdded',
    'ConceptAliasRemoved',
    'ConceptEmbedded',
    'ConceptMergedInto',
    'SummarySliceWritten',
    'SummarySliceRemoved',
    'RepositoryDeleted',
  ]);
  t.same(projection.tables, []);

  const repo = `repo-${randomUUID()}`;
  const other = `repo-${randomUUID()}`;
  const tides = factRecord('Tides follow the moon.');
  const winds = factRecord('Trade winds blow westward.');
  const first = extracted(repo, [tides, winds, { ...tides, chunk_index: 3 }], '2024-05-01T00:00:00.000Z');
  await apply(first);
  const once = await listing(index, repo);
  t.equal(once.total, 2, 'a fact listed twice in one event is one document');
  t.match(once.items.find((item) => item.id === tides.fact_id), {
    content: tides.content,
    content_hash: tides.content_hash,
    fact_kind: 'text',
    status: 'new',
    created_at: '2024-05-01T00:00:00.000Z',
  });

  await apply(first);
  t.same(await listing(index, repo), once, 're-applying the event leaves the index as it was');

  // An embedding stage (a later issue) sets a vector; re-applying the extraction keeps it.
  await index.index(facts, [{ ...once.items.find((item) => item.id === tides.fact_id)!, repository_id: repo, vector: [0, 0, 1, 0] }]);
  await apply(first);
  t.same((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items.map((item) => item.id), [tides.fact_id], 'the vector survives a replay');

  // The same fact from a second source, later: still one document, still the first time.
  await apply(extracted(repo, [tides], '2024-06-01T00:00:00.000Z'));
  const later = await listing(index, repo);
  t.equal(later.total, 2);
  t.equal(later.items.find((item) => item.id === tides.fact_id)?.created_at, '2024-05-01T00:00:00.000Z');

  await apply(extracted(other, [factRecord('Other repositories are untouched.')], '2024-05-02T00:00:00.000Z'));
  await apply(extracted(other, [], '2024-05-03T00:00:00.000Z'));
  await apply(recorded('SourceFetched', `source-${randomUUID()}`, repo, {}, '2024-05-03T00:00:00.000Z'));
  const removal = deleted(repo);
  await apply(removal);
  t.equal((await listing(index, repo)).total, 0, 'RepositoryDeleted removes the documents');
  t.same((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items, [], 'and their vectors');
  await apply(removal);
  t.equal((await listing(index, other)).total, 1, 're-applying the deletion is harmless; other repositories keep theirs');

  await t.rejects(apply(recorded('FactsExtracted', 'source-x', null, { model_id: 'local', facts: [factRecord('x')] }, '2024-05-01T00:00:00.000Z')), /no repository id/);

  t.test('replaying the log through the projection into a new index equals the live index', async (t) => {
    const kept = `repo-${randomUUID()}`;
    const reused = `repo-${randomUUID()}`;
    const shared = factRecord('Basalt columns form as lava cools.');
    const log = [
      extracted(reused, [factRecord('Deleted with its repository.')], '2024-05-01T00:00:00.000Z'),
      extracted(kept, [shared, factRecord('Obsidian is volcanic glass.')], '2024-05-02T00:00:00.000Z'),
      deleted(reused),
      extracted(kept, [shared], '2024-05-04T00:00:00.000Z'),
      extracted(reused, [factRecord('Indexed after the deletion.')], '2024-05-05T00:00:00.000Z'),
    ];
    for (const event of log) await apply(event);
    const live = [await listing(index, kept), await listing(index, reused)];
    t.same(live.map((page) => page.total), [2, 1]);
    const result = await index.rebuildIndex(async (target) => {
      const replay = createSearchIndexProjection(target);
      for (const event of log) await replay.apply(noTransaction, event);
    });
    t.equal(result.written, 5, 'the fill wrote one document per extracted fact per event');
    t.same([await listing(index, kept), await listing(index, reused)], live, 'same documents, times and order');
  });
});

t.test('search-index projection on the Postgres adapter', async (t: Test) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const projection = createSearchIndexProjection(index);
  const repo = `repo-${randomUUID()}`;
  const fact = factRecord('Lava cools into basalt.');
  const event = extracted(repo, [fact], '2024-05-01T00:00:00.000Z');
  // As the projection runner does: every projection of a batch in one transaction.
  const inRunnerTransaction = (body: (trx: Knex.Transaction) => Promise<void>) =>
    Promise.race([
      db.knex.transaction(body),
      new Promise((_, reject) => setTimeout(() => reject(new Error('stuck: a write waited for a second connection')), 10_000)),
    ]);
  await inRunnerTransaction(async (trx) => {
    await factsProjection.apply(trx, event);
    await projection.apply(trx, event);
  });
  t.same((await index.search(facts, { repositoryId: repo, query: 'basalt', limit: 5, offset: 0 })).items.map((item) => item.id), [fact.fact_id]);
  await index.index(facts, [
    { id: fact.fact_id, repository_id: repo, content: fact.content, content_hash: fact.content_hash, fact_kind: 'text', status: 'stable', created_at: event.occurredAt, vector: [1, 1, 0, 0] },
  ]);
  await inRunnerTransaction((trx) => projection.apply(trx, event));
  t.equal((await index.knn(facts, { repositoryId: repo, vector: [1, 1, 0, 0], k: 1 })).items.length, 1, 'a replayed extraction keeps the vector');
  await inRunnerTransaction((trx) => projection.apply(trx, deleted(repo)));
  t.same((await index.knn(facts, { repositoryId: repo, vector: [1, 1, 0, 0], k: 1 })).items, [], 'RepositoryDeleted removes the vectors inside the transaction');
});

t.test('pipeline events on OpenSearch: status, vectors, merges, concepts, replays', async (t) => {
  const node = await ensureOpenSearch();
  const prefix = uniquePrefix('projection-pipeline');
  const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true, retireDelayMs: 100 });
  t.teardown(async () => {
    await index.close();
    await deleteIndices(node, prefix);
  });
  const projection = createSearchIndexProjection(index, { vectorDimensions: DIMENSIONS });
  const noTransaction = undefined as unknown as Knex.Transaction;
  const apply = async (...events: RecordedEvent[]) => {
    for (const event of events) await projection.apply(noTransaction, event);
  };
  const repo = `repo-${randomUUID()}`;
  const a = factRecord('Auroras glow near the poles.');
  const b = factRecord('Auroras come from solar wind.');
  const extraction = extracted(repo, [a, b], '2024-05-01T00:00:00.000Z');
  await apply(extraction, embedded(repo, { [a.fact_id]: [1, 0, 0, 0], [b.fact_id]: [0.9, 0.1, 0, 0] }));
  t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [a.fact_id, b.fact_id], 'FactsEmbedded sets vectors');
  await apply(embedded(repo, { [a.fact_id]: [1, 0, 0] }));
  t.equal((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items.length, 2, 'a vector of another dimension is left out, not fatal');

  await apply(factEvent('FactStabilized', a.fact_id, 0, repo, { source_id: 'source-1' }));
  await apply(extraction);
  const statuses = Object.fromEntries((await listing(index, repo)).items.map((item) => [item.id, item.status]));
  t.same(statuses, { [a.fact_id]: 'stable', [b.fact_id]: 'new' }, 'stabilized; a replayed extraction does not move it back to new');

  const merge = factEvent('FactMergedInto', b.fact_id, 0, repo, { survivor_id: a.fact_id, similarity: 0.97, source_id: null, catchup: false });
  await apply(merge, merge);
  t.same(ids((await listing(index, repo)).items), [a.fact_id], 'a merged fact leaves the index');
  t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [0.9, 0.1, 0, 0], k: 5 })).items), [a.fact_id]);
  await apply(factEvent('FactRemoved', b.fact_id, 1, repo, { survivor_id: a.fact_id }));

  // On Kafka a fact's own stream may overtake its source's: the status arrives first.
  const early = factRecord('Early stabilization arrives before the text.');
  await apply(factEvent('FactStabilized', early.fact_id, 0, repo, { source_id: 'source-2' }));
  t.equal((await listing(index, repo)).total, 1, 'a status without text is not found');
  await apply(extracted(repo, [early], '2024-05-02T00:00:00.000Z'));
  t.match((await index.search(facts, { repositoryId: repo, query: 'stabilization', limit: 5, offset: 0 })).items, [{ id: early.fact_id, status: 'stable' }]);

  // The merge may overtake the extraction and the embedding too: they must not bring it back.
  const overtaken = factRecord('Overtaken facts stay merged.');
  await apply(factEvent('FactMergedInto', overtaken.fact_id, 0, repo, { survivor_id: a.fact_id, similarity: 0.95, source_id: null, catchup: false }));
  await apply(factEvent('FactRemoved', overtaken.fact_id, 1, repo, { survivor_id: a.fact_id }));
  await apply(extracted(repo, [overtaken], '2024-05-03T00:00:00.000Z'), embedded(repo, { [overtaken.fact_id]: [0, 0, 0, 1] }));
  await apply(factEvent('FactStabilized', overtaken.fact_id, 0, repo, { source_id: 'source-3' }));
  t.same((await index.search(facts, { repositoryId: repo, query: 'overtaken', limit: 5, offset: 0 })).items, [], 'a late extraction does not revive a merged fact');
  t.notOk(
    ids((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 0, 1], k: 5 })).items).includes(overtaken.fact_id),
    'nor does its late vector',
  );
  t.same(ids((await listing(index, repo)).items).sort(), [a.fact_id, early.fact_id].sort(), 'the listing holds live facts only');

  const concept = randomUUID();
  const created = conceptEvent('ConceptCreated', concept, 0, repo, { canonical_name: 'aurora borealis', context: 'phenomenon', ontology_class: null, aliases: ['northern lights'], source_id: null });
  const added = conceptEvent('ConceptAliasAdded', concept, 1, repo, { alias: 'polar lights' });
  const removed = conceptEvent('ConceptAliasRemoved', concept, 2, repo, { alias: 'northern lights', reason: 'too broad' });
  await apply(created, added, removed);
  const findConcepts = async (query: string) => ids((await index.search(concepts, { repositoryId: repo, query, limit: 5, offset: 0 })).items);
  t.same(await findConcepts('polar'), [concept], 'an added alias finds it');
  t.same(await findConcepts('northern'), [], 'a removed alias does not');
  await apply(created, added);
  t.same(await findConcepts('northern'), [], 'replayed older events change nothing (stream version)');
  t.match((await index.search(concepts, { repositoryId: repo, query: 'aurora', limit: 5, offset: 0 })).items, [
    { id: concept, canonical_name: 'aurora borealis', context: 'phenomenon', aliases: ['polar lights'], status: 'active' },
  ]);
  await apply(conceptEvent('ConceptEmbedded', concept, 3, repo, { model: 'test', dimensions: DIMENSIONS, vector: packVector([0, 0, 1, 0]) }));
  t.same(ids((await index.knn(concepts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 3 })).items), [concept], 'ConceptEmbedded');
  const conceptMerge = conceptEvent('ConceptMergedInto', concept, 4, repo, { survivor_id: randomUUID(), reason: 'duplicate' });
  await apply(conceptMerge, conceptMerge, added);
  t.same(await findConcepts('aurora'), [], 'a merged concept leaves the index; a late alias does not bring it back');
  t.same((await index.knn(concepts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 3 })).items, []);

  const other = randomUUID();
  await apply(conceptEvent('ConceptCreated', other, 0, repo, { canonical_name: 'magnetosphere', context: 'general', ontology_class: null, aliases: [], source_id: null }));
  await apply(deleted(repo));
  t.same(await findConcepts('magnetosphere'), [], 'RepositoryDeleted removes concepts too');
  t.equal((await listing(index, repo)).total, 0);

  t.test('a rebuild replays concepts into the new concepts index', async (t) => {
    const kept = `repo-${randomUUID()}`;
    const id = randomUUID();
    const log = [
      conceptEvent('ConceptCreated', id, 0, kept, { canonical_name: 'ionosphere', context: 'general', ontology_class: null, aliases: ['upper atmosphere'], source_id: null }),
      conceptEvent('ConceptEmbedded', id, 1, kept, { model: 'test', dimensions: DIMENSIONS, vector: packVector([0, 1, 0, 0]) }),
    ];
    await apply(...log);
    const result = await index.rebuildIndex(async (target) => {
      const replay = createSearchIndexProjection(target);
      for (const event of log) await replay.apply(noTransaction, event);
    });
    t.equal(result.indices.concepts.current, `${prefix}-concepts-v2`);
    t.same(ids((await index.search(concepts, { repositoryId: kept, query: 'atmosphere', limit: 5, offset: 0 })).items), [id]);
    t.same(ids((await index.knn(concepts, { repositoryId: kept, vector: [0, 1, 0, 0], k: 1 })).items), [id]);
  });
});

t.test('pipeline events on the Postgres adapter: vectors inside the transaction', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const projection = createSearchIndexProjection(index, { vectorDimensions: DIMENSIONS });
  const apply = (...events: RecordedEvent[]) =>
    db.knex.transaction(async (trx) => {
      for (const event of events) await projection.apply(trx, event);
    });
  const repo = `repo-${randomUUID()}`;
  const a = factRecord('Geysers erupt on a schedule.');
  const b = factRecord('Geysers need underground heat.');
  const extraction = extracted(repo, [a, b], '2024-05-01T00:00:00.000Z');
  await db.knex.transaction((trx) => factsProjection.apply(trx, extraction));
  await apply(extraction, embedded(repo, { [a.fact_id]: [1, 0, 0, 0], [b.fact_id]: [0, 1, 0, 0] }));
  t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items), [a.fact_id, b.fact_id]);
  await apply(factEvent('FactMergedInto', b.fact_id, 0, repo, { survivor_id: a.fact_id, similarity: 0.97, source_id: null, catchup: false }));
  t.same(ids((await index.knn(facts, { repositoryId: repo, vector: [0, 1, 0, 0], k: 5 })).items), [a.fact_id], 'merged: its vector is gone');
  await t.resolves(apply(factEvent('FactStabilized', a.fact_id, 0, repo, { source_id: 's' })), 'status is the facts read model\'s: nothing to write here');

  // A merge and removal that overtook the extraction and embedding (Kafka: another partition).
  const late = factRecord('Geysers spout boiling water.');
  const overtaking = [
    factEvent('FactMergedInto', late.fact_id, 0, repo, { survivor_id: a.fact_id, similarity: 0.96, source_id: null, catchup: false }),
    factEvent('FactRemoved', late.fact_id, 1, repo, { survivor_id: a.fact_id }),
    extracted(repo, [late], '2024-05-02T00:00:00.000Z'),
  ];
  await db.knex.transaction(async (trx) => {
    for (const event of overtaking) await factsProjection.apply(trx, event);
  });
  await apply(...overtaking, embedded(repo, { [late.fact_id]: [0, 0, 0, 1] }));
  t.same(
    ids((await index.knn(facts, { repositoryId: repo, vector: [0, 0, 0, 1], k: 1 })).items),
    [a.fact_id],
    'a late vector of a merged fact neither shows nor takes one of the k places',
  );

  const concept = randomUUID();
  const now = new Date().toISOString();
  await db.knex('concepts').insert({ id: concept, repository_id: repo, canonical_name: 'geyser', name_key: 'geyser', context: 'general', status: 'active', fact_count: 2, created_at: now, updated_at: now });
  await apply(
    conceptEvent('ConceptCreated', concept, 0, repo, { canonical_name: 'geyser', context: 'general', ontology_class: null, aliases: [], source_id: null }),
    conceptEvent('ConceptEmbedded', concept, 1, repo, { model: 'test', dimensions: DIMENSIONS, vector: packVector([0, 0, 1, 0]) }),
  );
  t.match((await index.knn(concepts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items, [{ id: concept, canonical_name: 'geyser', fact_count: 2 }]);
  await apply(conceptEvent('ConceptMergedInto', concept, 2, repo, { survivor_id: randomUUID(), reason: 'duplicate' }));
  t.same((await index.knn(concepts, { repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items, [], 'merged: its vector is gone');
  await apply(deleted(repo));
  t.same((await index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 5 })).items, []);
});
