import t from 'tap';
import { migrateEmbeddedSchema } from './schema.js';
import { openMigratedDatabase } from './migratedDatabase.js';
import { startTestService } from './service.js';
import { endGroupedRun, isGroupedRun, markGroupedRun } from './groupedRun.js';

/** The rows of every table but `schema_migrations`, and its own row count. */
async function contents(db: Awaited<ReturnType<typeof openMigratedDatabase>>): Promise<{ rows: number; migrations: number }> {
  const tables = await db.knex.raw<{ rows: Array<{ name: string }> }>(`SELECT quote_ident(relname) AS name FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'`);
  let rows = 0;
  let migrations = 0;
  for (const { name } of tables.rows) {
    const count = Number((await db.knex.raw<{ rows: Array<{ n: number }> }>(`SELECT count(*)::int AS n FROM ${name}`)).rows[0]?.n);
    if (name === 'schema_migrations') migrations = count;
    else rows += count;
  }
  return { rows, migrations };
}

t.test('a migrated database given back comes to the next opener emptied, its migrations recorded', async (t) => {
  const first = await openMigratedDatabase();
  const fresh = await contents(first);
  t.equal(fresh.rows, 0, 'fresh: no rows but the migrations’ record');
  t.ok(fresh.migrations > 0);
  await first.knex('projection_checkpoints').insert({ name: 'left-behind', position: 9 });
  await first.knex.raw(`INSERT INTO events (event_id, stream_id, stream_version, type, actor, data) VALUES (gen_random_uuid(), 'x-1', 0, 'Thing', 'test', '{}')`);
  await first.knex.raw('CREATE TABLE made_by_a_test (n int)');
  await first.knex.raw('SELECT pg_advisory_lock(11)');
  await first.close();
  await first.close(); // a second close is the first one's: kept once

  const again = await openMigratedDatabase();
  t.equal(again.knex, first.knex, 'the same database, kept');
  t.same(await contents(again), fresh, 'the rows a test wrote are gone, the migrations’ record stays');
  t.same((await again.knex.raw(`SELECT to_regclass('made_by_a_test') AS found`)).rows, [{ found: null }], 'what a test made is dropped');
  t.same((await again.knex.raw(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'`)).rows, [{ n: 0 }], 'advisory locks released');
  await migrateEmbeddedSchema(again.knex); // what a service's start runs: nothing to do, no error
  const appended = await again.knex.raw(`INSERT INTO events (event_id, stream_id, stream_version, type, actor, data) VALUES (gen_random_uuid(), 'x-1', 0, 'Thing', 'test', '{}') RETURNING global_position`);
  t.equal(Number(appended.rows[0].global_position), 1, 'positions start at 1 again');
  await again.close();
});

t.test('a database whose migrations’ record changed is closed, not kept', async (t) => {
  const first = await openMigratedDatabase();
  await first.knex('schema_migrations').insert({ id: 'not-a-migration' });
  await first.close();
  const next = await openMigratedDatabase();
  t.not(next.knex, first.knex, 'the next opener gets another');
  t.same((await next.knex('schema_migrations').where({ id: 'not-a-migration' })).length, 0);
  await next.close();
});

// A persistent service (on disk, closed with keepData and started again): test/api/app.test.ts, "data survives a restart".
t.test('in a grouped run a test service takes a kept database, and refuses to keep its data past its close', async (t) => {
  // Alone (`npx tap` of this file), nothing ends the group this test makes: end it here, or the
  // database kept for the group keeps the process alive until tap's timeout.
  if (!isGroupedRun()) t.teardown(endGroupedRun);
  markGroupedRun();
  const first = await startTestService();
  const db = first.context.db;
  await t.rejects(first.close({ keepData: true }), /needs startTestService\(\{ persistent: true \}\)/, 'keepData refused: the database is in memory');
  await first.close();
  const second = await startTestService();
  t.equal(second.context.db.knex, db.knex, 'the next service runs on the same database, emptied');
  t.same((await second.context.store.readAll({ limit: 10 })).length, 0, 'nothing of the first service’s log');
  await second.close();
});
