import { fork } from 'node:child_process';
import { existsSync } from 'node:fs';
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
  type StatementTag,
} from './pgliteProtocol.js';
import { backgroundLevel, type Level } from './priority.js';

const WORKER_ENTRY = siblingEntry(import.meta.url, 'pgliteWorker');
const INITDB_ENTRY = siblingEntry(import.meta.url, 'pgliteInitdbChild');

/** Whether `dataDir` holds no database yet, so that opening it would run initdb. */
export function needsInitdb(dataDir: string): boolean {
  return !dataDir.startsWith('memory://') && !existsSync(path.join(path.resolve(dataDir), 'PG_VERSION'));
}

/**
 * Runs PGlite's initdb for a new data directory in a short-lived child process
 * (src/db/pgliteInitdbChild.ts). Done in this process, initdb raised its peak RSS by ~300 MB and
 * left ~190 MB resident for good (docs/performance.md, "Memory of an embedded node"). The child
 * has the same node flags (and so the same TypeScript loader in tests) as this process; it
 * ends when initdb does, and by itself if this process dies meanwhile (its IPC channel closes).
 */
export async function initdbInChildProcess(dataDir: string, settings: Readonly<Record<string, string>> = {}, entry: URL = INITDB_ENTRY): Promise<void> {
  const child = fork(fileURLToPath(entry), [dataDir, JSON.stringify(settings)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    execArgv: helperExecArgv(),
    env: helperProcessEnv(),
  });
  await new Promise<void>((resolve, reject) => {
    let done = false;
    // The child says so once the directory is initialised and closed. Its exit can then hang in
    // node's teardown (seen once in 15 boots: the main thread waiting on a futex after
    // process.exit), so a child that is done and still there after a moment is killed.
    child.on('message', (message) => {
      if (message !== INITDB_DONE || done) return;
      done = true;
      resolve();
      setTimeout(() => child.kill('SIGKILL'), INITDB_EXIT_GRACE_MS).unref();
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
  level?: Level;
}

/**
 * One hand-out of the connection (src/db/database.ts gives knex one per acquisition): its
 * statements share a session, so the worker runs a transaction's statements alone until it ends.
 */
export interface PgliteSession {
  readonly waitReady: Promise<void>;
  query<T = Record<string, unknown>>(sql: string, params?: unknown[], options?: PgliteQueryOptions): Promise<Results<T>>;
  exec(sql: string, options?: PgliteQueryOptions): Promise<Results[]>;
}

export interface PgliteThreadOptions {
  dataDir: string;
  loadDataDir?: Blob;
  settings?: Readonly<Record<string, string>>;
}

/**
 * PGlite in a worker thread, with the part of PGlite's interface that knex-pglite and the rest of
 * the code use: `waitReady`, `query`, `exec`, `close`, `closed`. PGlite executes each statement
 * synchronously in WebAssembly; in the worker that time no longer blocks the API thread's event
 * loop, which only posts the statement and receives the rows (a structured clone each way).
 *
 * Every statement is posted as soon as its caller sends it, tagged with its session and its
 * caller's level (src/db/priority.ts); the worker decides the order (src/db/statementScheduler.ts).
 * This side tells the worker when a request's code sent nothing more in a turn of this event
 * loop, and keeps what the projection runner asks: whether a request waits, and since when none came.
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
  private failure: Error | null = null;
  private exited = false;
  private readonly exitedPromise: Promise<void>;
  private lastSession = 0;
  /** Requests' statements sent and not yet answered. */
  private foregroundInFlight = 0;
  private yieldScheduled = false;
  /** When a request's statement was last sent (performance.now()). */
  private lastForegroundAt = Number.NEGATIVE_INFINITY;

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
    const loadDataDir = options.loadDataDir ? await options.loadDataDir.arrayBuffer() : undefined;
    const thread = new PgliteThread(
      { dataDir: options.dataDir, ...(loadDataDir ? { loadDataDir } : {}), ...modules, settings: options.settings ?? {} },
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

  /**
   * A statement of the thread's shared session (0), at the caller's level: statements sent
   * this way are one session, as on an in-thread PGlite (a BEGIN sent here holds PGlite for them).
   */
  query<T = Record<string, unknown>>(sql: string, params?: unknown[], options?: PgliteQueryOptions): Promise<Results<T>> {
    return this.send({ op: 'query', sql, ...(params ? { params } : {}), ...cloneableOptions(options), session: SHARED_SESSION, level: backgroundLevel() }) as Promise<Results<T>>;
  }

  exec(sql: string, options?: PgliteQueryOptions): Promise<Results[]> {
    return this.send({ op: 'exec', sql, ...cloneableOptions(options), session: SHARED_SESSION, level: backgroundLevel() }) as Promise<Results[]>;
  }

  /** A new session at `level` (default: the caller's). */
  session(level: Level = backgroundLevel()): PgliteSession {
    const tag: StatementTag = { session: ++this.lastSession, level };
    /**
     * A transaction's BEGIN is answered here and sent with the transaction's first statement:
     * the caller computes that statement after BEGIN returns (a projection applies its events),
     * and meanwhile PGlite's thread, not yet inside the transaction, runs other sessions'
     * statements instead of waiting for it. PostgreSQL takes a transaction's snapshot at its
     * first statement, not at BEGIN, so nothing a caller can see changes.
     */
    let heldBegin: string | undefined;
    const takeBegin = () => {
      const begin = heldBegin;
      heldBegin = undefined;
      return begin === undefined ? {} : { begin };
    };
    return {
      waitReady: this.waitReady,
      query: <T>(sql: string, params?: unknown[], options?: PgliteQueryOptions) => {
        if (heldBegin === undefined && (params === undefined || params.length === 0) && BEGIN.test(sql)) {
          heldBegin = sql;
          return Promise.resolve(BEGIN_ANSWER as Results<T>);
        }
        return this.send({ op: 'query', sql, ...(params ? { params } : {}), ...cloneableOptions(options), ...tag, ...takeBegin() }) as Promise<Results<T>>;
      },
      exec: async (sql: string, options?: PgliteQueryOptions) => {
        const { begin } = takeBegin();
        if (begin !== undefined) await this.send({ op: 'query', sql: begin, ...tag });
        return (await this.send({ op: 'exec', sql, ...cloneableOptions(options), ...tag })) as Results[];
      },
    };
  }

  /** Whether a request's statement waits (or runs) in the worker. */
  requestsWaiting(): boolean {
    return this.foregroundInFlight > 0;
  }

  /** Milliseconds since a request's statement was last sent; Infinity if none was. */
  msSinceRequest(): number {
    return performance.now() - this.lastForegroundAt;
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

  private send(request: DistributiveOmit<Exclude<PgliteRequest, { op: 'yield' }>, 'id'>): Promise<unknown> {
    if (this.closing !== null) return Promise.reject(new Error('PGlite is closed'));
    return this.request(request);
  }

  private request(request: DistributiveOmit<Exclude<PgliteRequest, { op: 'yield' }>, 'id'>): Promise<unknown> {
    if (this.failure !== null || this.exited) return Promise.reject(this.failure ?? new Error('PGlite is closed'));
    const level = 'level' in request ? request.level : undefined;
    if (level === 'foreground') {
      this.foregroundInFlight++;
      this.lastForegroundAt = performance.now();
    }
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.pending.set(id, { resolve: (reply) => resolve(reply.value), reject, ...(level ? { level } : {}) });
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
    if (pending.level === 'foreground') {
      this.foregroundInFlight--;
      this.scheduleYield();
    }
    if (reply.ok) pending.resolve(reply);
    else pending.reject(deserializeDatabaseError(reply.error));
  }

  /**
   * After a request's statement is answered, the request's code runs on in this turn of the
   * event loop; if it sent no further statement by the end of the turn, the worker hears that
   * lower levels may go (it holds them until then: src/db/statementScheduler.ts).
   */
  private scheduleYield(): void {
    if (this.yieldScheduled) return;
    this.yieldScheduled = true;
    setImmediate(() => {
      this.yieldScheduled = false;
      if (this.foregroundInFlight === 0 && !this.exited) this.worker.postMessage({ op: 'yield' } satisfies PgliteRequest);
    });
  }
}

/** A statement that opens a transaction block (knex: `BEGIN;`, `BEGIN TRANSACTION ISOLATION LEVEL …;`). */
const BEGIN = /^\s*BEGIN\b/i;

/** What PGlite answers a BEGIN. */
const BEGIN_ANSWER: Results = { rows: [], fields: [], affectedRows: 0 };

/** The session of statements sent with `query` and `exec` on the thread itself. */
const SHARED_SESSION = 0;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** Only `rowMode` crosses to the worker; knex passes no other option to PGlite. */
function cloneableOptions(options: PgliteQueryOptions | undefined): { options?: PgliteQueryOptions } {
  return options?.rowMode ? { options: { rowMode: options.rowMode } } : {};
}
