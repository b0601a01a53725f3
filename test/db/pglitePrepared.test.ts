import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import t, { type Test } from 'tap';
import { PreparedStatements, vectorBinary } from '../../src/db/pglitePrepared.js';
import { DumpBlob } from '../../src/db/pgliteDump.js';
import { pgliteWasmModules } from '../../src/db/pgliteWasm.js';
import { pgliteStartParams, pgliteTemplate } from '../helpers/pglite.js';

async function openPglite(t: Test, extensions: { vector?: typeof vector } = {}): Promise<PGlite> {
  const pglite = await PGlite.create({ dataDir: 'memory://', loadDataDir: new DumpBlob(await pgliteTemplate()), startParams: pgliteStartParams, extensions, ...(await pgliteWasmModules()) });
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

t.test('pgvector vectors given as text are sent in binary form, stored as the text form stores them', async (t) => {
  const pglite = await openPglite(t, { vector });
  const statements = new PreparedStatements(pglite);
  await pglite.exec('CREATE EXTENSION vector; CREATE TABLE vectors (id int PRIMARY KEY, embedding vector(3)); CREATE TABLE plain (id int PRIMARY KEY, embedding vector(3))');
  const texts = ['[1,2,3]', '[0.1, -0.25 ,3e-2]', '[0.123456789012345678,-1e-50,+4.5E+3]', '[.5,5.,-0]', '[1e-40,3.4e38,-3.4e38]'];
  for (const [i, text] of texts.entries()) {
    await statements.query('INSERT INTO vectors (id, embedding) VALUES ($1, $2)', [i, text]);
    await pglite.query('INSERT INTO plain (id, embedding) VALUES ($1, $2)', [i, text]);
  }
  t.equal(statements.binaryParameters, texts.length, 'each vector went in binary form');
  const stored = async (table: string) => (await pglite.query<{ t: string }>(`SELECT embedding::text AS t FROM ${table} ORDER BY id`)).rows.map((row) => row.t);
  t.same(await stored('vectors'), await stored('plain'), 'the same vectors as PostgreSQL parsing the text');
  t.same(
    (await statements.query<{ d: number }>('SELECT embedding <=> $1 AS d FROM vectors WHERE id = 0', ['[2,4,6]'])).rows,
    [{ d: 0 }],
    'a query vector too',
  );

  // What the binary form cannot say goes as text, and PostgreSQL's own error stands.
  const before = statements.binaryParameters;
  const refused = ['[1,2]', '[1,2,3,4]', '[1,,3]', '[1,2,NaN]', '[1,2,3.5e38]', '[1,2,Infinity]', '[]', '1,2,3'];
  for (const text of refused) {
    const prepared = await rejection(statements.query('INSERT INTO vectors (id, embedding) VALUES (99, $1)', [text]));
    const plain = await rejection(pglite.query('INSERT INTO plain (id, embedding) VALUES (99, $1)', [text]));
    t.equal(prepared.message, plain.message, `${text}: ${plain.message}`);
  }
  t.equal(statements.binaryParameters - before, 2, 'only the two lists of the wrong length went in binary form (vector_recv checks the dimensions)');
  t.same((await pglite.query('SELECT count(*)::int AS n FROM vectors')).rows, [{ n: texts.length }], 'nothing stored by a refused statement');

  // strtof reads hexadecimal numbers, vectorBinary does not: such a text goes as text and is stored.
  t.same((await statements.query<{ t: string }>('SELECT $1::vector(3)::text AS t', ['[0x10,1,2]'])).rows, [{ t: '[16,1,2]' }]);
  // Another type whose text looks like a vector is left alone, a user-defined one named like an Object member too.
  t.same((await statements.query<{ t: string }>('SELECT $1::text AS t', ['[1,2,3]'])).rows, [{ t: '[1,2,3]' }]);
  await pglite.exec('CREATE DOMAIN "toString" AS text');
  t.same((await statements.query<{ t: string }>('SELECT $1::"toString" AS t', ['[1,2,3]'])).rows, [{ t: '[1,2,3]' }]);
  t.equal(statements.binaryParameters - before, 2);
});

t.test('vectorBinary: pgvector’s binary layout, or null for what only PostgreSQL should judge', async (t) => {
  const bytes = vectorBinary('[1,-2.5]');
  t.ok(bytes);
  const view = new DataView(bytes!.buffer);
  t.same([view.getInt16(0), view.getInt16(2), view.getFloat32(4), view.getFloat32(8)], [2, 0, 1, -2.5], 'dimensions, a zero word, big-endian float4s');
  t.equal(bytes!.byteLength, 12);
  for (const text of ['', '[]', '[1', '1]', '[a]', '[1,,2]', '[1e39]', '[-1e39]', '[nan]', '[0x1]', `[${Array(16001).fill(1).join(',')}]`]) {
    t.equal(vectorBinary(text), null, JSON.stringify(text.slice(0, 20)));
  }
  t.equal(vectorBinary([1, 2]), null, 'not a text');
});
