import t from 'tap';
import { randomUUID } from 'node:crypto';
import { createVectorTables, VECTOR_ROWS_PER_STATEMENT } from '../../../src/search/postgres/vectors.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';

const table = { table: 'fact_vectors', key: 'fact_id' };
/** More than PostgreSQL's 65,535 parameters of one statement, as ids alone. */
const PAST_PARAMETER_LIMIT = 66_000;

t.test('a page of tens of thousands of facts writes and removes its vectors (65,535 parameters a statement at most)', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const vectors = createVectorTables(4);
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
