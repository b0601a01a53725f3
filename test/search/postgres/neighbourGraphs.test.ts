import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { Index } from 'usearch';
import { createPostgresSearchIndex } from '../../../src/search/postgres.js';
import { createNeighbourGraphs } from '../../../src/search/postgres/neighbourGraphs.js';
import { facts } from '../../../src/search/collections/index.js';
import { cosineSimilarity } from '../../../src/interchange/vectors.js';
import { DIMENSIONS, fact } from '../contract.js';
import { insertFacts } from '../helpers.js';
import type { Database } from '../../../src/db/database.js';
import type { FactDocument } from '../../../src/search/collections/facts.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';

/** The embedded tier's wiring: one connection, k-NN candidates from the graphs in memory. */
const inMemory = (db: Database) => createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS, oneConnection: true, nearestInMemory: true });

const cosine = cosineSimilarity;

/** A deterministic spread of vectors (no two alike, none all zeros). */
const spread = (n: number) => [Math.cos(n * 1.7) + 0.01 * n, Math.sin(n * 0.9), Math.cos(n * 0.31) * 0.5, 1 + Math.sin(n * 2.3) * 0.8];

/** A fresh vector database with the embedded tier's search index over it, and a repository id of its own. */
const openGraphIndex = async (t: Test) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  return { db, index: inMemory(db), repositoryId: `repo-${randomUUID()}` };
};

/** Counts the calls of a usearch `Index` method in every graph until the test ends. */
const countCalls = <M extends 'add' | 'search'>(t: Test, method: M) => {
  const counter = { count: 0 };
  const original: Index[M] = Index.prototype[method];
  Index.prototype[method] = function (this: Index, ...args: unknown[]) {
    counter.count += 1;
    return Reflect.apply(original, this, args) as ReturnType<Index[M]>;
  } as Index[M];
  t.teardown(() => {
    Index.prototype[method] = original;
  });
  return counter;
};

const indexedFacts = async (db: Database, index: ReturnType<typeof inMemory>, repositoryId: string, count: number, extra: (n: number) => Partial<FactDocument> = () => ({})) => {
  const docs = Array.from({ length: count }, (_, n) => fact(repositoryId, `Fact ${n} of ${repositoryId}.`, { vector: spread(n), ...extra(n) }));
  await insertFacts(db, docs);
  await index.index(facts, docs);
  return docs;
};

t.test('the vector table gets no HNSW index, and one left by an earlier version is dropped', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const indexNames = async () => (await db.knex.raw(`SELECT indexname FROM pg_indexes WHERE tablename = 'fact_vectors' ORDER BY 1`)).rows.map((row: { indexname: string }) => row.indexname);
  // An earlier version's table, with pgvector's HNSW index.
  const withHnsw = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS, oneConnection: true });
  await indexedFacts(db, withHnsw, 'repo-a', 3);
  t.ok((await indexNames()).includes('fact_vectors_embedding'), 'the earlier version built the HNSW index');
  const index = inMemory(db);
  const found = await index.knn(facts, { repositoryId: 'repo-a', vector: spread(1), k: 1 });
  t.same(found.items.map((item) => item.content), ['Fact 1 of repo-a.'], 'the vectors written before are found (the graph loads the table)');
  t.same(await indexNames(), ['fact_vectors_pkey', 'fact_vectors_repository'], 'the HNSW index is gone');

  const fresh = await openMigratedDatabase();
  t.teardown(() => fresh.close());
  await indexedFacts(fresh, inMemory(fresh), 'repo-b', 2);
  const created = (await fresh.knex.raw(`SELECT indexname FROM pg_indexes WHERE tablename = 'fact_vectors' ORDER BY 1`)).rows.map((row: { indexname: string }) => row.indexname);
  t.same(created, ['fact_vectors_pkey', 'fact_vectors_repository'], 'a new table is created without one');
});

t.test('answers as an exact search would: the nearest by cosine, each query in the statement looking its candidates up by id', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  const docs = await indexedFacts(db, index, repositoryId, 400);
  await indexedFacts(db, index, `other-${randomUUID()}`, 50);
  const queries = Array.from({ length: 12 }, (_, n) => ({ repositoryId, vector: spread(1000 + n * 7), k: 8 }));
  const statements: string[] = [];
  const record = (query: { sql: string }) => statements.push(query.sql);
  db.knex.on('query', record);
  const answers = await index.knnMany(facts, queries);
  db.knex.removeListener('query', record);
  for (const [position, query] of queries.entries()) {
    const exact = [...docs].sort((a, b) => cosine(b.vector as number[], query.vector) - cosine(a.vector as number[], query.vector)).slice(0, query.k);
    t.same(answers[position].items.map((item) => item.id), exact.map((doc) => doc.id), `query ${position}: the exact nearest, nearest first`);
    t.ok(Math.abs(answers[position].items[0].score - cosine(exact[0].vector as number[], query.vector)) < 1e-5, `query ${position}: the score is the cosine similarity`);
  }
  const knnStatements = statements.filter((sql) => sql.includes('jsonb_to_recordset'));
  t.ok(knnStatements.length > 0 && knnStatements.every((sql) => sql.includes('= ANY(qv.candidates)')), 'each statement looks its candidates up');
  t.notOk(statements.some((sql) => /hnsw\./.test(sql)), 'no HNSW setting is sent');
});

t.test('widens its candidates while too few pass the filters, and returns fewer only when none are left', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  // 300 tables near the query, 5 texts far from it: the first candidates are all tables.
  const near = Array.from({ length: 300 }, (_, n) => fact(repositoryId, `Near ${n}.`, { fact_kind: 'table', vector: [1, 0.001 * n, 0, 0] }));
  const far = Array.from({ length: 5 }, (_, n) => fact(repositoryId, `Far ${n}.`, { fact_kind: 'text', vector: [0, 1, 0.1 * n, 0] }));
  await insertFacts(db, [...near, ...far]);
  await index.index(facts, [...near, ...far]);
  const texts = await index.knn(facts, { repositoryId, vector: [1, 0, 0, 0], k: 5, filters: { fact_kind: 'text' } });
  t.same(texts.items.map((item) => item.content).sort(), far.map((doc) => doc.content).sort(), 'the five texts, found past 300 nearer tables');
  const more = await index.knn(facts, { repositoryId, vector: [1, 0, 0, 0], k: 9, filters: { fact_kind: 'text' } });
  t.equal(more.items.length, 5, 'no more than there are');
  // Merged facts are hidden: their rows say so, whatever the graph holds.
  await db.knex('facts').where({ repository_id: repositoryId }).whereIn('id', near.slice(0, 10).map((doc) => doc.id)).update({ status: 'merged' });
  const unmerged = await index.knn(facts, { repositoryId, vector: [1, 0, 0, 0], k: 3 });
  t.same(unmerged.items.map((item) => item.content), ['Near 10.', 'Near 11.', 'Near 12.'], 'merged facts skipped, k found');
  const restricted = await index.knn(facts, { repositoryId, vector: [1, 0, 0, 0], k: 2, ids: [far[3].id, near[200].id, far[0].id] });
  t.same(restricted.items.map((item) => item.content), ['Near 200.', 'Far 0.'], 'a query restricted to ids compares exactly those');
});

t.test('with minScore only the candidates that may be that close reach the database, and none go when none are', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  const docs = await indexedFacts(db, index, repositoryId, 300);
  const statements: Array<{ sql: string; bindings: readonly unknown[] }> = [];
  const record = (query: { sql: string; bindings?: readonly unknown[] }) => statements.push({ sql: query.sql, bindings: query.bindings ?? [] });
  db.knex.on('query', record);
  t.teardown(() => db.knex.removeListener('query', record));

  const vector = spread(17);
  const minScore = 0.995;
  const exact = docs
    .map((doc) => ({ id: doc.id, score: cosine(doc.vector as number[], vector) }))
    .filter(({ score }) => score >= minScore)
    .sort((a, b) => b.score - a.score)
    .slice(0, 20);
  t.ok(exact.length >= 1 && exact.length < 20, `a few facts are that close (${exact.length}), fewer than k`);
  const answer = await index.knn(facts, { repositoryId, vector, k: 20, minScore });
  t.same(answer.items.map((item) => item.id), exact.map(({ id }) => id), 'the exact answer: those at least that similar, nearest first');
  const knn = statements.filter(({ sql }) => sql.includes('jsonb_to_recordset'));
  t.equal(knn.length, 1, 'one statement: no widening, the graph knows the rest is farther');
  const sent = JSON.parse(String(knn[0].bindings.find((binding) => typeof binding === 'string' && binding.includes('candidates')))) as Array<{ candidates: string[] }>;
  t.ok(sent[0].candidates.length < 30, `only the close candidates are looked up (${sent[0].candidates.length} of the 30 the graph gave)`);

  statements.length = 0;
  const far = await index.knnMany(facts, [
    { repositoryId, vector: [0, 0, -1, -1], k: 20, minScore },
    { repositoryId, vector: [0, -1, 0, -1], k: 20, minScore },
  ]);
  t.same(far.map((one) => one.items), [[], []], 'nothing that close: nothing');
  t.equal(statements.filter(({ sql }) => sql.includes('jsonb_to_recordset')).length, 0, 'and no statement at all');
});

t.test('follows writes: set at once, removed on commit, put back from the table when a transaction rolls back', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  // Enough facts that the graph's candidates for a query are its neighbourhood, not every fact.
  const [first, second, third] = await indexedFacts(db, index, repositoryId, 200);
  const nearestTo = async (vector: number[]) => (await index.knn(facts, { repositoryId, vector, k: 1 })).items.map((item) => item.id);
  t.same(await nearestTo(spread(0)), [first.id], 'loaded');

  // A new vector for `first`, found inside its transaction; that transaction rolls back.
  await t.rejects(
    db.knex.transaction(async (trx) => {
      const view = index.withinTransaction!(trx);
      await view.update(facts, [{ id: first.id, repository_id: repositoryId, vector: [0, 0, -1, 0] }]);
      t.same(await view.knn(facts, { repositoryId, vector: [0, 0, -1, 0], k: 1 }).then((found) => found.items.map((item) => item.id)), [first.id], 'found inside its transaction');
      throw new Error('the batch failed');
    }),
    /the batch failed/,
  );
  // The graph reads the rolled-back id again from the table; a k-NN after that finds the old vector.
  let back: string[] = [];
  for (let attempt = 0; attempt < 50 && back[0] !== first.id; attempt++) back = await nearestTo(spread(0));
  t.same(back, [first.id], 'the stored vector is the one the graph holds again');
  const scored = await index.knn(facts, { repositoryId, vector: spread(0), k: 1 });
  t.ok(scored.items[0].score > 0.9999, 'and its score is the stored vector’s');

  // A removal rolled back leaves the vector; one committed takes it.
  await t.rejects(
    db.knex.transaction(async (trx) => {
      await index.withinTransaction!(trx).remove(facts, repositoryId, [second.id]);
      throw new Error('again');
    }),
    /again/,
  );
  t.same(await nearestTo(spread(1)), [second.id], 'a rolled-back removal leaves the vector');
  await db.knex.transaction((trx) => index.withinTransaction!(trx).remove(facts, repositoryId, [second.id]));
  t.notSame(await nearestTo(spread(1)), [second.id], 'a committed removal takes it');
  t.same(await nearestTo(spread(2)), [third.id], 'and leaves the others');
  await index.removeRepository(repositoryId);
  t.same(await nearestTo(spread(0)), [], 'removing the repository empties its graph');
  const graphs = createNeighbourGraphs(db.knex, DIMENSIONS);
  t.equal(graphs.sizeOf('fact_vectors', repositoryId), null, 'a graph is loaded only when asked for');
});

t.test('a write made while a graph loads wins over the row the load reads', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  const [doc] = await indexedFacts(db, index, repositoryId, 1);
  const graphs = createNeighbourGraphs(db.knex, DIMENSIONS);
  const table = { table: 'fact_vectors', key: 'fact_id' };
  // The load starts (its read is queued on the connection); the write lands before it is applied.
  const loading = graphs.nearest(db.knex, table, repositoryId, [0, 0, 0, 1], 1);
  graphs.written(db.knex, table, [{ id: doc.id, repository_id: repositoryId, vector: [0, 0, 0, 1] }, { id: 'late', repository_id: repositoryId, vector: [0, 0, 1, 0] }]);
  t.same((await loading).ids, [doc.id], 'the written vector, not the row read');
  t.equal(graphs.sizeOf('fact_vectors', repositoryId), 2);
  graphs.written(db.knex, table, [{ id: 'late', repository_id: repositoryId, vector: null }]);
  t.equal(graphs.sizeOf('fact_vectors', repositoryId), 1, 'a vector set to null leaves the graph');
  t.same(await graphs.nearest(db.knex, table, repositoryId, [0, 0, 1, 0], 5), { ids: [doc.id], exhausted: true });
});

t.test('many graph searches let the event loop turn between them', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  await indexedFacts(db, index, repositoryId, 200);
  // Count the graph's searches; a chain of immediates notes how many were done at each turn.
  const searches = countCalls(t, 'search');
  const seenAtTurns: number[] = [];
  let running = true;
  const note = () => {
    seenAtTurns.push(searches.count);
    if (running) setImmediate(note);
  };
  // A similarity no fact reaches: the answer needs no statement, only graph searches.
  const queries = Array.from({ length: 3000 }, (_, n) => ({ repositoryId, vector: spread(5000 + n), k: 5, minScore: 0.99999999 }));
  await index.knn(facts, queries[0]); // the graph is loaded before the count starts
  searches.count = 0;
  setImmediate(note);
  const answers = await index.knnMany(facts, queries);
  running = false;
  t.equal(searches.count, 3000, 'one graph search per query');
  t.ok(answers.every((answer) => answer.items.length === 0));
  t.ok(seenAtTurns.some((count) => count > 0 && count < 3000), `the loop turned while the searches ran (counts seen: ${seenAtTurns.slice(0, 5).join(', ')}…)`);
});

t.test('a written vector is pending: compared exactly at once, added to the HNSW index at later turns of the event loop', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  await indexedFacts(db, index, `other-${randomUUID()}`, 1); // the vector table exists
  const graphs = createNeighbourGraphs(db.knex, DIMENSIONS);
  const table = { table: 'fact_vectors', key: 'fact_id' };
  const additions = countCalls(t, 'add');
  t.same(await graphs.nearest(db.knex, table, repositoryId, spread(0), 3), { ids: [], exhausted: true }, 'an empty graph, loaded');

  const vectors = Array.from({ length: 300 }, (_, n) => ({ id: `v${n}`, repository_id: repositoryId, vector: spread(n) }));
  graphs.written(db.knex, table, vectors.slice(0, 200));
  await graphs.added();
  t.equal(additions.count, 200, 'the first 200 are in the index once added() resolves');
  t.equal(graphs.pendingOf('fact_vectors', repositoryId), 0);

  graphs.written(db.knex, table, vectors.slice(200));
  t.equal(additions.count, 200, 'writing adds nothing to the index in the writer’s turn');
  t.equal(graphs.pendingOf('fact_vectors', repositoryId), 100, 'the new vectors are pending');
  t.equal(graphs.sizeOf('fact_vectors', repositoryId), 300, 'and held');
  const exactNearest = (query: number[], count: number, minScore = -Infinity) =>
    vectors
      .map(({ id, vector }) => ({ id, score: cosine(vector, query) }))
      .filter(({ score }) => score >= minScore)
      .sort((a, b) => b.score - a.score)
      .slice(0, count)
      .map(({ id }) => id);
  for (const n of [205, 250, 17, 3001]) {
    const query = spread(n);
    const { ids } = await graphs.nearest(db.knex, table, repositoryId, query, 10);
    t.same(ids, exactNearest(query, 10), `query ${n}: the index’s and the pending vectors merged, nearest first`);
  }
  const close = await graphs.nearest(db.knex, table, repositoryId, spread(250), 50, 0.9999);
  t.same(close, { ids: exactNearest(spread(250), 50, 0.9999), exhausted: true }, 'with minScore: only the close ones, pending or not, and nothing more to give');
  t.ok(close.ids.includes('v250'), 'a pending vector among them');
  const cut = await graphs.nearest(db.knex, table, repositoryId, spread(250), 2);
  t.equal(cut.exhausted, false, 'a cut answer is not exhausted');

  graphs.written(db.knex, table, [{ id: 'v250', repository_id: repositoryId, vector: null }]);
  t.notOk((await graphs.nearest(db.knex, table, repositoryId, spread(250), 10)).ids.includes('v250'), 'a pending vector removed (outside a transaction: at once) is gone');
  await graphs.added();
  t.equal(additions.count, 299, 'the rest are added, the removed one not');
  t.equal(graphs.pendingOf('fact_vectors', repositoryId), 0);
  t.same((await graphs.nearest(db.knex, table, repositoryId, spread(205), 10)).ids, exactNearest(spread(205), 10), 'the index alone answers the same');

  graphs.written(db.knex, table, vectors.slice(0, 50).map((vector) => ({ ...vector, vector: spread(9000 + Number(vector.id.slice(1))) })));
  graphs.removed(db.knex, table, repositoryId, null);
  await graphs.added();
  t.equal(additions.count, 299, 'the pending vectors of a removed repository’s graph are dropped, not added');
});

t.test('pending vectors are added a few milliseconds at a turn: the event loop turns between', async (t) => {
  const { db, index, repositoryId } = await openGraphIndex(t);
  await indexedFacts(db, index, `other-${randomUUID()}`, 1); // the vector table exists
  // Wide vectors, so that adding them takes long enough to need many turns.
  const dimensions = 384;
  const graphs = createNeighbourGraphs(db.knex, dimensions);
  const table = { table: 'fact_vectors', key: 'fact_id' };
  await graphs.nearest(db.knex, table, repositoryId, new Array<number>(dimensions).fill(1), 1);
  const wide = (n: number) => Array.from({ length: dimensions }, (_, i) => Math.sin(n * 0.37 + i * 1.3) + 0.01);
  graphs.written(db.knex, table, Array.from({ length: 3000 }, (_, n) => ({ id: `w${n}`, repository_id: repositoryId, vector: wide(n) })));
  const seen: number[] = [];
  let watching = true;
  const note = () => {
    seen.push(graphs.pendingOf('fact_vectors', repositoryId) ?? -1);
    if (watching) setImmediate(note);
  };
  setImmediate(note);
  await graphs.added();
  watching = false;
  t.equal(graphs.pendingOf('fact_vectors', repositoryId), 0, 'all added');
  t.ok(seen.filter((count) => count > 0 && count < 3000).length >= 3, `the loop turned while they were added (pending seen: ${seen.slice(0, 5).join(', ')}…)`);
});
