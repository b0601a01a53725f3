import { availableParallelism } from 'node:os';
import type { ResourceLimits } from 'node:worker_threads';
import type { WordTableBuffers } from '../embeddings/wordTable.js';
import { ModelCallError } from '../llm/port.js';
import { siblingEntry } from '../../util/helperProcess.js';
import { WorkerPool, type WorkerSlot } from '../../util/workerPool.js';
import { deserializeError, type ModelCall, type SerializedError } from './protocol.js';

/**
 * A few worker threads that run the built-in models, so that sentence tagging, concept rules and
 * embedding never hold up the API thread's event loop (a WorkerPool: least busy worker, failures
 * and aborts, lifetime; src/util/workerPool.ts). All of them start with the pool.
 *
 * Loading: the language model is loaded by every worker when it starts (`preloadChat`), the word
 * table once by one worker into SharedArrayBuffers that the others then read (`loadWordTable`):
 * nothing is loaded on the API thread, and the first call waits for it. A worker that dies fails
 * its calls with a transient `ModelCallError` (the job runtime retries them).
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

/** Why a call fails after close (`inFlight`: it was out when the pool closed). */
const modelsClosed = (inFlight: boolean) => new ModelCallError(inFlight ? 'the local models were closed during the call' : 'the local models are closed', false);

/** The worker entry beside this module: worker.ts under tsx (tests), worker.js in the build. */
const WORKER_ENTRY = siblingEntry(import.meta.url, 'worker');

export class ModelWorkerPool {
  private readonly workers: WorkerPool<ModelCall>;
  /** Workers that were given the word table (or loaded it). */
  private readonly withTable = new WeakSet<WorkerSlot>();
  private chatWanted = false;
  private table: Promise<WordTableBuffers> | null = null;
  private tableBuffers: WordTableBuffers | null = null;

  constructor(private readonly options: ModelWorkerPoolOptions = {}) {
    this.workers = new WorkerPool<ModelCall>({
      entry: WORKER_ENTRY,
      name: 'factlog-model',
      size: options.size ?? defaultModelWorkerCount(),
      ...(options.resourceLimits ? { resourceLimits: options.resourceLimits } : {}),
      closedError: modelsClosed,
      lostError: (cause) => new ModelCallError(`a local model worker stopped (${cause}); the call can be retried`, false),
      rebuildError: (error) => deserializeError(error as SerializedError),
      onSpawn: (slot) => {
        if (this.chatWanted) this.preload(slot);
        this.giveTable(slot);
      },
    });
    this.workers.spawnAll();
  }

  /** Has every worker load the language model now, and every later one when it starts. */
  preloadChat(): void {
    if (this.chatWanted) return;
    this.chatWanted = true;
    for (const slot of this.workers.running) this.preload(slot);
  }

  /** Starts loading the word table (once); resolves with its shared buffers when every worker can embed. */
  wordTable(): Promise<WordTableBuffers> {
    if (this.workers.closed) return Promise.reject(modelsClosed(false));
    this.table ??= this.loadTable();
    return this.table;
  }

  /** One call on the least busy worker. */
  call<T>(call: ModelCall, signal?: AbortSignal): Promise<T> {
    return this.workers.call<T>(call, { signal });
  }

  /** Terminates the workers; calls in flight fail, later calls are refused. */
  close(): Promise<void> {
    return this.workers.close();
  }

  /** How many workers are running (tests). */
  get workerCount(): number {
    return this.workers.workerCount;
  }

  private loadTable(): Promise<WordTableBuffers> {
    const loader = this.workers.leastBusy();
    const loaded = this.workers.callOn(loader, { method: 'loadWordTable', ...(this.options.cacheDir ? { cacheDir: this.options.cacheDir } : {}) }).then((value) => {
      const table = value as WordTableBuffers;
      this.tableBuffers = table;
      this.withTable.add(loader);
      for (const slot of this.workers.running) this.giveTable(slot);
      return table;
    });
    // A failed load (its worker died, the package is missing) is tried again by the next call.
    loaded.catch(() => {
      if (this.table === loaded) this.table = null;
    });
    return loaded;
  }

  private preload(slot: WorkerSlot): void {
    // A failure surfaces again on the first real call, where a caller sees it.
    this.workers.callOn(slot, { method: 'preloadChat' }).catch(() => undefined);
  }

  private giveTable(slot: WorkerSlot): void {
    if (this.tableBuffers === null || this.withTable.has(slot)) return;
    this.withTable.add(slot);
    this.workers.callOn(slot, { method: 'useWordTable', table: this.tableBuffers }).catch(() => undefined);
  }
}
