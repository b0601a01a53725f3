import { createHash } from 'node:crypto';
import { globSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import type { Database } from '../../src/db/database.js';
import { DumpBlob } from '../../src/db/pgliteDump.js';
import { pgliteWasmModules } from '../../src/db/pgliteWasm.js';
import { dumpBytes, keepDumpFile, openTestDatabase, PGLITE_VERSION, pgliteStartParams, pgliteTemplate, TEMPLATE_RECIPE } from './pglite.js';
import { ReusePool } from './reusePool.js';
import { migrateEmbeddedSchema } from './schema.js';

let migratedDump: Promise<Uint8Array<ArrayBuffer>> | null = null;
const root = path.resolve(import.meta.dirname, '../..');
const DUMP_PREFIX = 'factlog-migrated-dump-';

/**
 * What the migrated schema is made from: the installed PGlite, the template's recipe, every
 * source file of the service and its projections (a migration reads constants and helpers from
 * elsewhere), and the list of schemas migrated (./schema.ts). Any change to them names another dump.
 */
function schemaSourceKey(): string {
  const hash = createHash('sha256').update(PGLITE_VERSION).update('\0').update(TEMPLATE_RECIPE);
  const files = [...globSync(['src/**/*.ts', 'projections/**/*.ts'], { cwd: root }), 'test/helpers/schema.ts'].sort();
  for (const file of files) hash.update('\0').update(file).update('\0').update(readFileSync(path.join(root, file)));
  return hash.digest('hex').slice(0, 20);
}

/**
 * A dump of a database with the embedded tier's schema (the event store's tables, the read
 * models, pgvector): a database loads it instead of running the migrations again (about 0.45
 * CPU-s each). It is made once from the code under test and kept in the temp directory under a
 * name derived from that code (`schemaSourceKey`), so the groups of a run share it (about 0.8
 * CPU-s each) and a changed migration is always the one tested; a new dump removes older ones.
 * The opener's own migrations still run, and find nothing to do.
 */
export function migratedTemplate(): Promise<Uint8Array<ArrayBuffer>> {
  migratedDump ??= (async () => {
    const file = path.join(tmpdir(), `${DUMP_PREFIX}${schemaSourceKey()}.tar`);
    try {
      return new Uint8Array(readFileSync(file));
    } catch {
      // not made yet (or removed meanwhile by a run of other code sharing the temp directory)
    }
    const pglite = await PGlite.create({ dataDir: 'memory://', loadDataDir: new DumpBlob(await pgliteTemplate()), extensions: { vector }, startParams: pgliteStartParams, ...(await pgliteWasmModules()) });
    const knex = knexFactory({ client: ClientPgLite, dialect: 'postgres', connection: () => ({ pglite }) } as Knex.Config);
    let dump: Uint8Array<ArrayBuffer>;
    try {
      await knex.raw('CREATE EXTENSION IF NOT EXISTS vector');
      await migrateEmbeddedSchema(knex);
      dump = await dumpBytes(pglite);
    } finally {
      await knex.destroy();
      if (!pglite.closed) await pglite.close();
    }
    for (const older of readdirSync(tmpdir())) {
      if (older.startsWith(DUMP_PREFIX) && older.endsWith('.tar') && older !== path.basename(file)) rmSync(path.join(tmpdir(), older), { force: true });
    }
    keepDumpFile(file, dump);
    return dump;
  })();
  return migratedDump;
}

/**
 * Closed databases, emptied to what the migrated dump holds and kept for the next opener of this
 * process (ReusePool): opening one (PGlite's thread started, the dump loaded) costs about 0.6
 * CPU-s; the stage fixtures and the search tests open about fifty in a unit run.
 */
const keptDatabases = new ReusePool<Database>((db) => db.close());
/**
 * A migrated database before any test used it: the relations and functions of `public`, and the
 * tables the migrations filled (`schema_migrations`, which a service's own migrations read) with
 * their row counts. Emptying truncates every other table.
 */
let migratedState: Promise<{ objects: Set<string>; filled: Map<string, number> }> | null = null;

/** The kinds of `publicObjects`' strings and the statements that drop them, in the order they are dropped. */
const DROP_ORDER: ReadonlyArray<[kind: string, keyword: string]> = [['r', 'TABLE'], ['m', 'MATERIALIZED VIEW'], ['v', 'VIEW'], ['i', 'INDEX'], ['S', 'SEQUENCE'], ['f', 'FUNCTION']];

/** Each relation (by kind) and function of `public`, one string each. */
async function publicObjects(db: Database): Promise<Set<string>> {
  const { rows } = await db.knex.raw<{ rows: Array<{ object: string }> }>(
    `SELECT c.relkind::text || ' ' || quote_ident(c.relname) AS object FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace
     UNION ALL
     SELECT 'f ' || p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace`,
  );
  return new Set(rows.map((row) => row.object));
}

/** The tables among `publicObjects`' strings, by name. */
function tablesOf(objects: ReadonlySet<string>): string[] {
  return [...objects].filter((object) => object.startsWith('r ')).map((object) => object.slice(2));
}

/** The tables of `objects` that hold rows, with their counts. */
async function filledTables(db: Database, objects: ReadonlySet<string>): Promise<Map<string, number>> {
  const tables = tablesOf(objects);
  const counts = await db.knex.raw<{ rows: Array<{ table: string; rows: number }> }>(
    tables.map((table) => `SELECT ${db.knex.raw('?', [table]).toQuery()} AS table, count(*)::int AS rows FROM ${table}`).join(' UNION ALL '),
  );
  return new Map(counts.rows.filter((row) => row.rows > 0).map((row) => [row.table, row.rows]));
}

async function migratedStateOf(db: Database): Promise<{ objects: Set<string>; filled: Map<string, number> }> {
  const objects = await publicObjects(db);
  return { objects, filled: await filledTables(db, objects) };
}

/**
 * A throwaway PGlite database (in a worker thread, as the service runs it) with the embedded
 * tier's schema and pgvector, empty: a kept one, else one loaded from the migrated dump. Its
 * `close()` gives it back to be emptied and kept.
 */
export async function openMigratedDatabase(): Promise<Database> {
  const db = keptDatabases.take() ?? (await openFromTemplate());
  let released: Promise<void> | null = null;
  // A second close is the first one's: the database is kept once.
  return { ...db, close: () => (released ??= releaseMigratedDatabase(db)) };
}

async function openFromTemplate(): Promise<Database> {
  const db = await openTestDatabase({ kind: 'pglite', dataDir: 'memory://', loadDataDir: await migratedTemplate() });
  try {
    await migrateEmbeddedSchema(db.knex);
    migratedState ??= migratedStateOf(db);
    await migratedState;
  } catch (error) {
    await db.close();
    throw error;
  }
  return db;
}

/**
 * Empties a database to what the migrated dump holds and keeps it: what a test made beyond the
 * migrations (the vector tables a search index makes on first use, their indexes, anything else)
 * is dropped, every table of the migrations truncated with its sequences restarted (but those the
 * migrations filled, whose rows must then be as they were), and advisory locks released. One that
 * cannot be emptied is closed.
 */
async function releaseMigratedDatabase(db: Database): Promise<void> {
  try {
    if (keptDatabases.full || migratedState === null) throw new Error('not kept');
    const { objects: migrated, filled } = await migratedState;
    const added = [...(await publicObjects(db))].filter((object) => !migrated.has(object));
    // Tables first: dropping one drops its indexes and sequences, which IF EXISTS then passes over.
    for (const [kind, keyword] of DROP_ORDER) {
      for (const object of added) if (object.startsWith(`${kind} `)) await db.knex.raw(`DROP ${keyword} IF EXISTS ${object.slice(2)} CASCADE`);
    }
    const left = [...(await publicObjects(db))].filter((object) => !migrated.has(object));
    if (left.length > 0) throw new Error(`not emptied: ${left.join(', ')}`);
    await db.knex.raw(`TRUNCATE ${tablesOf(migrated).filter((table) => !filled.has(table)).join(', ')} RESTART IDENTITY`);
    const stillFilled = await filledTables(db, migrated);
    if ([...filled].some(([table, rows]) => stillFilled.get(table) !== rows) || stillFilled.size !== filled.size) throw new Error('not emptied: a filled table changed');
    await db.knex.raw('SELECT pg_advisory_unlock_all()');
  } catch {
    await db.close();
    return;
  }
  keptDatabases.keep(db);
}
