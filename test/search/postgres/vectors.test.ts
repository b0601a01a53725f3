import t from 'tap';
import { randomUUID } from 'node:crypto';
import type { Database } from '../../../src/db/database.js';
import { facts } from '../../../src/search/collections/index.js';
import { createPostgresSearchIndex, type PostgresSearchOptions } from '../../../src/search/postgres.js';
import { createVectorTables, VECTOR_ROWS_PER_STATEMENT } from '../../../src/search/postgres/vectors.js';
import { fact } from '../contract.js';
import { assertExactNearest, exactNearest, gradedVectors, insertFacts } from '../helpers.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';

const table = { table: 'fact_vectors', key: 'fact_id' };
/** More than PostgreSQL's 65,535 parameters of one statement, as ids alone. */
const PAST_PARAMETER_LIMIT = 66_000;

t.test('a page of tens of thousands of facts writes and removes its vectors (65,535 parameters a statement at most)', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  // Without the HNSW index (as the embedded tier keeps its tables): the statements' size is the
  // subject, and walking pgvector's graph for each of 22,000 inserts took 6 of the file's 8 CPU-s.
  const vectors = createVectorTables(4, { hnswIndex: false });
  const repositoryId = `repo-${randomUUID()}`;
  const count = async () => Number((await db.knex.raw(`SELECT count(*) AS n FROM fact_vectors WHERE repository_id = ?`, [repositoryId])).rows[0].n);

  // Three parameters a row: 22,000 rows were one statement of 66,000, which PostgreSQL refuses.
  const written = Array.from({ length: 22_000 }, (_, n) => ({ id: `fact-${n}`, repository_id: repositoryId, vector: [1, n % 7, n % 11, 2] }));
  t.ok(written.length > VECTOR_ROWS_PER_STATEMENT, 'the rows need several statements');
  await vectors.write(db.knex, table, written);
  t.equal(await count(), written.length, 'every vector is written');

  const manyIds = (prefix: string) => Array.from({ length: PAST_PARAMETER_LIMIT }, (_, n) => `${prefix}-${n}`);
  // Ids named for removal, most of them unknown: each is a parameter of the DELETE.
  await vectors.remove(db.knex, table, repositoryId, [...manyIds('unknown'), 'fact-0', 'fact-1']);
  t.equal(await count(), written.length - 2, 'remove by ids past the limit removes the named vectors');

  await vectors.write(db.knex, table, [...manyIds('absent').map((id) => ({ id, repository_id: repositoryId, vector: null })), { id: 'fact-2', repository_id: repositoryId, vector: null }]);
  t.equal(await count(), written.length - 3, 'vectors set to null past the limit are removed');
});

// Vectors of large embedding models (OpenAI's text-embedding-3-large: 3,072 dimensions) on the
// Postgres adapter. pgvector's HNSW index refuses a `vector` column of more than 2,000 dimensions
// and a `halfvec` of more than 4,000; the `vector` type holds 16,000, the most the configuration
// accepts (docs/configuration.md, "Embedding dimensions").

/** Indexes `count` facts with graded vectors in a repository of their own; answers them and the query. */
async function indexGraded(db: Database, options: PostgresSearchOptions, dimensions: number, count = 30) {
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: dimensions, ...options });
  const repositoryId = `repo-${randomUUID()}`;
  const { query, vectors } = gradedVectors(dimensions, count, dimensions);
  const docs = vectors.map((vector, n) => fact(repositoryId, `Fact ${n} of ${dimensions} dimensions.`, { vector }));
  await insertFacts(db, docs);
  await index.index(facts, docs);
  return { index, repositoryId, query, docs };
}

const indexDefinition = async (db: Database) =>
  (await db.knex.raw(`SELECT indexdef FROM pg_indexes WHERE tablename = 'fact_vectors' AND indexname = 'fact_vectors_embedding'`)).rows[0]?.indexdef ?? null;

t.test('3,072-dimensional vectors are stored and found on the embedded tier (graphs in memory, no pgvector index)', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const { index, repositoryId, query, docs } = await indexGraded(db, { oneConnection: true, nearestInMemory: true }, 3072);
  const type = (await db.knex.raw(`SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = 'fact_vectors'::regclass AND attname = 'embedding'`)).rows[0].type;
  t.equal(type, 'vector(3072)');
  t.equal(await indexDefinition(db), null, 'no pgvector index: the graphs propose the candidates');
  assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: query, k: 5 })).items, exactNearest(docs, query, 5), 'knn');
  const [many] = await index.knnMany(facts, [{ repositoryId, vector: query, k: 12 }]);
  assertExactNearest(t, many.items, exactNearest(docs, query, 12), 'knnMany');
});

/**
 * The plan PostgreSQL makes for the adapter's own k-NN statement (caught as it is sent), with
 * reading and sorting the repository's rows left as a last resort, as on a table too large for
 * that (so few rows would otherwise be read and sorted): only an index that holds the expression
 * the statement orders by can spare the sort.
 */
async function planOfKnn(db: Database, run: () => Promise<unknown>): Promise<string> {
  let caught: { sql: string; bindings: readonly unknown[] } | null = null;
  const record = (query: { sql: string; bindings?: readonly unknown[] }) => {
    if (query.sql.includes('jsonb_to_recordset')) caught = { sql: query.sql, bindings: query.bindings ?? [] };
  };
  db.knex.on('query', record);
  try {
    await run();
  } finally {
    db.knex.removeListener('query', record);
  }
  if (caught === null) throw new Error('no k-NN statement was sent');
  const { sql, bindings } = caught as { sql: string; bindings: readonly unknown[] };
  const trx = await db.knex.transaction();
  try {
    await trx.raw('DROP INDEX fact_vectors_repository');
    await trx.raw('SET LOCAL enable_seqscan = off');
    await trx.raw('SET LOCAL enable_sort = off');
    // knex sends `?` as $1, $2, … in order: back to knex's placeholders for raw.
    const explained = await trx.raw(`EXPLAIN ${sql.replace(/\$\d+/g, '?')}`, [...bindings] as readonly string[]);
    return explained.rows.map((row: { 'QUERY PLAN': string }) => row['QUERY PLAN']).join('\n');
  } finally {
    await trx.rollback();
  }
}

t.test('with pgvector\'s HNSW index (a PostgreSQL server with pgvector): over the column up to 2,000 dimensions, over its unit halfvec up to 4,000, none beyond', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const cases: { dimensions: number; index: RegExp | null; count?: number }[] = [
    { dimensions: 2000, index: /USING hnsw \(embedding vector_cosine_ops\)/ },
    { dimensions: 3072, index: /USING hnsw \(\(\(l2_normalize\(embedding\)\)::halfvec\(3072\)\) halfvec_cosine_ops\)/ },
    { dimensions: 4000, index: /::halfvec\(4000\)\) halfvec_cosine_ops\)/ },
    { dimensions: 4001, index: null },
    // 13 facts, one more than the knnMany below asks for: 30 of 16,000 dimensions were as many
    // numbers as 160 of 3,072 (each written and read as text), and an exact search answers any count.
    { dimensions: 16_000, index: null, count: 13 },
  ];
  for (const { dimensions, index: expectedIndex, count } of cases) {
    await t.test(`${dimensions} dimensions`, async (t) => {
      // Each dimension in a table of its own: one model per deployment.
      await db.knex.raw('DROP TABLE IF EXISTS fact_vectors');
      const { index, repositoryId, query, docs } = await indexGraded(db, {}, dimensions, count);
      const definition = await indexDefinition(db);
      if (expectedIndex === null) t.equal(definition, null, 'no HNSW index: pgvector builds none for so many dimensions');
      else t.match(definition, expectedIndex);
      assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: query, k: 5 })).items, exactNearest(docs, query, 5), 'knn');
      const inOneConnection = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: dimensions, oneConnection: true });
      const [many] = await inOneConnection.knnMany(facts, [{ repositoryId, vector: query, k: 12 }]);
      assertExactNearest(t, many.items, exactNearest(docs, query, 12), 'knnMany, on one connection');
      if (expectedIndex !== null) {
        const plan = await planOfKnn(db, () => index.knn(facts, { repositoryId, vector: query, k: 5 }));
        t.match(plan, /Index Scan using fact_vectors_embedding/, 'the k-NN statement orders by what the index holds, so the index answers');
      }
    });
  }
});

t.test('the halfvec index holds vectors whose values half precision cannot (cosine does not change with a vector\'s length)', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const dimensions = 3072;
  const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: dimensions });
  const repositoryId = `repo-${randomUUID()}`;
  const { query, vectors } = gradedVectors(dimensions, 8, 7);
  // halfvec's largest value is 65,504: a cast of these without normalising first is refused.
  const docs = vectors.map((vector, n) => fact(repositoryId, `Fact ${n}.`, { vector: n === 0 ? vector.map((value) => Math.fround(value * 1e7)) : vector }));
  await insertFacts(db, docs);
  await index.index(facts, docs);
  const largeQuery = query.map((value) => Math.fround(value * 1e7));
  assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: largeQuery, k: 8 })).items, exactNearest(docs, largeQuery, 8), 'knn');
});

t.test('a 3,072-dimension table left without its index (an earlier version failed to build it) gets the index on first use', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  // What an earlier version left when a first use outside a transaction created the table and
  // then failed on "column cannot have more than 2000 dimensions for hnsw index".
  await db.knex.raw(`CREATE TABLE fact_vectors (fact_id text PRIMARY KEY, repository_id text NOT NULL, embedding vector(3072) NOT NULL)`);
  await db.knex.raw(`CREATE INDEX fact_vectors_repository ON fact_vectors (repository_id)`);
  const { index, repositoryId, query, docs } = await indexGraded(db, {}, 3072, 10);
  t.match(await indexDefinition(db), /halfvec_cosine_ops/);
  assertExactNearest(t, (await index.knn(facts, { repositoryId, vector: query, k: 3 })).items, exactNearest(docs, query, 3), 'knn');
});
