import { parentPort, Worker, type ResourceLimits } from 'node:worker_threads';

/**
 * A few worker threads that take calls off the API thread: the built-in models
 * (providers/modelWorkers) and document extraction (providers/fetch/extractionWorkers.ts).
 * Calls go to the worker with the fewest calls in flight; a worker handles its calls in order.
 *
 * - Failure: a worker that dies (an uncaught error, out of memory, terminated) fails its calls in
 *   flight with `lostError` (transient: the job runtime retries them) and is replaced on the next
 *   call. A call whose signal aborts is rejected at once with the signal's reason, and its worker
 *   is terminated, since a call that ran into its job's deadline may never return.
 * - Lifetime: workers start at the first call that needs one (or `spawnAll`); `close` terminates
 *   them. An idle worker does not keep the process alive.
 *
 * Every request carries an id and gets exactly one answer with that id (and, when the caller asks,
 * a `started` reply before it, as the worker begins the call); errors travel as plain
 * data (`serveWorkerCalls`' `serializeError`) and are rebuilt by `rebuildError`, so callers see
 * the errors the in-thread code throws.
 */

export interface WorkerRequest<Call> {
  id: number;
  call: Call;
  /** The caller wants to know when the worker begins the call (a `started` reply first). */
  reportStart?: boolean;
}

/** `cpu`: the worker thread's CPU time as it began the call (`process.threadCpuUsage()`). */
export type WorkerReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: unknown } | { id: number; started: true; cpu: NodeJS.CpuUsage };

/** A call its worker has begun (`CallOptions.onStart`). */
export interface StartedCall {
  /**
   * The CPU time (ms) the worker's thread has spent since it began the call: the call's own work,
   * however busy the machine is (a thread waiting for a core spends none). Calls that interleave on
   * the worker count together. Rejects once the worker has exited.
   */
  cpuTimeMs(): Promise<number>;
}

/** Options of one call. */
export interface CallOptions {
  signal?: AbortSignal;
  transfer?: ArrayBuffer[];
  /**
   * Runs when the worker begins the call: after its start-up and the calls before it on that
   * worker, so that a time limit can count the call's own time and not the wait.
   */
  onStart?: (call: StartedCall) => void;
}

/** An error as plain data for the other thread: its name and message (a pool adds its error classes' fields). */
export interface PlainError {
  name: string;
  message: string;
}

export function plainError(error: unknown): PlainError {
  return error instanceof Error ? { name: error.name, message: error.message } : { name: 'Error', message: String(error) };
}

/** An Error with the name and message a worker sent: what a pool's `rebuildError` gives for a class it does not know. */
export function errorFrom(error: PlainError): Error {
  const rebuilt = new Error(error.message);
  rebuilt.name = error.name;
  return rebuilt;
}

export interface WorkerPoolOptions {
  /** The worker's module (`siblingEntry`: .ts under tsx, .js in the build). */
  entry: URL;
  /** Thread names are `<name>-<n>`. */
  name: string;
  size: number;
  /** Heap limits of each worker: a call that runs away then ends its worker, not the process. */
  resourceLimits?: ResourceLimits;
  /** The error of a call refused because the pool is closed, or (`inFlight`) failed because it closed meanwhile. */
  closedError(inFlight: boolean): Error;
  /** The error of a call whose worker stopped (`cause`: its uncaught error or exit code). */
  lostError(cause: string): Error;
  /** The caller's error from what the worker sent. */
  rebuildError(error: unknown): Error;
  /** Runs for every worker started, before any call is sent to it. */
  onSpawn?(slot: WorkerSlot): void;
}

export interface WorkerSlot {
  readonly worker: Worker;
  readonly inFlight: Map<number, { resolve(value: unknown): void; reject(error: unknown): void; onStart?: (call: StartedCall) => void }>;
  /** The uncaught error that is ending the worker, for the calls it fails. */
  crash: Error | null;
}

export class WorkerPool<Call> {
  private readonly slots: WorkerSlot[] = [];
  private nextId = 0;
  private closedFlag = false;

  constructor(private readonly options: WorkerPoolOptions) {
    if (!Number.isInteger(options.size) || options.size < 1) throw new RangeError(`${options.name} worker count must be a positive integer, is ${options.size}`);
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** How many workers are running. */
  get workerCount(): number {
    return this.slots.length;
  }

  /** The running workers. */
  get running(): readonly WorkerSlot[] {
    return this.slots;
  }

  /** Starts the missing workers now rather than at the first calls. */
  spawnAll(): void {
    while (this.slots.length < this.options.size) this.spawn();
  }

  /** One call on the least busy worker. */
  async call<T>(call: Call, options: CallOptions = {}): Promise<T> {
    if (this.closedFlag) throw this.options.closedError(false);
    options.signal?.throwIfAborted();
    return (await this.callOn(this.leastBusy(), call, options)) as T;
  }

  /** The worker with the fewest calls in flight (a new one while the pool is not full). */
  leastBusy(): WorkerSlot {
    if (this.slots.length < this.options.size) return this.spawn();
    let best = this.slots[0] as WorkerSlot;
    for (const slot of this.slots) if (slot.inFlight.size < best.inFlight.size) best = slot;
    return best;
  }

  /** One call on this worker. */
  callOn(slot: WorkerSlot, call: Call, { signal, transfer, onStart }: CallOptions = {}): Promise<unknown> {
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
        ...(onStart ? { onStart } : {}),
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      // A busy worker keeps the process alive until it answers; an idle one does not.
      if (slot.inFlight.size === 1) slot.worker.ref();
      slot.worker.postMessage({ id, call, ...(onStart ? { reportStart: true } : {}) } satisfies WorkerRequest<Call>, transfer ?? []);
    });
  }

  /** Terminates the workers; calls in flight fail, later calls are refused. */
  async close(): Promise<void> {
    if (this.closedFlag) return;
    this.closedFlag = true;
    await Promise.all(this.slots.map((slot) => slot.worker.terminate()));
  }

  private spawn(): WorkerSlot {
    const worker = new Worker(this.options.entry, {
      name: `${this.options.name}-${this.slots.length}`,
      ...(this.options.resourceLimits ? { resourceLimits: this.options.resourceLimits } : {}),
    });
    const slot: WorkerSlot = { worker, inFlight: new Map(), crash: null };
    worker.unref();
    worker.on('message', (reply: WorkerReply) => this.settle(slot, reply));
    worker.on('error', (error: Error) => {
      slot.crash = error;
    });
    worker.on('exit', (code) => this.lost(slot, code));
    this.slots.push(slot);
    this.options.onSpawn?.(slot);
    return slot;
  }

  private settle(slot: WorkerSlot, reply: WorkerReply): void {
    const pending = slot.inFlight.get(reply.id);
    if (pending === undefined) return;
    if ('started' in reply) {
      pending.onStart?.(startedCall(slot.worker, reply.cpu));
      return;
    }
    slot.inFlight.delete(reply.id);
    if (slot.inFlight.size === 0) slot.worker.unref();
    if (reply.ok) pending.resolve(reply.value);
    else pending.reject(this.options.rebuildError(reply.error));
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
    const error = this.closedFlag ? this.options.closedError(true) : this.options.lostError(slot.crash === null ? `exit code ${code}` : slot.crash.message);
    for (const pending of slot.inFlight.values()) pending.reject(error);
    slot.inFlight.clear();
  }
}

const cpuMs = (usage: NodeJS.CpuUsage) => (usage.user + usage.system) / 1000;

function startedCall(worker: Worker, atStart: NodeJS.CpuUsage): StartedCall {
  // Worker#cpuUsage came with Node 24.6, which the engines field asks for; a node run against
  // that (npm only warns) measures the clock's time since the start instead.
  if (typeof worker.cpuUsage !== 'function') {
    const since = performance.now();
    return { cpuTimeMs: async () => performance.now() - since };
  }
  return { cpuTimeMs: async () => cpuMs(await worker.cpuUsage()) - cpuMs(atStart) };
}

/**
 * The worker side: answers each request of the parent with `run`'s value (transferring the
 * buffers it names) or with its error as `serializeError` makes it. Calls run one at a time, in
 * arrival order, as far as `run` awaits nothing that lets the next one in.
 */
export function serveWorkerCalls<Call>(
  run: (call: Call) => Promise<{ value: unknown; transfer?: ArrayBuffer[] }>,
  serializeError: (error: unknown) => unknown,
): void {
  const port = parentPort;
  if (port === null) throw new Error('a worker pool entry runs as a worker thread only');
  port.on('message', (request: WorkerRequest<Call>) => {
    if (request.reportStart) port.postMessage({ id: request.id, started: true, cpu: process.threadCpuUsage() } satisfies WorkerReply);
    run(request.call).then(
      ({ value, transfer }) => port.postMessage({ id: request.id, ok: true, value } satisfies WorkerReply, transfer ?? []),
      (error: unknown) => port.postMessage({ id: request.id, ok: false, error: serializeError(error) } satisfies WorkerReply),
    );
  });
}
