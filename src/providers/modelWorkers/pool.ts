import { availableParallelism } from 'node:os';
import { Worker, type ResourceLimits } from 'node:worker_threads';
import type { WordTableBuffers } from '../embeddings/wordTable.js';
import { ModelCallError } from '../llm/port.js';
import { siblingEntry } from '../../util/helperProcess.js';
import { deserializeError, type ModelCall, type ModelReply, type ModelRequest } from './protocol.js';

/**
 * A few worker threads that run the built-in models, so that sentence tagging, concept rules and
 * embedding never hold up the API thread's event loop. Calls go to the worker with the fewest
 * calls in flight; a worker handles its calls in order.
 *
 * - Loading: the language model is loaded by every worker when it starts (`preloadChat`), the
 *   word table once by one worker into SharedArrayBuffers that the others then read
 *   (`loadWordTable`): nothing is loaded on the API thread, and the first call waits for it.
 * - Failure: a worker that dies (an uncaught error, out of memory, terminated) fails its calls in
 *   flight with a transient `ModelCallError` (the job runtime retries them) and is replaced on the
 *   next call. A call whose signal aborts is rejected at once with the signal's reason, and its
 *   worker is terminated, since a call that ran into its job's deadline may never return.
 * - Lifetime: `close` terminates the workers. An idle worker does not keep the process alive.
 */

/** Sized to the machine: one core is left to the API thread and the database, at most four workers. */
export function defaultModelWorkerCount(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

export interface ModelWorkerPoolOptions {
  /** Worker threads; default `defaultModelWorkerCount()`. */
  size?: number;
  /** The local embedder's cache directory (embeddings/local.ts); default next to the package. */
  cacheDir?: string;
  /** Heap limits of each worker: a call that runs away then ends its worker, not the process. */
  resourceLimits?: ResourceLimits;
}

interface PendingCall {
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

interface WorkerSlot {
  worker: Worker;
  inFlight: Map<number, PendingCall>;
  hasTable: boolean;
  /** The uncaught error that is ending the worker, for the calls it fails. */
  crash: Error | null;
}

/** The worker entry beside this module: worker.ts under tsx (tests), worker.js in the build. */
const WORKER_ENTRY = siblingEntry(import.meta.url, 'worker');

export class ModelWorkerPool {
  private readonly size: number;
  private readonly slots: WorkerSlot[] = [];
  private nextId = 0;
  private chatWanted = false;
  private table: Promise<WordTableBuffers> | null = null;
  private tableBuffers: WordTableBuffers | null = null;
  private closed = false;

  constructor(private readonly options: ModelWorkerPoolOptions = {}) {
    this.size = options.size ?? defaultModelWorkerCount();
    if (!Number.isInteger(this.size) || this.size < 1) throw new RangeError(`model worker count must be a positive integer, is ${this.size}`);
    while (this.slots.length < this.size) this.spawn();
  }

  /** Has every worker load the language model now, and every later one when it starts. */
  preloadChat(): void {
    if (this.chatWanted) return;
    this.chatWanted = true;
    for (const slot of this.slots) this.preload(slot);
  }

  /** Starts loading the word table (once); resolves with its shared buffers when every worker can embed. */
  wordTable(): Promise<WordTableBuffers> {
    if (this.closed) return Promise.reject(new ModelCallError('the local models are closed', false));
    this.table ??= this.loadTable();
    return this.table;
  }

  /** One call on the least busy worker. */
  async call<T>(call: ModelCall, signal?: AbortSignal): Promise<T> {
    if (this.closed) throw new ModelCallError('the local models are closed', false);
    signal?.throwIfAborted();
    return (await this.callOn(this.leastBusy(), call, signal)) as T;
  }

  /** Terminates the workers; calls in flight fail, later calls are refused. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(this.slots.map((slot) => slot.worker.terminate()));
  }

  /** How many workers are running (tests). */
  get workerCount(): number {
    return this.slots.length;
  }

  private loadTable(): Promise<WordTableBuffers> {
    const loader = this.leastBusy();
    const loaded = this.callOn(loader, { method: 'loadWordTable', ...(this.options.cacheDir ? { cacheDir: this.options.cacheDir } : {}) }).then((value) => {
      const table = value as WordTableBuffers;
      this.tableBuffers = table;
      loader.hasTable = true;
      for (const slot of this.slots) this.giveTable(slot);
      return table;
    });
    // A failed load (its worker died, the package is missing) is tried again by the next call.
    loaded.catch(() => {
      if (this.table === loaded) this.table = null;
    });
    return loaded;
  }

  private spawn(): WorkerSlot {
    const worker = new Worker(WORKER_ENTRY, {
      name: `factlog-model-${this.slots.length}`,
      ...(this.options.resourceLimits ? { resourceLimits: this.options.resourceLimits } : {}),
    });
    const slot: WorkerSlot = { worker, inFlight: new Map(), hasTable: false, crash: null };
    worker.unref();
    worker.on('message', (reply: ModelReply) => this.settle(slot, reply));
    worker.on('error', (error: Error) => {
      slot.crash = error;
    });
    worker.on('exit', (code) => this.lost(slot, code));
    this.slots.push(slot);
    if (this.chatWanted) this.preload(slot);
    this.giveTable(slot);
    return slot;
  }

  private preload(slot: WorkerSlot): void {
    // A failure surfaces again on the first real call, where a caller sees it.
    this.callOn(slot, { method: 'preloadChat' }).catch(() => undefined);
  }

  private giveTable(slot: WorkerSlot): void {
    if (this.tableBuffers === null || slot.hasTable) return;
    slot.hasTable = true;
    this.callOn(slot, { method: 'useWordTable', table: this.tableBuffers }).catch(() => undefined);
  }

  private leastBusy(): WorkerSlot {
    if (this.slots.length < this.size) return this.spawn();
    let best = this.slots[0] as WorkerSlot;
    for (const slot of this.slots) if (slot.inFlight.size < best.inFlight.size) best = slot;
    return best;
  }

  private callOn(slot: WorkerSlot, call: ModelCall, signal?: AbortSignal): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const id = ++this.nextId;
      const onAbort = () => {
        if (!slot.inFlight.delete(id)) return;
        reject(signal?.reason);
        // The worker may be stuck in this call: replace it rather than queue behind it.
        this.retire(slot);
      };
      slot.inFlight.set(id, {
        resolve: (value) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value);
        },
        reject: (error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      // A busy worker keeps the process alive until it answers; an idle one does not.
      if (slot.inFlight.size === 1) slot.worker.ref();
      slot.worker.postMessage({ id, call } satisfies ModelRequest);
    });
  }

  private settle(slot: WorkerSlot, reply: ModelReply): void {
    const pending = slot.inFlight.get(reply.id);
    if (pending === undefined) return;
    slot.inFlight.delete(reply.id);
    if (slot.inFlight.size === 0) slot.worker.unref();
    if (reply.ok) pending.resolve(reply.value);
    else pending.reject(deserializeError(reply.error));
  }

  /** Takes a worker out of service at once; its other calls fail when it has exited. */
  private retire(slot: WorkerSlot): void {
    const at = this.slots.indexOf(slot);
    if (at !== -1) this.slots.splice(at, 1);
    void slot.worker.terminate();
  }

  private lost(slot: WorkerSlot, code: number): void {
    const at = this.slots.indexOf(slot);
    if (at !== -1) this.slots.splice(at, 1);
    const cause = slot.crash === null ? `exit code ${code}` : slot.crash.message;
    const error = this.closed
      ? new ModelCallError('the local models were closed during the call', false)
      : new ModelCallError(`a local model worker stopped (${cause}); the call can be retried`, false);
    for (const pending of slot.inFlight.values()) pending.reject(error);
    slot.inFlight.clear();
  }
}
