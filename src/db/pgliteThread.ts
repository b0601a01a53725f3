import { fork } from 'node:child_process';
import { statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { Results } from '@electric-sql/pglite';
import { pgliteWasmModules } from './pgliteWasm.js';
import { helperExecArgv, helperProcessEnv, siblingEntry } from '../util/helperProcess.js';
import {
  INITDB_DONE,
  deserializeDatabaseError,
  type PgliteQueryOptions,
  type PgliteReply,
  type PgliteRequest,
  type PgliteWorkerData,
} from './pgliteProtocol.js';

const WORKER_ENTRY = siblingEntry(import.meta.url, 'pgliteWorker');
const INITDB_ENTRY = siblingEntry(import.meta.url, 'pgliteInitdbChild');

/**
 * Whether `dataDir` holds no database yet, so that opening it would run initdb. Only a missing
 * file means none: a directory this user may not read (another user's, mode 0700) was taken as
 * empty, so the read commands said it "holds no database" and `serve` went on to initdb there.
 */
export function needsInitdb(dataDir: string): boolean {
  if (dataDir.startsWith('memory://')) return false;
  const versionFile = path.join(path.resolve(dataDir), 'PG_VERSION');
  try {
    statSync(versionFile);
    return false;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return true;
    throw new Error(
      `cannot read the data directory ${path.resolve(dataDir)} (storage.data_dir, STORAGE_DATA_DIR): ${(error as Error).message}; run factlog as the user that owns it, or give this user access`,
      { cause: error },
    );
  }
}

/**
 * Runs PGlite's initdb for a new data directory in a short-lived child process
 * (src/db/pgliteInitdbChild.ts). Done in this process, initdb raised its peak RSS by ~300 MB and
 * left ~190 MB resident for good (docs/performance.md, "Memory of an embedded node"). The child
 * has the same node flags (and so the same TypeScript loader in tests) as this process; it
 * ends when initdb does, and by itself if this process dies meanwhile (its IPC channel closes).
 */
export async function initdbInChildProcess(
  dataDir: string,
  settings: Readonly<Record<string, string>> = {},
  { entry = INITDB_ENTRY, exitGraceMs = INITDB_EXIT_GRACE_MS }: { entry?: URL; exitGraceMs?: number } = {},
): Promise<void> {
  const child = fork(fileURLToPath(entry), [dataDir, JSON.stringify(settings)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: helperExecArgv(),
    env: helperProcessEnv(),
  });
  // A signal that ends this process while the child works (a SIGTERM during a first start) must
  // end the child too: busy in initdb it cannot notice its parent is gone, and it would go on
  // writing the directory without the lock, beside the next start's own initdb.
  const endChildToo = (signal: NodeJS.Signals) => {
    child.kill('SIGKILL');
    stopForwarding();
    // Nobody else handles it yet (the service installs its handlers once it listens): end as the signal would have.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  };
  const killChild = () => child.kill('SIGKILL');
  const signals = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
  for (const signal of signals) process.on(signal, endChildToo);
  process.on('exit', killChild);
  const stopForwarding = () => {
    for (const signal of signals) process.off(signal, endChildToo);
    process.off('exit', killChild);
  };
  child.once('exit', stopForwarding);
  await new Promise<void>((resolve, reject) => {
    let done = false;
    // The child says so once the directory is initialised and closed. Its exit can then hang in
    // node's teardown (seen once in 15 boots: the main thread waiting on a futex after
    // process.exit), so a child that is done and still there after a moment is killed.
    child.on('message', (message) => {
      if (message !== INITDB_DONE || done) return;
      done = true;
      resolve();
      setTimeout(() => child.kill('SIGKILL'), exitGraceMs).unref();
    });
    child.once('error', (error) => {
      child.kill('SIGKILL');
      reject(error);
    });
    child.once('exit', (code, signal) => {
      if (code === 0 || done) resolve();
      else reject(new Error(`PGlite initdb of ${dataDir} failed in its child process (${signal ?? `exit code ${code}`})`));
    });
  });
}

/** How long a child that is done may take to exit before it is killed. */
const INITDB_EXIT_GRACE_MS = 2000;

interface Pending {
  resolve(value: PgliteReply & { ok: true }): void;
  reject(error: Error): void;
}

export interface PgliteThreadOptions {
  dataDir: string;
  /** A `dumpDataDir` tarball's bytes to start from instead of initdb (a copy goes to the worker). */
  loadDataDir?: Uint8Array<ArrayBuffer>;
  /** Read the directory and never write it: PostgreSQL's writes stay in memory (src/db/pgliteSnapshot.ts). */
  readOnly?: boolean;
  settings?: Readonly<Record<string, string>>;
}

/**
 * PGlite in a worker thread, with the part of PGlite's interface that knex-pglite and the rest of
 * the code use: `waitReady`, `query`, `exec`, `close`, `closed`. PGlite executes each statement
 * synchronously in WebAssembly; in the worker that time no longer blocks the API thread's event
 * loop, which only posts the statement and receives the rows (a structured clone each way).
 *
 * One statement is in flight at a time in practice (knex hands PGlite's one connection to one
 * caller, behind the priority gate); the worker answers in arrival order either way.
 *
 * A worker that dies (out of memory, a WebAssembly abort) fails the statements in flight and every
 * later one: the database is gone, as an in-thread PGlite's would be.
 */
export class PgliteThread {
  readonly waitReady: Promise<void>;
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private closing: Promise<void> | null = null;
  /**
   * knex opens a transaction with `BEGIN;` and sends its first statement once that is answered.
   * PostgreSQL takes a transaction's snapshot at its first statement, not at `BEGIN`, so the
   * `BEGIN` is answered here and sent with the next statement: one crossing to the worker and
   * back less per transaction, about a millisecond of the held connection when the API thread
   * is busy (docs/performance.md, "Twenty-seventh round").
   */
  private deferredBegin: string | null = null;
  private failure: Error | null = null;
  private exited = false;
  private readonly exitedPromise: Promise<void>;

  private constructor(data: PgliteWorkerData, transfer: ArrayBuffer[]) {
    this.worker = new Worker(WORKER_ENTRY, { name: 'factlog-pglite', workerData: data, transferList: transfer });
    this.worker.unref();
    let ready!: { resolve(): void; reject(error: Error): void };
    this.waitReady = new Promise<void>((resolve, reject) => (ready = { resolve, reject }));
    this.pending.set(0, { resolve: () => ready.resolve(), reject: (error) => ready.reject(error) });
    this.worker.ref(); // until it has opened
    this.worker.on('message', (reply: PgliteReply) => this.settle(reply));
    this.worker.on('error', (error: Error) => {
      this.failure ??= new Error(`the PGlite worker thread failed: ${error.message}`, { cause: error });
    });
    this.exitedPromise = new Promise((resolve) =>
      this.worker.once('exit', (code) => {
        this.exited = true;
        this.failure ??= new Error(`the PGlite worker thread exited (code ${code})`);
        for (const pending of this.pending.values()) pending.reject(this.failure);
        this.pending.clear();
        resolve();
      }),
    );
  }

  /** Starts the worker and resolves once its PGlite is open (initdb or `loadDataDir` done). */
  static async open(options: PgliteThreadOptions): Promise<PgliteThread> {
    const modules = await pgliteWasmModules();
    const loadDataDir = options.loadDataDir?.slice().buffer;
    const thread = new PgliteThread(
      { dataDir: options.dataDir, ...(loadDataDir ? { loadDataDir } : {}), ...(options.readOnly ? { readOnly: true } : {}), ...modules, settings: options.settings ?? {} },
      loadDataDir ? [loadDataDir] : [],
    );
    try {
      await thread.waitReady;
    } catch (error) {
      await thread.worker.terminate();
      throw error;
    }
    return thread;
  }

  get closed(): boolean {
    return this.closing !== null || this.exited;
  }

  query<T = Record<string, unknown>>(sql: string, params?: unknown[], options?: PgliteQueryOptions): Promise<Results<T>> {
    if (this.deferredBegin === null && this.closing === null && !params?.length && PLAIN_BEGIN.test(sql)) {
      this.deferredBegin = sql;
      return Promise.resolve({ rows: [], fields: [], affectedRows: 0 });
    }
    return this.send({ op: 'query', sql, ...(params ? { params } : {}), ...cloneableOptions(options), ...this.beginPart() }) as Promise<Results<T>>;
  }

  exec(sql: string, options?: PgliteQueryOptions): Promise<Results[]> {
    return this.send({ op: 'exec', sql, ...cloneableOptions(options), ...this.beginPart() }) as Promise<Results[]>;
  }

  /** Closes PGlite (its files are consistent afterwards) and ends the worker. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.exited) {
        try {
          await this.request({ op: 'close' });
        } catch {
          // a worker that already failed has nothing left to close
        }
      }
      // The worker ends by itself once closed; one that does not (a stray handle) is ended here.
      const stray = setTimeout(() => void this.worker.terminate(), 2000);
      await this.exitedPromise;
      clearTimeout(stray);
    })();
    return this.closing;
  }

  /** The held-back `BEGIN`, to ride with the statement about to be sent. */
  private beginPart(): { begin?: string } {
    const begin = this.deferredBegin;
    this.deferredBegin = null;
    return begin === null ? {} : { begin };
  }

  private send(request: DistributiveOmit<PgliteRequest, 'id'>): Promise<unknown> {
    if (this.closing !== null) return Promise.reject(new Error('PGlite is closed'));
    return this.request(request);
  }

  private request(request: DistributiveOmit<PgliteRequest, 'id'>): Promise<unknown> {
    if (this.failure !== null || this.exited) return Promise.reject(this.failure ?? new Error('PGlite is closed'));
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.pending.set(id, { resolve: (reply) => resolve(reply.value), reject });
      // A statement in flight keeps the process alive until it is answered; an idle worker does not.
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage({ ...request, id } as PgliteRequest);
    });
  }

  private settle(reply: PgliteReply): void {
    const pending = this.pending.get(reply.id);
    if (pending === undefined) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if (reply.ok) pending.resolve(reply);
    else pending.reject(deserializeDatabaseError(reply.error));
  }
}

/** A transaction's start without options, as knex sends it: it returns no rows, and a failure shows on the next statement. */
const PLAIN_BEGIN = /^\s*BEGIN\s*;?\s*$/i;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Only `rowMode` crosses to the worker; knex passes no other option to PGlite. */
function cloneableOptions(options: PgliteQueryOptions | undefined): { options?: PgliteQueryOptions } {
  return options?.rowMode ? { options: { rowMode: options.rowMode } } : {};
}
