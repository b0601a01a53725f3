import t, { type Test } from 'tap';
import type { Database } from '../../src/db/database.js';
import { inProjections } from '../../src/db/priority.js';
import { PREPARED_PER_CONNECTION, preparedStatementName } from '../../src/db/serverPrepared.js';
import { lockProjectionKeys } from '../../src/projection/lock.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';

/** A scratch database on the server, through a pool of one connection (so every statement meets the same session). */
async function oneConnection(t: Test): Promise<Database> {
  const { second: db } = await scratchPostgresWithSecondPool(t, 'factlog_prepared', 1);
  await db.knex.raw('CREATE TABLE items (id int PRIMARY KEY, label text)');
  await db.knex.raw(`INSERT INTO items SELECT n, 'item ' || n FROM generate_series(1, 10) AS n`);
  return db;
}

/** The name a statement is prepared under: that of its text as knex sends it (`$1` for `?`). */
function nameOf(db: Database, sql: string, bindings: readonly number[]): string {
  return preparedStatementName(db.knex.raw(sql, [...bindings]).toSQL().toNative().sql);
}

async function preparedNames(db: Database): Promise<string[]> {
  const { rows } = await db.knex.raw<{ rows: Array<{ name: string }> }>('SELECT name FROM pg_prepared_statements ORDER BY name');
  return rows.map((row) => row.name);
}

const lookup = 'SELECT label FROM items WHERE id = ?';

t.test('on the server, the projection runner\'s statements are prepared once per connection; others are not', async (t) => {
  const db = await oneConnection(t);
  t.same((await db.knex.raw(lookup, [3])).rows, [{ label: 'item 3' }]);
  t.same(await preparedNames(db), [], 'a request\'s statement goes unnamed');
  const labels = await inProjections(async () => {
    const found: string[] = [];
    for (const id of [1, 2, 1]) found.push(...(await db.knex.raw<{ rows: Array<{ label: string }> }>(lookup, [id])).rows.map((row) => row.label));
    return found;
  });
  t.same(labels, ['item 1', 'item 2', 'item 1'], 'each run with its own parameters');
  t.same(await preparedNames(db), [nameOf(db, lookup, [1])], 'prepared once, under the name of its text');
  await inProjections(async () => await db.knex.raw('SELECT count(*) FROM items'));
  t.same(await preparedNames(db), [nameOf(db, lookup, [1])], 'a statement without parameters is not prepared');
});

t.test('a projection transaction plans generically; the setting ends with it', async (t) => {
  const db = await oneConnection(t);
  const inside = await inProjections(() =>
    db.knex.transaction(async (trx) => {
      await lockProjectionKeys(trx, ['facts']);
      return (await trx.raw<{ rows: Array<{ plan_cache_mode: string }> }>('SHOW plan_cache_mode')).rows[0]?.plan_cache_mode;
    }),
  );
  t.equal(inside, 'force_generic_plan');
  t.equal((await db.knex.raw<{ rows: Array<{ plan_cache_mode: string }> }>('SHOW plan_cache_mode')).rows[0]?.plan_cache_mode, 'auto', 'the next transaction plans as before');
});

t.test(`a connection keeps at most ${PREPARED_PER_CONNECTION} statements; later ones run unnamed`, async (t) => {
  const db = await oneConnection(t);
  const texts = Array.from({ length: PREPARED_PER_CONNECTION + 5 }, (_, n) => `SELECT label, ${n} AS n FROM items WHERE id = ?`);
  const answers = await inProjections(async () => {
    const all: number[] = [];
    for (const text of texts) all.push(Number((await db.knex.raw<{ rows: Array<{ n: number }> }>(text, [1])).rows[0]?.n));
    return all;
  });
  t.same(answers, texts.map((_, n) => n), 'every statement answered');
  const names = await preparedNames(db);
  t.equal(names.length, PREPARED_PER_CONNECTION);
  t.ok(names.includes(nameOf(db, texts[0]!, [1])) && !names.includes(nameOf(db, texts.at(-1)!, [1])), 'the first kept, the last not');
});

t.test('a statement whose table changed its row type fails once, then runs unnamed', async (t) => {
  const db = await oneConnection(t);
  const all = 'SELECT * FROM items WHERE id = ?';
  t.same((await inProjections(async () => await db.knex.raw(all, [4]))).rows, [{ id: 4, label: 'item 4' }]);
  t.same(await preparedNames(db), [nameOf(db, all, [4])]);
  await db.knex.raw('ALTER TABLE items ADD COLUMN weight int NOT NULL DEFAULT 7');
  await t.rejects(inProjections(async () => await db.knex.raw(all, [4])), /cached plan must not change result type/);
  t.same((await inProjections(async () => await db.knex.raw(all, [4]))).rows, [{ id: 4, label: 'item 4', weight: 7 }], 'the new row type, from an unnamed statement');
});
