import t from 'tap';
import { maintainTables, maintenanceFor, startAutovacuum, tableActivity, type TableActivity } from '../../src/db/autovacuum.js';
import { openDatabase } from '../../src/db/database.js';
import { pgliteTemplate } from '../helpers/pglite.js';

const quiet: TableActivity = { table: 'public.t', estimatedRows: 10_000, deadTuples: 0, insertedSinceVacuum: 0, modifiedSinceAnalyze: 0 };

/**
 * One database without its own autovacuum for the tests that run rounds themselves, each on
 * tables of its own: opening one is not their subject (about 0.5 CPU-s each).
 */
let opened: ReturnType<typeof openDatabase> | null = null;
function shared(): ReturnType<typeof openDatabase> {
  if (opened === null) {
    opened = (async () => openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate(), autovacuumIntervalMs: false }))();
    const closing = opened;
    t.teardown(async () => (await closing).close());
  }
  return opened;
}

t.test('maintenanceFor: PostgreSQL’s autovacuum rules', async (t) => {
  t.equal(maintenanceFor(quiet), null, 'nothing changed: nothing to do');
  t.equal(maintenanceFor({ ...quiet, modifiedSinceAnalyze: 1_050 }), null, 'at the threshold (50 + 10%): not yet');
  t.equal(maintenanceFor({ ...quiet, modifiedSinceAnalyze: 1_051 }), 'ANALYZE', 'past it: ANALYZE');
  t.equal(maintenanceFor({ ...quiet, deadTuples: 2_051 }), 'VACUUM', 'dead tuples past 50 + 20%: VACUUM');
  t.equal(maintenanceFor({ ...quiet, insertedSinceVacuum: 3_001 }), 'VACUUM', 'inserts past 1000 + 20%: VACUUM');
  t.equal(maintenanceFor({ ...quiet, deadTuples: 2_051, modifiedSinceAnalyze: 2_051 }), 'VACUUM (ANALYZE)', 'both: one statement');
  t.equal(maintenanceFor({ ...quiet, estimatedRows: -1, modifiedSinceAnalyze: 51 }), 'ANALYZE', 'a table never analyzed counts as empty');
});

t.test('on PGlite: a grown and updated table is vacuumed and analyzed once, then left alone', async (t) => {
  const db = await shared();
  await db.knex.raw(`CREATE TABLE grown (id int PRIMARY KEY, state text)`);
  await db.knex.raw(`CREATE TABLE small (id int PRIMARY KEY)`);
  await db.knex.raw(`INSERT INTO grown SELECT g, 'queued' FROM generate_series(1, 5000) g`);
  await db.knex.raw(`UPDATE grown SET state = 'done' WHERE id <= 2000`);
  await db.knex.raw(`INSERT INTO small VALUES (1), (2)`);

  const before = new Map((await tableActivity(db.knex)).map((activity) => [activity.table, activity]));
  t.match(before.get('public.grown'), { estimatedRows: -1, deadTuples: 2000, modifiedSinceAnalyze: 7000 }, 'the statistics are flushed before they are read');

  const statements: string[] = [];
  const record = (query: { sql: string }) => {
    if (/^(VACUUM|ANALYZE)/.test(query.sql)) statements.push(query.sql);
  };
  db.knex.on('query', record);
  t.teardown(() => void db.knex.removeListener('query', record));
  t.same(await maintainTables(db.knex), [{ table: 'public.grown', maintenance: 'VACUUM (ANALYZE)' }], 'only the grown table');
  t.same(statements, ['VACUUM public.grown', 'ANALYZE public.grown'], 'a VACUUM and then an ANALYZE: two shorter holds of the connection');
  const stats = (await db.knex.raw(`SELECT n_dead_tup::int AS dead, last_vacuum IS NOT NULL AS vacuumed, last_analyze IS NOT NULL AS analyzed FROM pg_stat_user_tables WHERE relname = 'grown'`)).rows[0];
  t.same(stats, { dead: 0, vacuumed: true, analyzed: true });
  t.equal((await db.knex.raw(`SELECT reltuples::int AS n FROM pg_class WHERE relname = 'grown'`)).rows[0].n, 5000, 'the planner knows the table’s size');
  t.same(await maintainTables(db.knex), [], 'nothing changed since: nothing runs');
});

t.test('startAutovacuum runs rounds until stopped', async (t) => {
  const db = await shared();
  await db.knex.raw(`CREATE TABLE busy (id int PRIMARY KEY)`);
  await db.knex.raw(`INSERT INTO busy SELECT generate_series(1, 500)`);
  const autovacuum = startAutovacuum(db.knex, { intervalMs: 5 });
  const analyzed = async () => (await db.knex.raw(`SELECT last_analyze IS NOT NULL AS done FROM pg_stat_user_tables WHERE relname = 'busy'`)).rows[0].done as boolean;
  for (let waited = 0; !(await analyzed()) && waited < 200; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
  t.ok(await analyzed(), 'a round analyzed the table');
  await autovacuum.stop();
  await db.knex.raw(`INSERT INTO busy SELECT generate_series(501, 5000)`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const busy = (await tableActivity(db.knex)).find((activity) => activity.table === 'public.busy');
  t.equal(busy?.modifiedSinceAnalyze, 4500, 'no round after stop');
});

t.test('an embedded database runs its own autovacuum', async (t) => {
  const db = await openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate(), autovacuumIntervalMs: 5 });
  t.teardown(() => db.close());
  await db.knex.raw(`CREATE TABLE written (id int PRIMARY KEY)`);
  await db.knex.raw(`INSERT INTO written SELECT generate_series(1, 500)`);
  const analyzed = async () => (await db.knex.raw(`SELECT last_analyze IS NOT NULL AS done FROM pg_stat_user_tables WHERE relname = 'written'`)).rows[0].done as boolean;
  for (let waited = 0; !(await analyzed()) && waited < 200; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
  t.ok(await analyzed());
});

t.test('a failed round is reported and the next one runs', async (t) => {
  const db = await shared();
  const errors: unknown[] = [];
  let rounds = 0;
  // A knex whose first statement fails stands for a round that meets a dropped table.
  const flaky = new Proxy(db.knex, {
    get(target, property, receiver) {
      if (property !== 'raw') return Reflect.get(target, property, receiver);
      return (sql: string, ...rest: unknown[]) => {
        if (sql.startsWith('SELECT pg_stat_force_next_flush')) rounds++;
        if (rounds === 1) return Promise.reject(new Error('relation vanished'));
        return (target.raw as (sql: string, ...rest: unknown[]) => unknown)(sql, ...rest);
      };
    },
  });
  const autovacuum = startAutovacuum(flaky, { intervalMs: 5, onError: (error) => errors.push(error) });
  for (let waited = 0; rounds < 3 && waited < 200; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
  await autovacuum.stop();
  t.equal(errors.length, 1, 'the failure was reported once');
  t.ok(rounds >= 3, 'rounds went on after it');
});
