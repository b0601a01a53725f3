import cliProgress from 'cli-progress';
import type { Knex } from 'knex';
import { type Database, migrateUnderLock } from '../db/database.js';
import type { RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore, Subscription } from '../eventstore/port.js';
import { lockProjectionKeys } from './lock.js';
import type { AppendedWrite, Projection, ProjectionStatus, ReadModelRunner } from './types.js';

/** The part of a pino logger the runner uses. */
export interface RunnerLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
}

export interface ProjectionRunnerOptions {
  /** Events per batch (and so per transaction); default 500. */
  batchSize?: number;
  /** First retry delay after a failure, doubled on each further failure; default 500 ms. */
  retryBaseMs?: number;
  /** Longest retry delay; default 30 s. */
  retryMaxMs?: number;
  /** Failures, recoveries and rebuilds are logged here; silent by default. */
  log?: RunnerLogger;
}

/** Creates `projection_checkpoints` if it is missing. */
export async function migrateProjectionCheckpoints(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'projection_checkpoints', async (trx) => {
    await trx.raw(`CREATE TABLE IF NOT EXISTS projection_checkpoints (
      name text PRIMARY KEY,
      position bigint NOT NULL DEFAULT 0,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`);
  });
}

/** waitFor gave up: the write is stored, but some read model has not applied it yet. */
export class ProjectionWaitTimeoutError extends Error {
  override readonly name = 'ProjectionWaitTimeoutError';
  constructor(
    readonly position: number,
    readonly timeoutMs: number,
    /** `name at position` of each projection still behind. */
    readonly behind: readonly string[],
  ) {
    super(`projections did not reach position ${position} within ${timeoutMs} ms: ${behind.join(', ')}`);
  }
}

/** Another runner moved this projection's checkpoint (e.g. a rebuild elsewhere): resume from the stored one. */
class CheckpointMovedError extends Error {
  override readonly name = 'CheckpointMovedError';
  constructor(
    readonly projection: string,
    readonly stored: number,
    readonly expected: number,
  ) {
    super(`checkpoint of ${projection} is ${stored}, this runner expected ${expected}`);
  }
}

interface Worker {
  readonly projection: Projection;
  readonly eventTypes: ReadonlySet<string>;
  /** Checkpoint as committed: the last global position whose effects are in the read model. */
  position: number;
  state: ProjectionStatus['state'];
  lastError: string | null;
  subscription: Subscription | null;
  retryTimer: NodeJS.Timeout | null;
  consecutiveFailures: number;
  /** Bumped whenever the subscription is replaced, so callbacks of an old one are ignored. */
  generation: number;
  /** Set while rebuild() waits for this projection. */
  rebuild: { target: number; onProgress?: (done: number, total: number) => void; resolve: () => void; reject: (error: Error) => void } | null;
}

interface PositionWaiter {
  position: number;
  resolve: () => void;
  timer: NodeJS.Timeout;
}

/**
 * Runs read-model projections: one catch-up subscription per projection, each batch applied in
 * one transaction on `db` together with the checkpoint, so every event takes effect exactly once.
 */
export class ProjectionRunner implements ReadModelRunner {
  private readonly workers = new Map<string, Worker>();
  private readonly batchSize: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly log: RunnerLogger | undefined;
  private started = false;
  private migrated: Promise<void> | null = null;
  private waiters: PositionWaiter[] = [];

  constructor(
    private readonly store: EventStore,
    private readonly db: Database,
    projections: readonly Projection[],
    options: ProjectionRunnerOptions = {},
  ) {
    for (const projection of projections) {
      if (this.workers.has(projection.name)) throw new Error(`two projections are named ${projection.name}`);
      this.workers.set(projection.name, {
        projection,
        eventTypes: new Set(projection.eventTypes),
        position: 0,
        state: 'stopped',
        lastError: null,
        subscription: null,
        retryTimer: null,
        consecutiveFailures: 0,
        generation: 0,
        rebuild: null,
      });
    }
    this.batchSize = options.batchSize ?? 500;
    this.retryBaseMs = options.retryBaseMs ?? 500;
    this.retryMaxMs = options.retryMaxMs ?? 30_000;
    this.log = options.log;
  }

  /** Starts every projection from its checkpoint; returns once all are subscribed (not caught up). */
  async start(): Promise<void> {
    if (this.started) return;
    await this.ensureCheckpoints();
    this.started = true;
    for (const worker of this.workers.values()) {
      if (worker.state !== 'rebuilding') await this.resume(worker);
    }
  }

  async stop(): Promise<void> {
    this.started = false;
    await Promise.all([...this.workers.values()].map((worker) => this.halt(worker, 'stopped')));
    this.settleWaiters();
  }

  async status(): Promise<ProjectionStatus[]> {
    if (!this.started) await this.loadPositions();
    const head = await this.store.headPosition();
    return [...this.workers.values()].map((worker) => ({
      name: worker.projection.name,
      position: worker.position,
      head,
      lag: Math.max(0, head - worker.position),
      state: worker.state,
      lastError: worker.lastError,
    }));
  }

  /**
   * Resolves once every running projection has applied `position` (read-your-writes after an
   * append); rejects with ProjectionWaitTimeoutError after `timeoutMs`. Failed, stopped and
   * rebuilding projections are not waited for: they would only turn a stored write into an error.
   */
  /** The embedded log is totally ordered: reaching the write's global position is enough. */
  settle(write: AppendedWrite, timeoutMs: number): Promise<void> {
    return this.waitFor(write.position, timeoutMs);
  }

  waitFor(position: number, timeoutMs: number): Promise<void> {
    if (this.reached(position)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const waiter: PositionWaiter = {
        position,
        resolve,
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((other) => other !== waiter);
          const behind = [...this.workers.values()]
            .filter((worker) => worker.state === 'running' && worker.position < position)
            .map((worker) => `${worker.projection.name} at ${worker.position}`);
          reject(new ProjectionWaitTimeoutError(position, timeoutMs, behind));
        }, timeoutMs),
      };
      this.waiters.push(waiter);
    });
  }

  /**
   * Empties the projection's tables and resets its checkpoint (one transaction), replays the log
   * from 0 to the current head, then resumes live if the runner is started (otherwise stops).
   * `onProgress(done, total)` counts in global positions.
   */
  async rebuild(name: string, onProgress?: (done: number, total: number) => void): Promise<void> {
    const worker = this.workers.get(name);
    if (!worker) throw new Error(`unknown projection ${name}; known: ${[...this.workers.keys()].join(', ')}`);
    if (worker.rebuild) throw new Error(`projection ${name} is already rebuilding`);
    await this.ensureCheckpoints();
    const previousState = worker.state;
    await this.halt(worker, 'rebuilding');
    this.settleWaiters(); // it no longer counts as running
    try {
      await this.db.knex.transaction(async (trx) => {
        await lockProjectionKeys(trx, [name]);
        if (worker.projection.tables.length > 0) {
          const identifiers = worker.projection.tables.map(() => '??').join(', ');
          await trx.raw(`TRUNCATE ${identifiers}`, [...worker.projection.tables]);
        }
        await trx('projection_checkpoints').where('name', name).update({ position: 0, updated_at: trx.fn.now() });
      });
    } catch (error) {
      worker.state = previousState === 'rebuilding' ? 'stopped' : previousState;
      if (this.started) await this.resume(worker);
      throw error;
    }
    worker.position = 0;
    worker.lastError = null;
    const total = await this.store.headPosition();
    this.log?.info({ projection: name, head: total }, 'projection rebuild started');
    onProgress?.(0, total);
    const done = new Promise<void>((resolve, reject) => {
      worker.rebuild = { target: total, onProgress, resolve, reject };
    });
    await this.resume(worker);
    this.progressRebuild(worker);
    try {
      await done;
    } finally {
      worker.rebuild = null;
    }
    this.log?.info({ projection: name, position: worker.position }, 'projection rebuilt');
    if (this.started) {
      worker.state = 'running';
      this.settleWaiters();
    } else {
      await this.halt(worker, 'stopped');
    }
  }

  private ensureCheckpoints(): Promise<void> {
    this.migrated ??= (async () => {
      await migrateProjectionCheckpoints(this.db.knex);
      const rows = [...this.workers.keys()].map((name) => ({ name, position: 0 }));
      if (rows.length > 0) await this.db.knex('projection_checkpoints').insert(rows).onConflict('name').ignore();
    })();
    // A failed migration may be retried by the next call.
    this.migrated.catch(() => (this.migrated = null));
    return this.migrated;
  }

  private async loadPositions(): Promise<void> {
    await this.ensureCheckpoints();
    const rows = (await this.db.knex('projection_checkpoints').select('name', 'position')) as Array<{
      name: string;
      position: string | number;
    }>;
    for (const row of rows) {
      const worker = this.workers.get(row.name);
      if (worker && worker.state === 'stopped') worker.position = Number(row.position);
    }
  }

  private async readCheckpoint(name: string): Promise<number> {
    const row = (await this.db.knex('projection_checkpoints').select('position').where('name', name).first()) as
      | { position: string | number }
      | undefined;
    return Number(row?.position ?? 0);
  }

  /** (Re)subscribes a projection from its stored checkpoint. */
  private async resume(worker: Worker): Promise<void> {
    worker.generation += 1;
    const generation = worker.generation;
    worker.position = await this.readCheckpoint(worker.projection.name);
    if (generation !== worker.generation) return; // halted or replaced meanwhile
    if (worker.state === 'stopped') worker.state = 'running';
    worker.subscription = this.store.subscribe({
      after: worker.position,
      batchSize: this.batchSize,
      handler: (batch) => this.applyBatch(worker, generation, batch),
      onError: (error) => this.onSubscriptionError(worker, generation, error),
    });
    this.settleWaiters();
  }

  /** Stops a projection's subscription (waiting for a running batch) and any pending retry. */
  private async halt(worker: Worker, state: ProjectionStatus['state']): Promise<void> {
    worker.generation += 1;
    if (worker.retryTimer) clearTimeout(worker.retryTimer);
    worker.retryTimer = null;
    const subscription = worker.subscription;
    worker.subscription = null;
    worker.state = state;
    if (subscription) await subscription.stop();
    if (worker.rebuild && state !== 'rebuilding') worker.rebuild.reject(new Error(`projection ${worker.projection.name} was stopped`));
  }

  private async applyBatch(worker: Worker, generation: number, batch: RecordedEvent[]): Promise<void> {
    const last = batch[batch.length - 1];
    if (!last || generation !== worker.generation) return;
    const { name } = worker.projection;
    await this.db.knex.transaction(async (trx) => {
      // The lock serialises runners of the same projection (e.g. a CLI rebuild beside a server).
      await lockProjectionKeys(trx, [name]);
      const row = (await trx('projection_checkpoints').select('position').where('name', name).first()) as
        | { position: string | number }
        | undefined;
      const stored = Number(row?.position ?? 0);
      if (stored !== worker.position) throw new CheckpointMovedError(name, stored, worker.position);
      for (const event of batch) {
        if (worker.eventTypes.has(event.type)) await worker.projection.apply(trx, event);
      }
      await trx('projection_checkpoints').where('name', name).update({ position: last.globalPosition, updated_at: trx.fn.now() });
    });
    worker.position = last.globalPosition;
    worker.consecutiveFailures = 0;
    if (worker.state === 'failed') {
      this.log?.info({ projection: name, position: worker.position }, 'projection recovered');
      worker.state = 'running';
      worker.lastError = null;
    }
    this.progressRebuild(worker);
    this.settleWaiters();
  }

  private onSubscriptionError(worker: Worker, generation: number, error: unknown): void {
    if (generation !== worker.generation) return;
    worker.subscription = null;
    if (error instanceof CheckpointMovedError) {
      void this.resume(worker).catch((resumeError: unknown) => this.onSubscriptionError(worker, worker.generation, resumeError));
      return;
    }
    worker.consecutiveFailures += 1;
    worker.lastError = error instanceof Error ? error.message : String(error);
    worker.state = 'failed';
    this.settleWaiters();
    if (worker.rebuild) {
      worker.rebuild.reject(new Error(`rebuild of ${worker.projection.name} failed: ${worker.lastError}`));
      if (!this.started) return; // a standalone rebuild (CLI) reports the error instead of retrying
    }
    const delay = Math.min(this.retryMaxMs, this.retryBaseMs * 2 ** (worker.consecutiveFailures - 1));
    this.log?.warn(
      { projection: worker.projection.name, position: worker.position, error: worker.lastError, retryInMs: delay },
      'projection failed; retrying',
    );
    worker.retryTimer = setTimeout(() => {
      worker.retryTimer = null;
      if (generation !== worker.generation) return;
      void this.resume(worker).catch((resumeError: unknown) => this.onSubscriptionError(worker, worker.generation, resumeError));
    }, delay);
  }

  private progressRebuild(worker: Worker): void {
    const rebuild = worker.rebuild;
    if (!rebuild) return;
    rebuild.onProgress?.(Math.min(worker.position, rebuild.target), rebuild.target);
    if (worker.position >= rebuild.target) rebuild.resolve();
  }

  private reached(position: number): boolean {
    for (const worker of this.workers.values()) {
      if (worker.state === 'running' && worker.position < position) return false;
    }
    return true;
  }

  private settleWaiters(): void {
    if (this.waiters.length === 0) return;
    const pending: PositionWaiter[] = [];
    for (const waiter of this.waiters) {
      if (this.reached(waiter.position)) {
        clearTimeout(waiter.timer);
        waiter.resolve();
      } else {
        pending.push(waiter);
      }
    }
    this.waiters = pending;
  }
}

/** `factlog projections rebuild <name>`: rebuilds with a progress bar on the terminal. */
export async function rebuildWithProgressBar(
  runner: Pick<ReadModelRunner, 'rebuild'>,
  name: string,
  stream: NodeJS.WritableStream = process.stderr,
): Promise<void> {
  const bar = new cliProgress.SingleBar(
    {
      format: `${name} [{bar}] {percentage}% | position {value}/{total} | {duration_formatted}`,
      stream,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  try {
    await runner.rebuild(name, (done, total) => {
      if (!started) {
        bar.start(Math.max(total, 1), 0);
        started = true;
      }
      bar.update(total === 0 ? 1 : done);
    });
  } finally {
    if (started) bar.stop();
  }
}
