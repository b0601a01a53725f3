import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { ExtractedFactRecord } from '../../src/domain/source/decider.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import { factsProjection } from '../../projections/facts.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { createPostgresSearchIndex } from '../../src/search/postgres.js';
import type { SearchIndex } from '../../src/search/port.js';
import { DIMENSIONS } from './contract.js';
import { deleteIndices, ensureOpenSearch, openVectorPglite, uniquePrefix } from './helpers.js';

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
  return { fact_id: randomUUID(), content, content_hash: `hash-${randomUUID()}`, source_text: content, chunk_index: 0 };
}

async function listing(index: SearchIndex, repositoryId: string) {
  return index.searchFacts({ repositoryId, query: '', limit: 100, offset: 0 });
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
  t.same(projection.eventTypes, ['FactsExtracted', 'RepositoryDeleted']);
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
    status: 'stable',
    created_at: '2024-05-01T00:00:00.000Z',
  });

  await apply(first);
  t.same(await listing(index, repo), once, 're-applying the event leaves the index as it was');

  // An embedding stage (a later issue) sets a vector; re-applying the extraction keeps it.
  await index.indexFacts([{ ...once.items.find((item) => item.id === tides.fact_id)!, repository_id: repo, vector: [0, 0, 1, 0] }]);
  await apply(first);
  t.same((await index.searchFactsByVector({ repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items.map((item) => item.id), [tides.fact_id], 'the vector survives a replay');

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
  t.same((await index.searchFactsByVector({ repositoryId: repo, vector: [0, 0, 1, 0], k: 1 })).items, [], 'and their vectors');
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
    const result = await index.rebuildIndex(async (_write, target) => {
      const replay = createSearchIndexProjection(target);
      for (const event of log) await replay.apply(noTransaction, event);
    });
    t.equal(result.written, 5, 'the fill wrote one document per extracted fact per event');
    t.same([await listing(index, kept), await listing(index, reused)], live, 'same documents, times and order');
  });
});

t.test('search-index projection on the Postgres adapter', async (t: Test) => {
  const db = await openVectorPglite();
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
  t.same((await index.searchFacts({ repositoryId: repo, query: 'basalt', limit: 5, offset: 0 })).items.map((item) => item.id), [fact.fact_id]);
  await index.indexFacts([
    { id: fact.fact_id, repository_id: repo, content: fact.content, content_hash: fact.content_hash, fact_kind: 'text', status: 'stable', created_at: event.occurredAt, vector: [1, 1, 0, 0] },
  ]);
  await inRunnerTransaction((trx) => projection.apply(trx, event));
  t.equal((await index.searchFactsByVector({ repositoryId: repo, vector: [1, 1, 0, 0], k: 1 })).items.length, 1, 'a replayed extraction keeps the vector');
  await inRunnerTransaction((trx) => projection.apply(trx, deleted(repo)));
  t.same((await index.searchFactsByVector({ repositoryId: repo, vector: [1, 1, 0, 0], k: 1 })).items, [], 'RepositoryDeleted removes the vectors inside the transaction');
});
