import { mkdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { checkServerIdentity, type ConnectionOptions } from 'node:tls';
import knexFactory, { type Knex } from 'knex';
import ClientPgLite from 'knex-pglite';
import { type Autovacuum, startAutovacuum } from './autovacuum.js';
import { acquireDataDirLock } from './dataDirLock.js';
import { initdbInChildProcess, needsInitdb, PgliteThread } from './pgliteThread.js';
import { gateConnection, PriorityGate } from './priority.js';
import { registerRawRunner } from './rawQuery.js';
import { PreparingPgClient } from './serverPrepared.js';
import { errorMessage } from '../util/errorMessage.js';

/**
 * One way to reach PostgreSQL: a knex instance over either PGlite (embedded WASM, run in a worker
 * thread of this process: src/db/pgliteThread.ts) or a PostgreSQL server through `pg`. Everything
 * above this file sees only `Database`.
 */
export interface Database {
  readonly knex: Knex;
  /** `pglite` runs on one connection in a worker thread of this process; `postgres` is a server with a pool. */
  readonly kind: 'pglite' | 'postgres';
  /** Whether the pgvector extension is available (always on PGlite; probed on a server). */
  readonly hasVector: boolean;
  /**
   * Whether a request (a foreground caller, src/db/priority.ts) waits for the connection. Only
   * on PGlite, where every caller queues for one connection: work that holds it for a series of
   * transactions (the projection runner's batches) ends the series early to let a request in.
   */
  requestsWaiting?(): boolean;
  /**
   * Milliseconds since a request last entered for the connection (PGlite only; Infinity before
   * the first). The projection runner sizes its parts by it: short while requests come, so one
   * that arrives waits little; long on a quiet node, where a catch-up then writes each run whole.
   */
  msSinceRequest?(): number;
  close(): Promise<void>;
}

export type DatabaseOptions =
  | {
      kind: 'pglite';
      /** directory for the data files; `memory://` for a throwaway database */
      dataDir: string;
      /** a `dumpDataDir` tarball's bytes to start a new database from instead of running initdb (tests) */
      loadDataDir?: Uint8Array<ArrayBuffer>;
      /** server settings over `pgliteSettings` (`-c name=value` at start) */
      settings?: Readonly<Record<string, string>>;
      /** ms between the embedded autovacuum's rounds (src/db/autovacuum.ts; default 10 s); false for none */
      autovacuumIntervalMs?: number | false;
      /**
       * Read the directory and never write it (the commands that only read): its files are read
       * as PostgreSQL needs them and its writes stay in memory, dropped on close
       * (src/db/pgliteSnapshot.ts). No autovacuum; the lock is held as for any open. The
       * directory must hold a database already.
       */
      readOnly?: boolean;
    }
  | {
      kind: 'postgres';
      url: string;
      maxConns?: number;
      /** `databases.<name>.ssl_mode`, with libpq's meanings (postgresTls) */
      sslMode?: PostgresSslMode;
      /**
       * Only read (the commands that only read): every transaction of the session is read-only
       * (`default_transaction_read_only`), so a write the code would attempt fails instead of
       * landing, and nothing is created: the pgvector extension is looked for, not installed.
       * What a role that may only read, or a read replica, can open.
       */
      readOnly?: boolean;
    };

export type PostgresSslMode = 'disable' | 'require' | 'verify-ca' | 'verify-full';

/**
 * `pg`'s TLS options for an ssl_mode, meaning what libpq's sslmode means: `require` encrypts and
 * checks no certificate; `verify-ca` checks that the server's certificate chains to a trusted CA
 * (Node's store, plus `tls.ca_file` or the file NODE_EXTRA_CA_CERTS names) but not the host name it is for;
 * `verify-full` checks both. Node checks the host name unless told not to, so verify-ca skips
 * that check explicitly, and verify-full's refusal says which setting made it.
 */
export function postgresTls(sslMode: PostgresSslMode | undefined): false | ConnectionOptions {
  switch (sslMode) {
    case undefined:
    case 'disable':
      return false;
    case 'require':
      return { rejectUnauthorized: false };
    case 'verify-ca':
      return { rejectUnauthorized: true, checkServerIdentity: () => undefined };
    case 'verify-full':
      return {
        rejectUnauthorized: true,
        checkServerIdentity: (host, certificate) => {
          const mismatch = checkServerIdentity(host, certificate);
          if (mismatch) mismatch.message = `the PostgreSQL server's certificate is not for ${host} (ssl_mode verify-full checks the host name; verify-ca checks only the CA): ${mismatch.message}`;
          return mismatch;
        },
      };
  }
}

/**
 * The server settings an embedded node gives its PGlite.
 *
 * shared_buffers: PGlite's memory is its WebAssembly heap, which grows and never shrinks, and
 * PGlite touches its whole buffer pool when it starts. PostgreSQL's default (128MB) is sized for
 * a server; an embedded node reads the rest of its files through the OS page cache, which is not
 * the process's memory. 32MB saved about 90 MB of RSS (docs/performance.md, "Memory"); 24MB
 * brought the 1,000-page run's peak from 480 to 470 MiB at no measured cost ("Seventh round").
 *
 * default_statistics_target: an ANALYZE (src/db/autovacuum.ts) holds the one connection while
 * requests wait, and samples 300 rows per unit of target. At PostgreSQL's 100 the facts and
 * events tables of a 1,000-page repository took 57–157 ms each; at 30, 36–47 ms
 * (docs/performance.md, "Twenty-fourth round"). The reads plan on keys and arrays of keys,
 * which 30 most common values and histogram buckets describe as well.
 */
export const pgliteSettings: Readonly<Record<string, string>> = {
  shared_buffers: '24MB',
  default_statistics_target: '30',
};

/** How often an embedded node checks its tables for a VACUUM or ANALYZE (the server's autovacuum_naptime is 60 s). */
const EMBEDDED_AUTOVACUUM_INTERVAL_MS = 10_000;

/** File-system refusals of a data directory, said as such: `mkdir -p` on a read-only mount reports ENOENT. */
const UNWRITABLE = new Set(['EROFS', 'EACCES', 'EPERM', 'ENOENT', 'ENOTDIR']);

/**
 * `mkdir -p`, one missing component at a time. Node's recursive mkdir loops forever where a
 * directory exists but refuses a child with ENOENT (`/proc/x`: mkdir('/proc/x') is ENOENT,
 * mkdir('/proc') EEXIST); here a component still refused once its parent exists fails with that ENOENT.
 */
function makeDirectories(dir: string, parentMade = false): void {
  try {
    mkdirSync(dir);
    return;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') {
      if (statSync(dir).isDirectory()) return;
      // A file where the directory should be: said as a path that is not a directory, like a file on the way to it.
      throw Object.assign(new Error(`ENOTDIR: not a directory, mkdir '${dir}'`), { code: 'ENOTDIR' });
    }
    if (code !== 'ENOENT' || parentMade || path.dirname(dir) === dir) throw error;
  }
  makeDirectories(path.dirname(dir));
  makeDirectories(dir, true);
}

/** Runs `open` (making and locking the directory); a refusal names the directory and the setting. */
function writableDataDir<T>(dataDir: string, open: () => T): T {
  try {
    return open();
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code !== 'string' || !UNWRITABLE.has(code)) throw error;
    throw new Error(`cannot use the data directory ${dataDir} (storage.data_dir, STORAGE_DATA_DIR): it must be a directory this process can create and write (${(error as Error).message})`);
  }
}

/**
 * Runs one step of an open; if it fails, closes what the open has made so far (the PGlite
 * worker and the directory's lock, or the server's pool) before passing the failure on, so
 * that the same process can open again. A failure of the close itself is dropped: the step's
 * is the one to report.
 */
async function closingOnFailure<T>(close: () => Promise<void>, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
}

/**
 * Where a connection string (`postgres://…`, `esdb://…`) points, for a message: its hosts and path
 * (`db:5432/factlog`, `a:2113,b:2113`), the user, password and options left out; undefined when it
 * is no `scheme://` string. Several hosts are taken as written (URL cannot parse them).
 */
export function connectionLocation(connectionString: string): string | undefined {
  // The user part runs to the last @ of the whole string, whatever comes between: a password
  // holding an @, or a / ? # (which URL and the regex before took for the end of the host,
  // printing `admin:chan/geit@host` for `esdb://admin:chan/geit@host`). An @ in the options then
  // costs the host's name, never the password.
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(connectionString);
  if (!scheme) return undefined;
  const rest = connectionString.slice(scheme[0].length);
  const match = /^([^/?#@]+)(\/[^?#]*)?/.exec(rest.slice(rest.lastIndexOf('@') + 1));
  return match ? `${match[1]}${match[2] ?? ''}` : undefined;
}

/**
 * A PGlite directory that exists but does not open, named with the settings and the likely causes:
 * PGlite itself says only `PGlite failed to initialize properly`, naming neither the directory nor
 * why (a directory of another PostgreSQL version, or one copied while a process had it open).
 */
function unopenableDataDir(dataDir: string, error: unknown): Error {
  let version = '';
  try {
    version = readFileSync(path.join(dataDir, 'PG_VERSION'), 'utf8').trim();
  } catch {
    // Unreadable: the message goes without it.
  }
  const holds = /^[0-9]+$/.test(version) ? `; it holds a PostgreSQL ${version} database` : '';
  // PGlite's own messages may end with a period (`Aborted(). Build with -sASSERTIONS for more info.`).
  const reason = errorMessage(error).replace(/\.\s*$/, '');
  return new Error(
    `cannot open the embedded database in ${dataDir} (storage.data_dir, STORAGE_DATA_DIR): ${reason}${holds}. ` +
      "It may be damaged (copied while a process had it open, say) or made by a release whose PGlite is another PostgreSQL version: restore a backup made with this release, or run the release that made it",
    { cause: error },
  );
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.kind === 'pglite') {
    const inMemory = options.dataDir.startsWith('memory://');
    // One process per data directory: a second opener gets DataDirLockedError naming the owner.
    const lock = inMemory ? null : writableDataDir(path.resolve(options.dataDir), () => {
      if (!options.readOnly) makeDirectories(path.resolve(options.dataDir));
      return acquireDataDirLock(path.resolve(options.dataDir));
    });
    const settings = { ...pgliteSettings, ...(options.settings ?? {}) };
    let pglite: PgliteThread;
    try {
      // A new directory is initialised by a child process, whose memory goes away with it.
      if (options.readOnly && needsInitdb(options.dataDir)) throw new Error(`${options.dataDir} holds no database to read`);
      if (!options.loadDataDir && needsInitdb(options.dataDir)) await initdbInChildProcess(options.dataDir, settings);
      pglite = await PgliteThread.open({
        dataDir: options.dataDir,
        ...(options.loadDataDir ? { loadDataDir: options.loadDataDir } : {}),
        ...(options.readOnly ? { readOnly: true } : {}),
        settings,
      }).catch((error: unknown) => {
        throw inMemory || options.loadDataDir ? error : unopenableDataDir(path.resolve(options.dataDir), error);
      });
    } catch (error) {
      lock?.release();
      throw error;
    }
    const knex = knexFactory({
      client: ClientPgLite,
      dialect: 'postgres',
      // PGlite is one connection; knex-pglite manages it and refuses a pool setting. It calls
      // only `waitReady`, `query` and `close` of its PGlite, which the worker-thread proxy has.
      connection: () => ({ pglite }),
    } as Knex.Config);
    // Requests go before the projections' queued statements, and both before the pipeline's (src/db/priority.ts).
    const gate = new PriorityGate();
    gateConnection(knex.client as Parameters<typeof gateConnection>[0], gate);
    // The hot statements skip knex (src/db/rawQuery.ts), behind the same gate.
    registerRawRunner(knex, async (sql, bindings) => {
      await gate.enter();
      try {
        return await pglite.query(sql, [...bindings]);
      } finally {
        gate.leave();
      }
    });
    let autovacuum: Autovacuum | null = null;
    const close = async () => {
      try {
        await autovacuum?.stop();
        await knex.destroy();
        if (!pglite.closed) await pglite.close();
      } finally {
        lock?.release();
      }
    };
    await closingOnFailure(close, () => knex.raw('CREATE EXTENSION IF NOT EXISTS vector'));
    // PGlite has no autovacuum daemon; without statistics and vacuums, plans and tables decay as they grow.
    const autovacuumIntervalMs = options.readOnly ? false : (options.autovacuumIntervalMs ?? EMBEDDED_AUTOVACUUM_INTERVAL_MS);
    if (autovacuumIntervalMs !== false) {
      autovacuum = startAutovacuum(knex, { intervalMs: autovacuumIntervalMs, onError: (error) => console.warn('embedded autovacuum round failed:', error) });
    }
    return {
      knex,
      kind: 'pglite',
      hasVector: true,
      requestsWaiting: () => gate.waiting().foreground > 0,
      msSinceRequest: () => gate.msSinceForeground(),
      close,
    };
  }
  const ssl = postgresTls(options.sslMode);
  const knex = knexFactory({
    // The projection runner's statements go as named prepared statements (src/db/serverPrepared.ts).
    client: PreparingPgClient,
    connection: { connectionString: options.url, ssl, ...(options.readOnly ? { options: '-c default_transaction_read_only=on' } : {}) },
    pool: { min: 0, max: options.maxConns ?? 200 },
    // A connection that cannot be made rejects the statement that wanted it, which its caller
    // reports; knex would also print the error's stack (a CLI's unreachable --to, say).
    log: {
      warn(message: string) {
        if (!message.startsWith('Acquire connection error')) console.warn(message);
      },
    },
  });
  const close = () => knex.destroy();
  if (options.readOnly) {
    // A reader installs nothing: the extension is there (serve or migrate made it) or not.
    const installed = await closingOnFailure(close, () => knex.raw(`SELECT count(*)::int AS n FROM pg_catalog.pg_extension WHERE extname = 'vector'`));
    return { knex, kind: 'postgres', hasVector: (installed.rows[0]?.n ?? 0) > 0, close };
  }
  const probe = await closingOnFailure(close, () => knex.raw(`SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'vector'`));
  let hasVector = (probe.rows[0]?.n ?? 0) > 0;
  if (hasVector) {
    try {
      await knex.raw('CREATE EXTENSION IF NOT EXISTS vector');
    } catch {
      hasVector = false; // available but not permitted for this role: search stays lexical
    }
  }
  return { knex, kind: 'postgres', hasVector, close };
}

/**
 * A fresh, empty PostgreSQL database on the local server for one test or benchmark run,
 * dropped on close. Named after `prefix` and a random suffix so parallel runs never meet.
 * `locale: 'C'` makes its collation and ctype C (as on many servers), where lower() and upper()
 * change ASCII letters only; otherwise it has the server's default.
 */
export async function openScratchPostgres(
  baseUrl = process.env.FACTLOG_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
  prefix = 'factlog_test',
  options: { locale?: 'C' } = {},
): Promise<Database> {
  const name = `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = knexFactory({ client: 'pg', connection: baseUrl, pool: { min: 0, max: 1 } });
  // Another locale than the template's needs template0 (template1 may hold locale-dependent indexes).
  const locale = options.locale === 'C' ? ` TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'` : '';
  await admin.raw(`CREATE DATABASE "${name}"${locale}`);
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  const db = await openDatabase({ kind: 'postgres', url: url.toString(), maxConns: 20 });
  return {
    ...db,
    close: async () => {
      await db.close();
      await admin.raw(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await admin.destroy();
    },
  };
}

/**
 * Runs a script of several statements one by one: PGlite through knex takes one statement per
 * query. Statements are separated by a semicolon at the end of a line (no semicolons inside
 * literals in our DDL); `--` comment lines are dropped.
 */
export async function execStatements(knex: Knex, script: string): Promise<void> {
  const statements = script
    .split('\n')
    .filter((line) => !line.trim().startsWith('--'))
    .join('\n')
    .split(/;\s*(?:\n|$)/)
    .map((statement) => statement.trim())
    .filter(Boolean);
  for (const statement of statements) await knex.raw(statement);
}

/**
 * Runs schema work in a transaction that first takes a transaction-scoped advisory lock: every
 * node migrates at start-up, and concurrent `CREATE ... IF NOT EXISTS` can still collide in the
 * catalogue, so one node at a time does it and the others then find it done.
 */
export async function migrateUnderLock(knex: Knex, lockName: string, work: (trx: Knex.Transaction) => Promise<void>): Promise<void> {
  await knex.transaction(async (trx) => {
    await trx.raw('SELECT pg_advisory_xact_lock(hashtext(?))', [`factlog.migrate.${lockName}`]);
    await work(trx);
  });
}
