import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { openScratchPostgres } from '../../src/db/database.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { createPostgresSearchIndex, KNN_QUERIES_PER_STATEMENT } from '../../src/search/postgres.js';
import { facts } from '../../src/search/collections/index.js';
import { SearchIndexMigrationError, VectorSearchUnavailableError } from '../../src/search/port.js';
import { DIMENSIONS, fact, searchContract, type SearchHarness } from './contract.js';
import { withServers } from '../helpers/servers.js';
import { insertFacts, postgresHarnessOver } from './helpers.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

async function postgresHarness(): Promise<SearchHarness> {
  const db = await openMigratedDatabase();
  return postgresHarnessOver(db, createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: DIMENSIONS }));
}

/**
 * One database for every subtest of a contract run, closed when the run ends: each subtest works
 * in a repository of its own, as the service's repositories share its database. A database per
 * subtest cost about 0.6 CPU-s each, 36 of them.
 */
function sharedHarness(t: Test, open: () => Promise<SearchHarness>): () => Promise<SearchHarness> {
  let shared: Promise<SearchHarness> | null = null;
  t.teardown(async () => {
    if (shared) await (await shared).close();
  });
  return async () => ({ ...(await (shared ??= open())), close: async () => {} });
}

t.test('contract: Postgres adapter on PGlite with pgvector', async (t) => searchContract(t, sharedHarness(t, postgresHarness)));

t.test('contract: the same with the k-NN settings of one connection (as the embedded tier wires it)', async (t) =>
  searchContract(
    t,
    sharedHarness(t, async () => {
      const db = await openMigratedDatabase();
      return postgresHarnessOver(db, createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: DIMENSIONS, oneConnection: true }));
    }),
  ),
);

t.test('contract: the same with k-NN candidates from the graphs in memory (as the embedded tier wires it)', async (t) =>
  searchContract(
    t,
    sharedHarness(t, async () => {
      const db = await openMigratedDatabase();
      return postgresHarnessOver(db, createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: DIMENSIONS, oneConnection: true, nearestInMemory: true }));
    }),
  ),
);

t.test('fact_vectors is created on first use with an HNSW cosine index', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const exists = async () => (await db.knex.raw(`SELECT to_regclass('fact_vectors') AS name`)).rows[0].name;
  t.equal(await exists(), null, 'not before first use');
  await index.index(facts, [fact('repo-a', 'Text only.')]);
  t.equal(await exists(), null, 'documents without vectors need no table');
  await index.index(facts, [fact('repo-a', 'With a vector.', { vector: [1, 2, 3, 4] })]);
  t.equal(await exists(), 'fact_vectors');
  const indexes = (await db.knex.raw(`SELECT indexdef FROM pg_indexes WHERE tablename = 'fact_vectors'`)).rows.map((row: { indexdef: string }) => row.indexdef);
  t.ok(indexes.some((definition: string) => /USING hnsw \(embedding vector_cosine_ops\)/.test(definition)), 'HNSW cosine index');
  const type = (await db.knex.raw(`SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'fact_vectors'::regclass AND attname = 'embedding'`)).rows[0].type;
  t.equal(type, `vector(${DIMENSIONS})`);

  const otherDimension = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: 8 });
  await t.rejects(
    otherDimension.knn(facts, { repositoryId: 'repo-a', vector: [1, 0, 0, 0, 0, 0, 0, 0], k: 1 }),
    SearchIndexMigrationError,
    'another configured dimension is refused with a clear error, not mixed in',
  );
  t.throws(() => createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: 0 }), RangeError, 'dimension 0');
});

t.test('a growing vector table is analyzed (PGlite has no autovacuum), so the planner can choose the HNSW index', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const rowsKnown = async () => Number((await db.knex.raw(`SELECT reltuples FROM pg_class WHERE oid = 'fact_vectors'::regclass`)).rows[0].reltuples);
  const repo = `repo-${randomUUID()}`;
  const docs = Array.from({ length: 500 }, (_, n) => fact(repo, `Fact number ${n}.`, { vector: [Math.cos(n), Math.sin(n), (n % 7) / 7, 1] }));
  await insertFacts(db, docs);
  await index.index(facts, docs.slice(0, 10));
  t.ok((await rowsKnown()) < 10, 'a small table is left to the planner as it is');
  for (let start = 10; start < 250; start += 30) await index.index(facts, docs.slice(start, start + 30));
  t.ok((await rowsKnown()) >= 200, `the planner knows the table's size (${await rowsKnown()} rows)`);
  const firstCount = await rowsKnown();
  for (let start = 250; start < 500; start += 30) await index.index(facts, docs.slice(start, start + 30));
  t.ok((await rowsKnown()) >= 400, `analyzed again once it doubled (${firstCount} → ${await rowsKnown()} rows)`);
  const [nearest] = await index.knnMany(facts, [{ repositoryId: repo, vector: [1, 0, 0, 1], k: 3 }]);
  t.equal(nearest.items.length, 3);
});

t.test('writes join the projection transaction and roll back with it', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const doc = fact('repo-tx', 'Transactional.', { vector: [0, 0, 0, 1] });
  await insertFacts(db, [doc]);
  // PGlite has one connection: a write outside the open transaction would wait for ever.
  await t.rejects(
    db.knex.transaction(async (trx) => {
      await index.withinTransaction!(trx).index(facts, [doc]);
      throw new Error('the batch failed');
    }),
    /the batch failed/,
  );
  t.same((await index.knn(facts, { repositoryId: 'repo-tx', vector: [0, 0, 0, 1], k: 1 })).items, [], 'rolled back, table included');
  await db.knex.transaction(async (trx) => {
    const view = index.withinTransaction!(trx);
    await view.index(facts, [doc]);
    t.same((await view.knn(facts, { repositoryId: 'repo-tx', vector: [0, 0, 0, 1], k: 1 })).items.map((item) => item.id), [doc.id], 'visible inside');
  });
  t.same((await index.knn(facts, { repositoryId: 'repo-tx', vector: [0, 0, 0, 1], k: 1 })).items.map((item) => item.id), [doc.id], 'committed');
  await db.knex.transaction((trx) => index.withinTransaction!(trx).removeRepository('repo-tx'));
  t.same((await index.knn(facts, { repositoryId: 'repo-tx', vector: [0, 0, 0, 1], k: 1 })).items, []);
});

for (const oneConnection of [false, true]) t.test(`k-NN finds k facts of a small repository among many of others${oneConnection ? ' (one connection)' : ''}`, async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS, oneConnection });
  // Without iterative scans, HNSW would return its ef_search nearest overall and the filter would
  // leave the small repository with fewer than k.
  const crowd = Array.from({ length: 600 }, (_, position) =>
    fact('repo-crowd', `Crowd ${position}.`, { vector: [1, Math.sin(position), Math.cos(position) / 10, 0.01] }),
  );
  const few = Array.from({ length: 5 }, (_, position) => fact('repo-few', `Few ${position}.`, { vector: [-1, position, 0, 1] }));
  await insertFacts(db, [...crowd, ...few]);
  await index.index(facts, [...crowd, ...few]);
  // So few rows would be read exactly (sequential scan, or the repository index and a sort):
  // leave the planner only the HNSW index, the plan a large table gets. PGlite is one
  // connection, so the session setting reaches the adapter's queries.
  await db.knex.raw('DROP INDEX fact_vectors_repository');
  await db.knex.raw('SET enable_seqscan = off');
  const plan = (await db.knex.raw(
    `EXPLAIN SELECT fact_id FROM fact_vectors WHERE repository_id = 'repo-few' ORDER BY embedding <=> '[1,0,0,0]' LIMIT 5`,
  )).rows.map((row: { 'QUERY PLAN': string }) => row['QUERY PLAN']).join('\n');
  t.match(plan, /fact_vectors_embedding/, 'the HNSW index answers');
  const statements: string[] = [];
  const record = (query: { sql: string }) => statements.push(query.sql);
  db.knex.on('query', record);
  const result = await index.knn(facts, { repositoryId: 'repo-few', vector: [1, 0, 0, 0], k: 5 });
  const again = await index.knn(facts, { repositoryId: 'repo-few', vector: [1, 0, 0, 0], k: 5 });
  db.knex.removeListener('query', record);
  t.equal(result.items.length, 5);
  t.ok(result.items.every((item) => item.content.startsWith('Few')));
  t.same(again, result);
  if (oneConnection) {
    t.equal(statements.filter((sql) => /^SET hnsw\.iterative_scan/.test(sql)).length, 1, 'the iterative scan is set once for the session');
    t.equal(statements.length, 3, 'then each query is one statement, outside a transaction');
  } else {
    t.equal(statements.filter((sql) => /^BEGIN|^COMMIT|SET LOCAL|set_config/.test(sql)).length, 8, 'each query sets its settings in a transaction');
  }
  // More neighbours than pgvector's default ef_search: the per-query settings, also on one connection.
  statements.length = 0;
  db.knex.on('query', record);
  const many = await index.knn(facts, { repositoryId: 'repo-crowd', vector: [1, 0, 0, 0], k: 60 });
  db.knex.removeListener('query', record);
  t.equal(many.items.length, 60);
  if (oneConnection) {
    t.equal(statements.length, 1, 'on one connection, still one statement');
    t.match(statements[0], /set_config\('hnsw\.ef_search'/, 'which carries its ef_search');
    const after = await db.knex.raw(`SELECT current_setting('hnsw.ef_search') AS ef_search`);
    t.equal(after.rows[0].ef_search, '40', 'and leaves the session at the default');
    // Without iterative scans HNSW returns at most ef_search rows: 60 back means the statement's 60 was in force.
    await db.knex.raw('SET hnsw.iterative_scan = off');
    t.equal((await index.knn(facts, { repositoryId: 'repo-crowd', vector: [1, 0, 0, 0], k: 60 })).items.length, 60, 'the ef_search it carries is in force for its scan');
    await db.knex.raw('SET hnsw.iterative_scan = strict_order');
  } else t.equal(statements.filter((sql) => /^BEGIN|^COMMIT|SET LOCAL|set_config/.test(sql)).length, 4, 'in a transaction');
  // The settings in force are the same as in a transaction's SET LOCAL: the same answer.
  const inTransaction = await db.knex.transaction((trx) => index.withinTransaction!(trx).knn(facts, { repositoryId: 'repo-crowd', vector: [1, 0, 0, 0], k: 60 }));
  t.same(many, inTransaction, 'as answered inside a transaction with SET LOCAL');
});

t.test('on one connection, knnMany outside a transaction sends its queries a few per statement, answering the same', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS, oneConnection: true });
  const stored = Array.from({ length: 12 }, (_, position) => fact('repo-k', `Fact ${position}.`, { vector: [1, Math.sin(position), Math.cos(position), 0.1] }));
  await insertFacts(db, stored);
  await index.index(facts, stored);
  const queries = Array.from({ length: 9 }, (_, position) => ({ repositoryId: 'repo-k', vector: [Math.cos(position), 1, Math.sin(position), 0], k: 3 }));
  const knnStatements: string[] = [];
  const record = (query: { sql: string }) => {
    if (query.sql.includes('jsonb_to_recordset')) knnStatements.push(query.sql);
  };
  db.knex.on('query', record);
  const answers = await index.knnMany(facts, queries);
  t.equal(knnStatements.length, Math.ceil(queries.length / KNN_QUERIES_PER_STATEMENT), 'a statement per few queries: a request can go between them');
  knnStatements.length = 0;
  const inTransaction = await db.knex.transaction((trx) => (index.withinTransaction?.(trx) ?? index).knnMany(facts, queries));
  t.equal(knnStatements.length, 1, 'in a transaction, which holds the connection anyway, one statement');
  db.knex.removeListener('query', record);
  t.same(inTransaction, answers);
  for (const [position, query] of queries.entries()) {
    t.same(answers[position], await index.knn(facts, query), `query ${position} answered as knn answers it`);
  }
});

// The server half of this file: not in `make test-unit` (see test/helpers/servers.ts).
if (withServers) t.test('on a PostgreSQL server without pgvector', async (t) => {
  const db = await openScratchPostgres(undefined, 'factlog_search');
  t.teardown(() => db.close());
  await migrateReadModels(db.knex);
  t.equal(db.hasVector, false, 'this server has no pgvector');
  const index = createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: DIMENSIONS });
  const repo = `repo-${randomUUID()}`;
  const doc = fact(repo, 'Lexical search still works on the server.', { vector: [1, 0, 0, 0] });
  await insertFacts(db, [doc]);
  await t.resolves(index.index(facts, [doc]), 'vectors are ignored on write');
  t.same((await index.search(facts, { repositoryId: repo, query: 'lexical server', limit: 10, offset: 0 })).items.map((item) => item.id), [doc.id]);
  await t.rejects(index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 }), VectorSearchUnavailableError);
  await t.resolves(index.removeRepository(repo));
  const unconfigured = createPostgresSearchIndex(db.knex);
  await t.rejects(unconfigured.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 }), {
    name: 'VectorSearchUnavailableError',
    message: /no pgvector/,
  });
});

t.test('a transaction that writes vectors while a k-NN outside it creates the table does not deadlock PGlite', async (t) => {
  // After a restart the table check runs again. A job's k-NN (outside any transaction) started it
  // and queued for PGlite's one connection, which a projection batch's transaction held; that
  // transaction then waited for the same check: a deadlock that froze the whole service.
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS });
  const repo = `repo-${randomUUID()}`;
  const doc = fact(repo, 'Written in a transaction.', { vector: [1, 0, 0, 0] });
  await insertFacts(db, [doc]);
  let outside: Promise<unknown> = Promise.resolve();
  await db.knex.transaction(async (trx) => {
    await trx.raw('SELECT 1'); // the transaction holds the connection from here on
    outside = index.knn(facts, { repositoryId: repo, vector: [1, 0, 0, 0], k: 1 });
    await new Promise((resolve) => setImmediate(resolve)); // the k-NN has begun its table check
    await index.withinTransaction?.(trx).index(facts, [doc]);
  });
  const found = (await outside) as { items: Array<{ id: string }> };
  t.same(found.items.map((item) => item.id), [doc.id], 'the k-NN ran after the transaction and found its vector');
});
