import { cpSync, existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { openDatabase, pgliteSettings, type Database } from '../../src/db/database.js';
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
 * files to copy: 0.7 → 0.3 CPU-s per test service on this VM. `TEMPLATE_RECIPE` names the recipe
 * in the cache's file names, so a checkout with another recipe keeps its own files.
 */
const TEMPLATE_RECIPE = 'postgres-only';
const root = path.resolve(import.meta.dirname, '../..');
/** The installed PGlite's version: its data directories and dumps are kept per version. */
export const PGLITE_VERSION = JSON.parse(readFileSync(path.join(root, 'node_modules/@electric-sql/pglite/package.json'), 'utf8')).version as string;
let template: Promise<Uint8Array<ArrayBuffer>> | null = null;
let templateDir: Promise<string> | null = null;

/**
 * Start parameters for a PGlite opened in the test's own thread, with the settings the service
 * gives its PGlite (src/db/database.ts): PostgreSQL's default 128 MB buffer pool, touched at
 * every start, made an in-memory start cost about 0.34 CPU-s instead of 0.23.
 */
export const pgliteStartParams: string[] = [
  ...PGlite.defaultStartParams,
  ...Object.entries(pgliteSettings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
];

/** The template's dump, as bytes for `openDatabase` (`new DumpBlob(bytes)` for an in-thread PGlite). */
export function pgliteTemplate(): Promise<Uint8Array<ArrayBuffer>> {
  template ??= (async () => {
    const file = path.join(tmpdir(), `factlog-pglite-initdb-${PGLITE_VERSION}-${TEMPLATE_RECIPE}.tar`);
    if (existsSync(file)) return new Uint8Array(readFileSync(file));
    const fresh = await PGlite.create('memory://', await pgliteWasmModules());
    await fresh.exec(`UPDATE pg_database SET datistemplate = false WHERE datname IN ('template0', 'template1')`);
    await fresh.exec('DROP DATABASE template0');
    await fresh.exec('DROP DATABASE template1');
    await fresh.exec('CHECKPOINT');
    const dump = await dumpBytes(fresh);
    await fresh.close();
    keepDumpFile(file, dump);
    return dump;
  })();
  return template;
}

/** `pglite`'s data directory as an uncompressed tar, in bytes (what `pgliteTemplate` and `openDatabase` take). */
export async function dumpBytes(pglite: PGlite): Promise<Uint8Array<ArrayBuffer>> {
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
  return openDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await pgliteTemplate() });
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
    const db = await openDatabase({ kind: 'pglite', dataDir: temporary, loadDataDir: await pgliteTemplate() });
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
