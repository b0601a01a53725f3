import { createHash } from 'node:crypto';
import { cpSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import { migratedTemplate } from './migratedDatabase.js';
import { openTestDatabase } from './pglite.js';

/**
 * A database as an older release left it: one read-model migration not applied (020, its table
 * missing) and the event log's columns with their planner statistics (the event store's step
 * before it). What a command of this release finds pending there: `olderSchemaPending`.
 */
export async function makeSchemaOlder(knex: Knex): Promise<void> {
  await knex('schema_migrations').where({ id: '020_oauth_answered_requests' }).delete();
  await knex.raw('DROP TABLE oauth_answered_requests');
  await knex.raw('ALTER TABLE events ALTER COLUMN data SET STATISTICS -1');
}

export const olderSchemaPending = [
  { schema: 'read models', ids: ['020_oauth_answered_requests'] },
  { schema: 'jobs', ids: [] },
  { schema: 'event store', ids: ['events_planner_statistics'] },
];

/** The directories `migratedPgliteDir` copies, made once per process (older or not), removed when it exits. */
const madeDirs = new Map<boolean, Promise<string>>();

/**
 * An embedded data directory `dir` (PGlite) migrated by this release, then made older if asked;
 * closed. A copy of one made once per process: migrating a database and closing it cost about
 * 0.7 CPU-s, and a test of the commands' refusals wants a fresh one for each case.
 */
export async function migratedPgliteDir(dir: string, { older = false } = {}): Promise<void> {
  let made = madeDirs.get(older);
  if (made === undefined) {
    made = makeMigratedPgliteDir(older);
    madeDirs.set(older, made);
  }
  cpSync(await made, dir, { recursive: true });
}

/**
 * Loaded from the migrated dump (test/helpers/migratedDatabase.ts: made by this code's migrations,
 * kept across the processes of a run), not seeded from the initdb template and migrated here: the
 * migrations took about 1 CPU-s for each of the two directories a process makes, the load a third of that.
 */
async function makeMigratedPgliteDir(older: boolean): Promise<string> {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-migrated-dir-'));
  process.once('exit', () => rmSync(root, { recursive: true, force: true }));
  const dir = path.join(root, 'pglite');
  const db = await openTestDatabase({ kind: 'pglite', dataDir: dir, loadDataDir: await migratedTemplate(), autovacuumIntervalMs: false });
  try {
    if (older) await makeSchemaOlder(db.knex);
  } finally {
    await db.close();
  }
  return dir;
}

/** Every file and directory under `root` with its modification time, and each file's SHA-256: equal only if nothing was written. */
export function directoryState(root: string): Record<string, string> {
  const state: Record<string, string> = {};
  const walk = (relative: string) => {
    const stat = lstatSync(path.join(root, relative));
    const hash = stat.isFile() ? createHash('sha256').update(readFileSync(path.join(root, relative))).digest('hex') : 'dir';
    state[relative || '.'] = `${stat.mtimeMs} ${stat.size} ${hash}`;
    if (stat.isDirectory()) for (const name of readdirSync(path.join(root, relative)).sort()) walk(path.join(relative, name));
  };
  walk('');
  return state;
}
