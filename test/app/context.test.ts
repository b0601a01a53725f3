import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pino from 'pino';
import t, { type Test } from 'tap';
import { createAppContext } from '../../src/app/context.js';
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
