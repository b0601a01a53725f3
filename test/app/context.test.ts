import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import { createAppContext, openEventLogReader } from '../../src/app/context.js';
import { acquireDataDirLock } from '../../src/db/dataDirLock.js';
import { buildConfig } from '../../src/config/load.js';
import { JWT_SECRET_PLACEHOLDER } from '../../src/config/types.js';
import { directoryState, migratedPgliteDir, olderSchemaPending } from '../helpers/olderSchema.js';

/** A data directory (storage.data_dir) whose PGlite database this release migrated, made older if asked. */
async function dataDirectory(t: Test, older: boolean): Promise<string> {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-context-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  await migratedPgliteDir(path.join(root, 'pglite'), { older });
  return root;
}

// The placeholder secret: a context that may write stores the installation's secret at its first open.
const configFor = (root: string) => buildConfig({ storage: { data_dir: root }, auth: { jwt_secret: JWT_SECRET_PLACEHOLDER }, logging: { level: 'silent' } });
const quiet = { workers: false, env: {}, logger: pino({ level: 'silent' }) };

t.test('a context that must not migrate refuses a database with pending migrations, naming them, and leaves it as it was', async (t) => {
  const root = await dataDirectory(t, true);
  const before = directoryState(path.join(root, 'pglite'));
  for (const migrations of ['read-only', 'refuse'] as const) {
    await t.rejects(createAppContext(configFor(root), { ...quiet, migrations }), {
      name: 'PendingMigrationsError',
      pending: olderSchemaPending,
      message:
        /^the database is older than this factlog and needs migrations \(read models: 020_oauth_answered_requests; event store: events_planner_statistics\); this command does not migrate and wrote nothing: back the database up .*then run `factlog migrate`/,
    }, migrations);
    t.same(directoryState(path.join(root, 'pglite')), before, `${migrations}: every file byte for byte, every modification time`);
    t.same(readdirSync(root), ['pglite'], `${migrations}: the lock is gone, nothing else was made`);
  }
});

t.test('a read-only context reads an up-to-date database without writing it, the signing secret included', async (t) => {
  const root = await dataDirectory(t, false);
  const before = directoryState(path.join(root, 'pglite'));
  const context = await createAppContext(configFor(root), { ...quiet, migrations: 'read-only' });
  t.same(context.migrationsApplied, []);
  t.same(await context.store.readAll({ after: 0, limit: 10 }), []);
  t.ok((await context.projections.status()).length > 0, 'projections list works (its checkpoints stay in memory)');
  t.not(context.config.auth.jwt_secret, JWT_SECRET_PLACEHOLDER, 'a throwaway secret, never the placeholder');
  // Asked of the context's own database (what it wrote, if anything, whether or not it reached
  // the files), not of another opened after it: a PGlite start fewer. The migrating context
  // (serve) applies what is missing and keeps the installation's secret.
  t.same(await context.db.knex('installation_secrets').select('name'), [], 'no secret was stored');
  await context.close();
  t.same(directoryState(path.join(root, 'pglite')), before, 'every file byte for byte, every modification time');
  t.notOk(existsSync(path.join(root, 'pglite.lock')), 'the lock released');
});

t.test('the migrating context applies what is pending and says which', async (t) => {
  const root = await dataDirectory(t, true);
  const context = await createAppContext(configFor(root), { ...quiet });
  t.same(context.migrationsApplied, olderSchemaPending);
  t.equal((await context.db.knex('installation_secrets').select('name')).length, 1, 'the installation secret is kept');
  await context.close();
  const again = await createAppContext(configFor(root), { ...quiet, migrations: 'refuse' });
  t.same(again.migrationsApplied, [], 'a database of this release: nothing to refuse');
  await again.close();
});

t.test('the event log opened alone on the embedded tier locks the one data directory while it reads, writes nothing, and refuses pending migrations as a context does', async (t) => {
  const root = await dataDirectory(t, false);
  const lockPath = path.join(root, 'pglite.lock');
  const before = directoryState(path.join(root, 'pglite'));
  const eventLog = await openEventLogReader(configFor(root), { logger: quiet.logger });
  t.same(await eventLog.store.readAll({ after: 0, limit: 10 }), []);
  t.ok(existsSync(lockPath), 'the directory is locked while the log is open');
  await t.rejects(createAppContext(configFor(root), { ...quiet, migrations: 'read-only' }), { name: 'DataDirLockedError' }, 'one owner: a context cannot open it meanwhile');
  await eventLog.close();
  t.same(directoryState(path.join(root, 'pglite')), before, 'every file byte for byte, every modification time');
  t.notOk(existsSync(lockPath), 'the lock released');

  // The log shares its database with the read models: every schema in it is checked, as by a context.
  const older = await dataDirectory(t, true);
  const olderBefore = directoryState(path.join(older, 'pglite'));
  await t.rejects(openEventLogReader(configFor(older), { logger: quiet.logger }), { name: 'PendingMigrationsError', pending: olderSchemaPending });
  t.same(directoryState(path.join(older, 'pglite')), olderBefore, 'nothing written');
  t.same(readdirSync(older), ['pglite'], 'the lock released');
});

t.test("the event log in a database of its own is opened without the read models' database: that directory is neither made nor locked", async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-context-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  // eventstore.database `events` without a url: an embedded database of its own, `pglite-events`.
  const ownDatabase = (root: string) =>
    buildConfig({ storage: { data_dir: root }, auth: { jwt_secret: JWT_SECRET_PLACEHOLDER }, logging: { level: 'silent' }, eventstore: { database: 'events' }, databases: { events: { url: '' } } });
  await migratedPgliteDir(path.join(root, 'pglite-events'));
  const eventLog = await openEventLogReader(ownDatabase(root), { logger: quiet.logger });
  t.same(await eventLog.store.readAll({ after: 0, limit: 10 }), []);
  t.same(readdirSync(root).sort(), ['pglite-events', 'pglite-events.lock'], "the log's directory locked, the read models' not made");
  // What `factlog serve` takes first: the read models' directory's lock, free while the log is read.
  const readModelsLock = acquireDataDirLock(path.join(root, 'pglite'));
  readModelsLock.release();
  await eventLog.close();
  t.same(readdirSync(root), ['pglite-events'], 'the lock released');

  // Only the event store's schema is in that database, and only its migrations are named.
  await migratedPgliteDir(path.join(root, 'older', 'pglite-events'), { older: true });
  await t.rejects(openEventLogReader(ownDatabase(path.join(root, 'older')), { logger: quiet.logger }), {
    name: 'PendingMigrationsError',
    pending: [{ schema: 'event store', ids: ['events_planner_statistics'] }],
  });
});
