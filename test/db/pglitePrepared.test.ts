import { PGlite } from '@electric-sql/pglite';
import t, { type Test } from 'tap';
import { PreparedStatements } from '../../src/db/pglitePrepared.js';
import { pgliteWasmModules } from '../../src/db/pgliteWasm.js';
import { pgliteStartParams, pgliteTemplate } from '../helpers/pglite.js';

async function openPglite(t: Test): Promise<PGlite> {
  const pglite = await PGlite.create({ dataDir: 'memory://', loadDataDir: await pgliteTemplate(), startParams: pgliteStartParams, ...(await pgliteWasmModules()) });
  t.teardown(() => pglite.close());
  return pglite;
}

/** The names this session has prepared, as PostgreSQL knows them. */
async function preparedNames(pglite: PGlite): Promise<string[]> {
  const result = await pglite.query<{ name: string }>(`SELECT name FROM pg_prepared_statements WHERE name LIKE 'factlog\\_%' ORDER BY name`);
  return result.rows.map((row) => row.name);
}

async function rejection(promise: Promise<unknown>): Promise<Error & { code?: string; query?: string }> {
  return promise.then(
    () => {
      throw new Error('expected a rejection');
    },
    (error: unknown) => error as Error & { code?: string; query?: string },
  );
}

t.test('answers what PGlite.query answers: parameters of every kind, rows, fields, counts, row mode', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite);
  const columns = '(id bigint PRIMARY KEY, name text, tags text[], doc jsonb, seen timestamptz, ok boolean, score real)';
  await pglite.exec(`CREATE TABLE prepared_things ${columns}; CREATE TABLE plain_things ${columns}`);
  const insert = (table: string) => `INSERT INTO ${table} (id, name, tags, doc, seen, ok, score) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *`;
  const rows: unknown[][] = [
    [1, 'Zürich ✓', ['a', 'b'], { x: [1, 2] }, new Date('2026-01-02T03:04:05.678Z'), true, 0.5],
    [2, null, [], '{"y": null}', '2026-02-03T04:05:06Z', false, '1.25'],
    [3, '', null, null, undefined, null, null],
  ];
  for (const params of rows) t.same(await statements.query(insert('prepared_things'), params), await pglite.query(insert('plain_things'), params));
  const select = (table: string) => `SELECT * FROM ${table} WHERE id = ANY($1::bigint[]) ORDER BY id`;
  t.same(await statements.query(select('prepared_things'), [[1, 2, 3]]), await pglite.query(select('plain_things'), [[1, 2, 3]]));
  t.same(
    await statements.query(select('prepared_things'), [[3, 1]], { rowMode: 'array' }),
    await pglite.query(select('plain_things'), [[3, 1]], { rowMode: 'array' }),
  );
  const update = (table: string) => `UPDATE ${table} SET ok = NOT coalesce(ok, false) WHERE id > $1`;
  t.same(await statements.query(update('prepared_things'), [1]), await pglite.query(update('plain_things'), [1]));
  t.same(await statements.query('SELECT 1 AS one'), await pglite.query('SELECT 1 AS one'));
});

t.test('a statement is parsed once and then executed by name, in a transaction that rolled back too', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite);
  await statements.query('BEGIN');
  t.same((await statements.query('SELECT $1::int + 1 AS n', [1])).rows, [{ n: 2 }]);
  await statements.query('ROLLBACK');
  t.same((await statements.query('SELECT $1::int + 1 AS n', [41])).rows, [{ n: 42 }]);
  t.same((await statements.query('SELECT $1::int + 1 AS n', [1])).rows, [{ n: 2 }]);
  t.equal(statements.size, 3, 'BEGIN, the select and ROLLBACK');
  t.same(await preparedNames(pglite), ['factlog_1', 'factlog_2', 'factlog_3']);
  const plans = await pglite.query<{ generic_plans: number; custom_plans: number }>(
    `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'factlog_2'`,
  );
  t.equal(Number(plans.rows[0].generic_plans) + Number(plans.rows[0].custom_plans), 3, 'the select ran three times under one name');
});

t.test('keeps at most `capacity` statements, closing the least recently used', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite, 2);
  await statements.query('SELECT 1 AS a');
  await statements.query('SELECT 2 AS b');
  await statements.query('SELECT 1 AS a'); // now the most recently used
  await statements.query('SELECT 3 AS c'); // evicts `b`, closed with the next execution
  t.equal(statements.size, 2);
  t.same((await statements.query('SELECT 1 AS a')).rows, [{ a: 1 }]);
  t.same(await preparedNames(pglite), ['factlog_1', 'factlog_3'], 'b (factlog_2) is closed in the session');
  t.same((await statements.query('SELECT 2 AS b')).rows, [{ b: 2 }], 'an evicted statement is prepared again');
  t.throws(() => new PreparedStatements(pglite, 0), RangeError);
});

t.test('errors are PGlite.query errors, the session stays usable, and a failed parse is not kept', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite);
  await pglite.exec('CREATE TABLE unique_things (id int PRIMARY KEY)');
  const insert = 'INSERT INTO unique_things (id) VALUES ($1)';
  await statements.query(insert, [1]);
  const duplicate = await rejection(statements.query(insert, [1]));
  const plainDuplicate = await rejection(pglite.query(insert, [1]));
  t.equal(duplicate.code, '23505');
  t.equal(duplicate.message, plainDuplicate.message);
  t.equal(duplicate.query, insert);
  const syntax = await rejection(statements.query('SELEC 1'));
  t.equal(syntax.code, '42601');
  t.equal(statements.size, 1, 'only the insert is prepared');
  const mismatch = await rejection(statements.query('SELECT $1::int AS n', ['not a number']));
  t.equal(mismatch.code, '22P02');
  t.same((await statements.query('SELECT count(*)::int AS n FROM unique_things')).rows, [{ n: 1 }], 'the session answers after every error');
});

t.test('a statement whose result type changed is prepared again; inside a transaction the error stands', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite);
  await pglite.exec(`CREATE TABLE growing (id int); INSERT INTO growing VALUES (1)`);
  const select = 'SELECT * FROM growing';
  t.same((await statements.query(select)).rows, [{ id: 1 }]);
  await pglite.exec(`ALTER TABLE growing ADD COLUMN label text DEFAULT 'x'`);
  t.same((await statements.query(select)).rows, [{ id: 1, label: 'x' }], 'outside a transaction: run again, freshly prepared');

  await pglite.exec(`ALTER TABLE growing ADD COLUMN more int DEFAULT 2`);
  await statements.query('BEGIN');
  const stale = await rejection(statements.query(select));
  t.equal(stale.code, '0A000', 'a transaction cannot run it again: the caller sees the error');
  await statements.query('ROLLBACK');
  t.same((await statements.query(select)).rows, [{ id: 1, label: 'x', more: 2 }]);
});

t.test('statements deallocated by the session (DEALLOCATE ALL) are prepared again', async (t) => {
  const pglite = await openPglite(t);
  const statements = new PreparedStatements(pglite);
  t.same((await statements.query('SELECT 7 AS n')).rows, [{ n: 7 }]);
  t.same((await statements.query('SELECT 8 AS n')).rows, [{ n: 8 }]);
  await pglite.exec('DEALLOCATE ALL');
  t.same((await statements.query('SELECT 7 AS n')).rows, [{ n: 7 }]);
  t.same(await preparedNames(pglite), ['factlog_3']);
  // The other one is known to be gone too: inside a transaction, where no second try is possible, it is prepared anew.
  await statements.query('BEGIN');
  t.same((await statements.query('SELECT 8 AS n')).rows, [{ n: 8 }]);
  await statements.query('COMMIT');
});
