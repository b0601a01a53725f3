import { cpSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { openDatabase, pgliteSettings, type Database, type DatabaseOptions } from '../../src/db/database.js';
import { DumpBlob } from '../../src/db/pgliteDump.js';
import { pgliteWasmModules } from '../../src/db/pgliteWasm.js';
import { ReusePool } from './reusePool.js';

/**
 * A fresh PGlite runs initdb, seconds of CPU; loading a dump of a freshly initialised one takes a
 * fraction of that. The dump is made once per machine and PGlite version and kept in the temp
 * directory, so every test file and every test service starts from it.
 *
 * The template keeps only the `postgres` database, the one PGlite connects to: initdb's
 * template0 and template1 are two more copies of the catalogs (600 of the directory's 970 files),
 * copied for every test service and never used (nothing creates a database on PGlite). Fewer
 * files to copy: 0.7 → 0.3 CPU-s per test service on this VM.
 *
 * Its WAL segments are 1 MB (`initdb --wal-segsize=1`) instead of 16: a dump holds its current
 * segment whole, so 16 of the migrated dump's 27 MB were WAL, mostly zeros, copied twice into new
 * memory at every start (to PGlite's thread, then into its in-memory file system), which this VM
 * pays for in page faults (docs/testing.md, "What a test database costs"). Only the tests' own
 * databases have them; an embedded node's initdb keeps PostgreSQL's 16 MB.
 *
 * `TEMPLATE_RECIPE` names the recipe in the cache's file names, so a checkout with another recipe
 * keeps its own files (and the migrated dump, made from this template, is keyed by it too).
 */
export const TEMPLATE_RECIPE = 'postgres-only-wal1mb';
const root = path.resolve(import.meta.dirname, '../..');
/** The installed PGlite's version: its data directories and dumps are kept per version. */
export const PGLITE_VERSION = JSON.parse(readFileSync(path.join(root, 'node_modules/@electric-sql/pglite/package.json'), 'utf8')).version as string;
let template: Promise<Uint8Array<ArrayBuffer>> | null = null;
let templateDir: Promise<string> | null = null;

/**
 * The server settings of the tests' PGlite databases: the embedded node's (src/db/database.ts),
 * with a 4 MB buffer pool instead of 24. PostgreSQL zero-fills its shared memory at every start,
 * new memory each time, which this VM pays for in page faults: a database opened from the
 * migrated dump cost about 0.1 CPU-s more with 24 MB (docs/testing.md, "What a test database
 * costs"). A test's database holds a few hundred rows; the end-to-end runs, in processes of their
 * own, keep the node's settings.
 */
export const testPgliteSettings: Readonly<Record<string, string>> = { ...pgliteSettings, shared_buffers: '4MB' };

/** Start parameters for a PGlite opened in the test's own thread, with the tests' settings. */
export const pgliteStartParams: string[] = [
  ...PGlite.defaultStartParams,
  ...Object.entries(testPgliteSettings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
];

/** `openDatabase` with the tests' settings for a PGlite database (settings the options name still win). */
export function openTestDatabase(options: DatabaseOptions): Promise<Database> {
  return openDatabase(options.kind === 'pglite' ? { ...options, settings: { ...testPgliteSettings, ...options.settings } } : options);
}

/** The template's dump, as bytes for `openDatabase` (`new DumpBlob(bytes)` for an in-thread PGlite). */
export function pgliteTemplate(): Promise<Uint8Array<ArrayBuffer>> {
  template ??= (async () => {
    const file = path.join(tmpdir(), `factlog-pglite-initdb-${PGLITE_VERSION}-${TEMPLATE_RECIPE}.tar`);
    if (existsSync(file)) return new Uint8Array(readFileSync(file));
    const fresh = await PGlite.create({ dataDir: 'memory://', initDbStartParams: ['--wal-segsize=1'], startParams: pgliteStartParams, ...(await pgliteWasmModules()) });
    await fresh.exec(`UPDATE pg_database SET datistemplate = false WHERE datname IN ('template0', 'template1')`);
    await fresh.exec('DROP DATABASE template0');
    await fresh.exec('DROP DATABASE template1');
    const dump = await dumpBytes(fresh);
    await fresh.close();
    keepDumpFile(file, dump);
    return dump;
  })();
  return template;
}

/**
 * `pglite`'s data directory as an uncompressed tar, in bytes (what `pgliteTemplate` and
 * `openDatabase` take). The directory of a live PGlite is dumped, so an opener runs crash recovery
 * from its last checkpoint: a checkpoint first, or it replays all the WAL written since (the
 * migrations', for the migrated dump) at every start. The WAL segments past the current one go:
 * a checkpoint renames finished segments as future ones (seven megabytes of them after initdb),
 * which PostgreSQL makes again when it needs them and which would otherwise be copied at every
 * start, never read.
 */
export async function dumpBytes(pglite: PGlite): Promise<Uint8Array<ArrayBuffer>> {
  await pglite.exec('CHECKPOINT');
  const { rows } = await pglite.query<{ current: string }>('SELECT pg_walfile_name(pg_current_wal_insert_lsn()) AS current');
  const current = rows[0]!.current;
  const walDir = `${PGlite.paths.PGDATA}/pg_wal`;
  const fs = pglite.Module.FS;
  for (const name of fs.readdir(walDir)) if (/^[0-9A-F]{24}$/.test(name) && name > current) fs.unlink(`${walDir}/${name}`);
  return new Uint8Array(await (await pglite.dumpDataDir('none')).arrayBuffer());
}

/**
 * Writes a dump to `file` for the other processes of the run: whole or not at all (written
 * aside, then renamed), so a reader never sees half of one; concurrent writers write equal dumps.
 */
export function keepDumpFile(file: string, dump: Uint8Array): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, dump);
  renameSync(temporary, file);
}

/** A throwaway in-memory PGlite database with pgvector, started from the template. */
export async function openTestPglite(): Promise<Database> {
  return openTestDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
}

/**
 * Initialises the PGlite directory `dir` as a fresh initdb, so the service that opens it skips
 * initdb: a copy of a data directory loaded once from the template (about 0.1 s of CPU, where
 * loading the dump into each directory started PGlite once more: about 0.8 s).
 */
export async function seedPgliteDir(dir: string): Promise<void> {
  cpSync(await pgliteTemplateDir(), dir, { recursive: true });
}

function pgliteTemplateDir(): Promise<string> {
  templateDir ??= (async () => {
    const finished = path.join(tmpdir(), `factlog-pglite-initdb-${PGLITE_VERSION}-${TEMPLATE_RECIPE}.d`);
    if (existsSync(finished)) return finished;
    const temporary = `${finished}.${process.pid}.tmp`;
    const db = await openTestDatabase({ kind: 'pglite', dataDir: temporary, loadDataDir: await pgliteTemplate() });
    await db.close();
    try {
      renameSync(temporary, finished); // readers never see half a directory
    } catch (error) {
      // Another process finished first (the target exists and is not empty): its copy is as good.
      if (!existsSync(finished)) throw error;
      rmSync(temporary, { recursive: true, force: true });
    }
    return finished;
  })();
  return templateDir;
}

/**
 * In-thread PGlites closed by tests and kept for the next opener of the process (ReusePool): the
 * event-store contract and the projection runner's tests open one per subtest, about a hundred in
 * a unit run, at about 0.3 CPU-s each.
 */
const keptPglites = new ReusePool<PGlite>((pglite) => pglite.close());

/** An in-memory PGlite in this thread, empty as one fresh from the template: a kept one, else a new one. */
export async function takeMemoryPglite(): Promise<PGlite> {
  return keptPglites.take() ?? PGlite.create({ dataDir: 'memory://', loadDataDir: new DumpBlob(await pgliteTemplate()), startParams: pgliteStartParams, ...(await pgliteWasmModules()) });
}

/**
 * Gives back a PGlite from takeMemoryPglite once its test is done with it: its session is reset
 * (`DISCARD ALL`: settings, prepared statements, advisory locks, temporary tables) and its `public`
 * schema dropped and made again, so the next taker finds what the template holds. One that is
 * closed, holds a schema of its own, or fails to empty is closed instead of kept.
 */
export async function releaseMemoryPglite(pglite: PGlite): Promise<void> {
  if (pglite.closed) return;
  try {
    // Ends a transaction the test left open or aborted (outside one it only warns, silently here).
    await pglite.exec('ROLLBACK');
    await pglite.exec('DISCARD ALL');
    const schemas = await pglite.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_namespace WHERE nspname NOT IN ('public', 'information_schema') AND nspname NOT LIKE 'pg\\_%'`,
    );
    if ((schemas.rows[0]?.n ?? 1) > 0 || keptPglites.full) throw new Error('not kept');
    await pglite.exec('DROP SCHEMA public CASCADE; CREATE SCHEMA public');
  } catch {
    if (!pglite.closed) await pglite.close();
    return;
  }
  keptPglites.keep(pglite);
}
