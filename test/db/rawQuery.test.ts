import t from 'tap';
import { numberedSql, rawQuery } from '../../src/db/rawQuery.js';
import { openTestPglite } from '../helpers/pglite.js';

t.test('numberedSql numbers the placeholders and refuses what it cannot convert', async (t) => {
  t.equal(numberedSql('SELECT ?::int + ?::int AS n WHERE ? IS NOT NULL', 3), 'SELECT $1::int + $2::int AS n WHERE $3 IS NOT NULL');
  t.equal(numberedSql('SELECT 1', 0), 'SELECT 1');
  t.throws(() => numberedSql('SELECT ?::int', 2), RangeError, 'a binding count that does not match');
  t.throws(() => numberedSql('SELECT ?::int', 0), RangeError, 'the same statement, cached, is still checked');
  t.throws(() => numberedSql('SELECT ?? FROM t', 1), /identifier/, 'knex identifier bindings are not supported');
});

t.test('rawQuery on the PGlite of openDatabase', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await db.knex.raw('CREATE TABLE raw_rows (id bigint PRIMARY KEY, tags text[], doc jsonb)');

  t.test('answers with the rows knex.raw gives, for arrays, jsonb and bigint alike', async (t) => {
    await rawQuery(db.knex, 'INSERT INTO raw_rows (id, tags, doc) VALUES (?, ?::text[], ?::jsonb)', [7, ['a', 'b'], JSON.stringify({ x: [1, 2] })]);
    const sql = 'SELECT id, tags, doc FROM raw_rows WHERE id = ANY(?::bigint[])';
    const direct = await rawQuery<{ id: number; tags: string[]; doc: unknown }>(db.knex, sql, [[7, 8]]);
    const viaKnex = (await db.knex.raw(sql, [[7, 8]])) as { rows: unknown[] };
    t.same(direct.rows, viaKnex.rows);
    t.same(direct.rows, [{ id: 7, tags: ['a', 'b'], doc: { x: [1, 2] } }]);
  });

  t.test('errors keep their PostgreSQL fields', async (t) => {
    const error = await rawQuery(db.knex, 'INSERT INTO raw_rows (id) VALUES (?)', [7]).then(
      () => null,
      (caught: unknown) => caught as { code?: string; constraint?: string },
    );
    t.match(error, { code: '23505', constraint: 'raw_rows_pkey' });
  });

  t.test('waits for a transaction that holds the connection, and a transaction uses its own', async (t) => {
    let outside: Promise<{ rows: Array<{ n: number }> }> = Promise.resolve({ rows: [] });
    let settled = false;
    await db.knex.transaction(async (trx) => {
      await trx.raw('INSERT INTO raw_rows (id) VALUES (8)');
      outside = rawQuery<{ n: number }>(db.knex, 'SELECT count(*)::int AS n FROM raw_rows WHERE id = ?', [8]);
      void outside.then(() => (settled = true));
      // A runner that is a transaction goes through trx.raw (through the gate it would wait for itself).
      const inside = await rawQuery<{ n: number }>(trx, 'SELECT count(*)::int AS n FROM raw_rows WHERE id = ?', [8]);
      t.same(inside.rows, [{ n: 1 }], 'the transaction sees its own row');
      for (let tick = 0; tick < 5; tick++) await new Promise((resolve) => setImmediate(resolve));
      t.equal(settled, false, 'the statement outside waits while the transaction holds the connection');
    });
    t.same((await outside).rows, [{ n: 1 }], 'and then sees the committed row');
  });
});
