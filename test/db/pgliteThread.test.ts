import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { openDatabase } from '../../src/db/database.js';
import { initdbInChildProcess, needsInitdb, PgliteThread } from '../../src/db/pgliteThread.js';
import { pgliteTemplate } from '../helpers/pglite.js';

/** Whether a process of that pid runs. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// One PGlite in a worker for the file: opening one takes seconds.
const thread = await PgliteThread.open({ dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
t.teardown(() => thread.close());

t.test('values come back as in-thread PGlite decodes them: numbers, dates, bytea, jsonb, arrays, null', async (t) => {
  const { rows, fields } = await thread.query<Record<string, unknown>>(
    `SELECT 1::int AS i, 5::int8 AS big, '2026-01-02T03:04:05Z'::timestamptz AS at, '\\x0102'::bytea AS bytes,
            '{"a":[1,"x"]}'::jsonb AS doc, ARRAY['p','q'] AS list, NULL::text AS nothing, $1::text AS param`,
    ['given'],
  );
  t.same(rows[0], { i: 1, big: 5, at: new Date('2026-01-02T03:04:05Z'), bytes: new Uint8Array([1, 2]), doc: { a: [1, 'x'] }, list: ['p', 'q'], nothing: null, param: 'given' });
  t.ok(rows[0]?.at instanceof Date);
  t.same(fields.map((field) => field.name), ['i', 'big', 'at', 'bytes', 'doc', 'list', 'nothing', 'param']);
});

t.test('a failed statement rejects with PostgreSQL’s fields, and the connection stays usable', async (t) => {
  await thread.exec('CREATE TABLE unique_things (id int PRIMARY KEY)');
  await thread.query('INSERT INTO unique_things VALUES (1)');
  const error = (await thread.query('INSERT INTO unique_things VALUES (1)').catch((caught: unknown) => caught)) as Error & Record<string, unknown>;
  t.ok(error instanceof Error);
  t.equal(error.code, '23505');
  t.equal(error.constraint, 'unique_things_pkey');
  t.match(error.message, /duplicate key/);
  await t.rejects(thread.query('SELECT * FROM no_such_table'), { code: '42P01' });
  t.same((await thread.query('SELECT count(*)::int AS n FROM unique_things')).rows, [{ n: 1 }]);
});

t.test('statements answer in the order they were sent; a transaction spans messages', async (t) => {
  await thread.exec('CREATE TABLE ordered (n int)');
  await Promise.all(Array.from({ length: 20 }, (_, n) => thread.query('INSERT INTO ordered VALUES ($1)', [n])));
  t.same((await thread.query<{ n: number }>('SELECT n FROM ordered')).rows.map((row) => row.n), Array.from({ length: 20 }, (_, n) => n));
  await thread.query('BEGIN');
  await thread.query('INSERT INTO ordered VALUES (100)');
  await thread.query('ROLLBACK');
  t.same((await thread.query('SELECT count(*)::int AS n FROM ordered WHERE n = 100')).rows, [{ n: 0 }]);
});

t.test('a BEGIN is answered at once and runs with the next statement: the transaction is the same', async (t) => {
  await thread.exec('CREATE TABLE begun (n int)');
  let slowAnswered = false;
  const slow = thread.query('SELECT pg_sleep(0.2)').then(() => (slowAnswered = true));
  await thread.query('BEGIN;');
  t.notOk(slowAnswered, 'the BEGIN did not wait for the worker to finish the statement before it');
  await slow;
  await thread.query('INSERT INTO begun VALUES (1)');
  const inside = await thread.query<{ open: boolean }>('SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS open');
  t.same(inside.rows, [{ open: true }], 'the insert ran inside a transaction');
  await thread.query('ROLLBACK');
  t.same((await thread.query('SELECT count(*)::int AS n FROM begun')).rows, [{ n: 0 }], 'rolled back');

  await thread.query('BEGIN');
  await thread.exec('INSERT INTO begun VALUES (2); INSERT INTO begun VALUES (3)');
  await thread.query('COMMIT');
  t.same((await thread.query('SELECT count(*)::int AS n FROM begun')).rows, [{ n: 2 }], 'a held BEGIN rides with exec too');

  // A statement that fails after a held BEGIN leaves the transaction open and aborted, as it would have.
  await thread.query('BEGIN');
  await t.rejects(thread.query('SELECT 1 / 0'), { code: '22012' });
  await t.rejects(thread.query('SELECT 1'), { code: '25P02' });
  await thread.query('ROLLBACK');
  t.same((await thread.query('SELECT 1 AS one')).rows, [{ one: 1 }]);

  // A BEGIN with parameters or options is sent as it comes.
  await thread.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
  t.same((await thread.query("SELECT current_setting('transaction_isolation') AS level")).rows, [{ level: 'serializable' }]);
  await thread.query('ROLLBACK');
});

t.test('the calling thread’s event loop turns while a statement runs', async (t) => {
  let turns = 0;
  const ticker = setInterval(() => turns++, 1);
  try {
    // Long enough to span many turns of the loop; in-thread PGlite would allow none (its
    // PostgreSQL runs synchronously in the calling thread, a sleep included). A sleep costs no
    // CPU to speak of, where a long computation took 2.6 s of it.
    await thread.query('SELECT pg_sleep(0.2)');
  } finally {
    clearInterval(ticker);
  }
  t.ok(turns > 0, `timers ran during the statement (${turns})`);
});

// One database opened by openDatabase itself and one thread opened with settings, for the three
// tests below: a PGlite start each (about 0.5 CPU-s) is none of their subjects.
/** openDatabase itself, not the tests' helpers, which give their databases a smaller buffer pool. */
const opened = openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
const tuned = PgliteThread.open({ dataDir: 'memory://', loadDataDir: await pgliteTemplate(), settings: { work_mem: '2MB' } });
// A failed opening fails the tests that await it, not the process before they do.
opened.catch(() => undefined);
tuned.catch(() => undefined);
t.teardown(async () => (await opened).close());
t.teardown(async () => (await tuned).close());

t.test('PGlite starts with the embedded settings; the settings option overrides them', async (t) => {
  const db = await opened;
  t.same((await db.knex.raw('SHOW shared_buffers')).rows, [{ shared_buffers: '24MB' }]);
  t.same((await db.knex.raw('SHOW default_statistics_target')).rows, [{ default_statistics_target: '30' }], 'ANALYZE samples 9,000 rows, not 30,000');
  t.same((await (await tuned).query('SHOW work_mem')).rows, [{ work_mem: '2MB' }]);
});

t.test('through knex (openDatabase): transactions, rollback and errors as before', async (t) => {
  const db = await opened;
  await db.knex.schema.createTable('notes', (table) => {
    table.integer('id').primary();
    table.jsonb('body');
  });
  await db.knex.transaction(async (trx) => {
    await trx('notes').insert({ id: 1, body: JSON.stringify({ kept: true }) });
  });
  await t.rejects(
    db.knex.transaction(async (trx) => {
      await trx('notes').insert({ id: 2, body: null });
      throw new Error('abandon');
    }),
    /abandon/,
  );
  t.same(await db.knex('notes').select('id', 'body'), [{ id: 1, body: { kept: true } }]);
  await t.rejects(db.knex('notes').insert({ id: 1 }), { code: '23505' });
});

t.test('a closed proxy refuses statements; closing again is harmless', async (t) => {
  // The thread opened with settings, its test done.
  const other = await tuned;
  t.equal(other.closed, false);
  await other.close();
  t.equal(other.closed, true);
  await other.close();
  await t.rejects(other.query('SELECT 1'), /closed/);
  await t.rejects(other.exec('SELECT 1'), /closed/);
});

t.test('a data directory PGlite cannot load rejects the opening (and the file ends: no worker is left running)', async (t) => {
  await t.rejects(PgliteThread.open({ dataDir: 'memory://', loadDataDir: new Uint8Array([1, 2, 3]) }));
});

// A directory this user may not read (mode 0700, another user's) was taken as empty: the read
// commands said it "holds no database" and serve ran initdb there. A symlink loop stands in for
// it, since a test run as root reads every directory.
t.test('a data directory that cannot be looked into is said so, not taken as one holding no database', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-initdb-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = path.join(parent, 'pglite');
  symlinkSync(dataDir, dataDir);
  t.throws(() => needsInitdb(dataDir), { message: `cannot read the data directory ${dataDir} (storage.data_dir, STORAGE_DATA_DIR): ELOOP: too many symbolic links encountered, stat '${dataDir}/PG_VERSION'; run factlog as the user that owns it, or give this user access` });
  t.equal(needsInitdb(path.join(parent, 'absent')), true, 'a missing directory needs initdb');
  writeFileSync(path.join(parent, 'file'), '');
  t.equal(needsInitdb(path.join(parent, 'file')), true, 'as does a path under a file (opening it then says it is no directory)');
});

t.test('a new data directory is initialised by a child process, then opened in the worker; an existing one is not initialised again', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-initdb-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = path.join(parent, 'data');
  t.equal(needsInitdb(dataDir), true);
  t.equal(needsInitdb('memory://'), false);
  const db = await openDatabase({ kind: 'pglite', dataDir });
  t.ok(existsSync(path.join(dataDir, 'PG_VERSION')));
  t.equal(needsInitdb(dataDir), false);
  await db.knex.raw('CREATE TABLE kept (n int)');
  await db.knex('kept').insert({ n: 7 });
  await db.close();
  const again = await openDatabase({ kind: 'pglite', dataDir });
  t.teardown(() => again.close());
  t.same(await again.knex('kept').select('n'), [{ n: 7 }]);
});

t.test('an initdb that fails in its child process rejects with the reason', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-initdb-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  // A file where the data directory's parent should be: the child cannot make the directory.
  // (A file at the data directory itself fails too, but only after a whole initdb in memory: 5 s.)
  const file = path.join(parent, 'file');
  writeFileSync(file, 'not a directory');
  await t.rejects(initdbInChildProcess(path.join(file, 'data')), /PGlite initdb of .*file\/data failed in its child process \(exit code 1\)/);
});

t.test('a child that is done but does not exit is killed, and the initdb counts as done', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-initdb-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = path.join(parent, 'pglite');
  await initdbInChildProcess(dataDir, {}, { entry: new URL('../helpers/initdbHangingChild.ts', import.meta.url), exitGraceMs: 100 });
  const pid = Number(readFileSync(`${dataDir}.pid`, 'utf8'));
  const alive = () => isAlive(pid);
  t.ok(alive(), 'resolved on its word, while it still runs');
  const deadline = Date.now() + 20_000;
  while (alive() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
  t.notOk(alive(), 'then killed');
});

t.test('a signal that ends the process during initdb ends its child too: no initdb goes on alone', async (t) => {
  const parent = mkdtempSync(path.join(tmpdir(), 'factlog-initdb-'));
  t.teardown(() => rmSync(parent, { recursive: true, force: true }));
  const dataDir = path.join(parent, 'pglite');
  const runner = spawn(process.execPath, [...process.execArgv, fileURLToPath(new URL('../helpers/initdbParent.ts', import.meta.url)), dataDir], { stdio: 'ignore' });
  const pidFile = `${dataDir}.pid`;
  const deadline = Date.now() + 20_000;
  while (!existsSync(pidFile) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  const childPid = Number(readFileSync(pidFile, 'utf8'));
  const alive = () => isAlive(childPid);
  t.ok(alive(), 'the child works');
  // Whatever the test's outcome, no busy child is left behind.
  t.teardown(() => {
    if (alive()) process.kill(childPid, 'SIGKILL');
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => runner.once('exit', (code, signal) => resolve({ code, signal })));
  runner.kill('SIGTERM');
  // How it ends depends on who else listens (under tsx, its own handler): that it ends is what counts.
  t.ok(await exited, 'the process ends');
  const gone = Date.now() + 10_000;
  while (alive() && Date.now() < gone) await new Promise((resolve) => setTimeout(resolve, 50));
  t.notOk(alive(), 'and its child with it');
});
