import { performance } from 'node:perf_hooks';
import cliProgress from 'cli-progress';
import type { Knex } from 'knex';
import { type Database, migrateUnderLock } from '../db/database.js';
import { relationsExist } from '../db/migrations.js';
import { inProjections } from '../db/priority.js';
import type { RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore, Subscription } from '../eventstore/port.js';
import { lockProjectionKeys } from './lock.js';
import { applyEvents, type AppendedWrite, type Projection, type ProjectionStatus, type ReadModelRunner } from './types.js';
import { boundedErrorMessage } from '../util/errorMessage.js';

/** The part of a pino logger the runner uses. */
export interface RunnerLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
}

export interface ProjectionRunnerOptions {
  /** Events per batch (and so per transaction); default 500. */
  batchSize?: number;
  /**
   * Events per batch of a lane opened for a rebuild; default 1,500. A rebuild's batched runs
   * (`batchTogether`) end at batch boundaries too: 1,500 took 0.054 statements an event where
   * 500 took 0.060, and 10–15% less time on both stores (docs/performance.md, "Thirty-sixth
   * round"); 3,000 no less. Live batches stay smaller: they are read while requests wait.
   */
  rebuildBatchSize?: number;
  /**
   * On a PostgreSQL server, a full batch (catching up) is applied in up to this many
   * transactions side by side on the pool (see applySideBySideOnPool); default 3, which did
   * best on two cores (2 and 4 were 5–10% slower). 1 applies every batch in one transaction.
   * Live batches always go in one: for a few events the extra transactions cost more than they save.
   */
  catchUpTransactions?: number;
  /** First retry delay after a failure, doubled on each further failure; default 500 ms. */
  retryBaseMs?: number;
  /** Longest retry delay; default 30 s. */
  retryMaxMs?: number;
  /** Failures, recoveries and rebuilds are logged here; silent by default. */
  log?: RunnerLogger;
  /**
   * Live batches start at most this often (ms from one batch's start to the next); default 20.
   * The subscription wakes on every append, so without it a busy pipeline made a batch, with
   * its fixed statements (BEGIN, lock, checkpoints, COMMIT), for nearly every append. The pause
   * ends at once when someone waits for a position (waitFor/settle: read-your-writes after a
   * command), and a full batch (catching up) never pauses. 0 turns it off.
   */
  minBatchIntervalMs?: number;
  /**
   * The clock the runner times its work by, in ms (what applying an event costs, so how many
   * events go in a part; the pause between live batches); default performance.now. Tests give
   * one that counts their simulated work, so the parts they check do not follow the machine's load.
   */
  now?: () => number;
}

/**
 * Creates `projection_checkpoints` if it is missing. `rebuild_target` is the end of a rebuild under
 * way (the log's head when it began), NULL otherwise: written by the transaction that empties the
 * projection's tables, cleared by the one that moves its checkpoint to it, so a start finds a
 * rebuild that a stop or a crash ended early and goes on with it as a rebuild (read-model
 * migration 033 adds the column to a table made before it).
 */
export async function migrateProjectionCheckpoints(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'projection_checkpoints', async (trx) => {
    await trx.raw(`CREATE TABLE IF NOT EXISTS projection_checkpoints (
      name text PRIMARY KEY,
      position bigint NOT NULL DEFAULT 0,
      updated_at timestamptz NOT NULL DEFAULT now(),
      rebuild_target bigint
    )`);
  });
}

/**
 * A rebuild refused because one of the projection is under way (on this node, or on another node
 * of the distributed tier whose rebuild has not stopped): the refusal comes before anything is
 * emptied, and the rebuild under way goes on.
 */
export class ProjectionRebuildConflictError extends Error {
  override readonly name = 'ProjectionRebuildConflictError';
}

/**
 * A rebuild ended by the runner's stop (the service shutting down, a Ctrl-C of the offline
 * rebuild) before its end: no failure, its rows and checkpoint agree. `goesOn` says what becomes
 * of it: on the embedded tier the projection goes on from that checkpoint when it runs again; on
 * the distributed tier a running node takes the rebuild over.
 */
export class ProjectionRebuildStoppedError extends Error {
  override readonly name = 'ProjectionRebuildStoppedError';
  constructor(
    readonly projection: string,
    readonly goesOn = 'the projection goes on from its checkpoint at the next start',
  ) {
    super(`projection ${projection} was stopped`);
  }
}

/** waitFor gave up: the write is stored, but some read model has not applied it yet. */
export class ProjectionWaitTimeoutError extends Error {
  override readonly name = 'ProjectionWaitTimeoutError';
  constructor(
    readonly position: number,
    readonly timeoutMs: number,
    /** `name at position` of each projection still behind. */
    readonly behind: readonly string[],
    /** The projections concerned by the write that had not applied it (settle): what a lock's next holder waits for (src/app/lockMarks.ts). */
    readonly unapplied: readonly string[] = [],
  ) {
    super(`projections did not reach position ${position} within ${timeoutMs} ms: ${behind.join(', ')}`);
  }
}

interface Worker {
  readonly projection: Projection;
  readonly eventTypes: ReadonlySet<string>;
  /** Checkpoint as committed: the last global position whose effects are in the read model. */
  position: number;
  state: ProjectionStatus['state'];
  lastError: string | null;
  /** The reader feeding this projection; null while it is halted or waits for a retry. */
  lane: Lane | null;
  retryTimer: NodeJS.Timeout | null;
  consecutiveFailures: number;
  /** Bumped whenever the projection is halted or resumed, so a batch begun before is not credited to it. */
  generation: number;
  /** What applying one of its events has cost lately, in ms (see followedCost); null until known. */
  msPerEvent: number | null;
  /**
   * The end of a rebuild as its checkpoint row holds it (`rebuild_target`), until a batch moves the
   * checkpoint to it: those batches clear it in the statement that moves the checkpoint. Null
   * while no rebuild is under way, so a running projection's batches write what they did before.
   */
  storedRebuildTarget: number | null;
  /** Set while rebuild() waits for this projection. */
  rebuild: { target: number; onProgress?: (done: number, total: number) => void; resolve: () => void; reject: (error: Error) => void } | null;
}

/**
 * One catch-up subscription that reads the log once for every projection it feeds. Normally a
 * runner has one lane; a projection that falls behind (a rebuild, a retry after a failure) gets a
 * lane of its own, which hands its projections over to another lane once it has read as far.
 */
interface Lane {
  subscription: Subscription | null;
  readonly workers: Set<Worker>;
  /** Last position of the batches read so far (delivered to the handler, applied or not). */
  readThrough: number;
  /** The batch being applied, awaited by halt() so no write of a halted projection lands after it. */
  inFlight: Promise<void>;
  closed: boolean;
  /** Ends the lane's pause between live batches early (see minBatchIntervalMs); null when not pausing. */
  endPause: (() => void) | null;
  /** Events per batch it reads: the rebuild's size when opened for a rebuild. */
  readonly batchSize: number;
}

/** A reader waiting for the read models (settleWaiters checks `done` after every batch). */
interface Waiter {
  done: () => boolean;
  resolve: () => void;
  timer: NodeJS.Timeout;
}

/** A checkpoint update's new `rebuild_target`, given the checkpoint's new position: cleared once the rebuild reaches its end. */
const CLEARED_AT_TARGET = 'CASE WHEN rebuild_target <= ? THEN NULL ELSE rebuild_target END';

/** About how long a part of one projection's events may hold PGlite's connection while requests come (see applyShared). */
const PART_BUDGET_MS = 25;
/**
 * The same on a quiet node: no request for QUIET_AFTER_MS. Each cut between parts costs
 * statements and rows written twice (a concept inserted in one part, updated for its embedding
 * in the next): with 25 ms parts a catch-up sent half again as many statements and took 15–30%
 * longer (docs/performance.md, "Catch-up, fifth round"). A request that comes to a quiet node
 * waits for at most about one such part.
 */
const QUIET_PART_BUDGET_MS = 100;
const QUIET_AFTER_MS = 1_000;
/** The fewest events a run must have to tell a cost per event (see followedCost). */
const COST_SAMPLE_MIN_EVENTS = 20;

/** Where a shared batch was cut for a waiting request: these projections committed through `through`. */
interface Cut {
  readonly workers: readonly Worker[];
  readonly through: number;
}

/** External projections first (see Projection.external), those that start work last (Projection.startsWork). */
const rankOf = (worker: Worker) => (worker.projection.external === true ? 0 : worker.projection.startsWork === true ? 2 : 1);

/** What one projection's part of a shared batch came to. */
type BatchOutcome = { kind: 'applied' } | { kind: 'moved'; stored: number } | { kind: 'failed'; error: unknown };

/**
 * Runs read-model projections. One subscription reads the log and feeds every projection: each
 * batch is applied in one transaction on `db` together with every fed projection's checkpoint,
 * so every event takes effect exactly once. When that transaction fails, the batch is applied
 * again one projection per transaction, so only the failing projection stops (and retries).
 */
export class ProjectionRunner implements ReadModelRunner {
  private readonly workers = new Map<string, Worker>();
  private readonly lanes = new Set<Lane>();
  private readonly batchSize: number;
  private readonly rebuildBatchSize: number;
  private readonly catchUpTransactions: number;
  private readonly retryBaseMs: number;
  private readonly retryMaxMs: number;
  private readonly minBatchIntervalMs: number;
  private readonly now: () => number;
  private readonly log: RunnerLogger | undefined;
  private started = false;
  private migrated: Promise<void> | null = null;
  private waiters: Waiter[] = [];
  /** Rebuilds emptying their tables now, and those done with it that wait for them to start replaying (see rebuildFromStart). */
  private emptying = 0;
  private waitingToReplay: Array<() => void> = [];
  /** Projections whose rebuild has begun and not ended. */
  private readonly rebuildsUnderway = new Set<string>();
  /** What applying one batch event has cost the projections side by side lately, in ms (see applySideBySideInParts). */
  private groupMsPerEvent: number | null = null;

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
        lane: null,
        retryTimer: null,
        consecutiveFailures: 0,
        generation: 0,
        msPerEvent: null,
        storedRebuildTarget: null,
        rebuild: null,
      });
    }
    this.batchSize = options.batchSize ?? 500;
    this.rebuildBatchSize = options.rebuildBatchSize ?? Math.max(this.batchSize, 1500);
    this.catchUpTransactions = options.catchUpTransactions ?? 3;
    if (!Number.isInteger(this.catchUpTransactions) || this.catchUpTransactions < 1) throw new RangeError('catchUpTransactions must be an integer >= 1');
    this.retryBaseMs = options.retryBaseMs ?? 500;
    this.retryMaxMs = options.retryMaxMs ?? 30_000;
    this.minBatchIntervalMs = options.minBatchIntervalMs ?? 20;
    if (!Number.isFinite(this.minBatchIntervalMs) || this.minBatchIntervalMs < 0) throw new RangeError('minBatchIntervalMs must be a number >= 0');
    this.now = options.now ?? (() => performance.now());
    this.log = options.log;
  }

  /** Starts every projection from its checkpoint; returns once all are subscribed (not caught up). */
  async start(): Promise<void> {
    if (this.started) return;
    await this.ensureCheckpoints();
    this.started = true;
    const checkpoints = await this.readCheckpointRows();
    const starting = [...this.workers.values()].filter((worker) => worker.state !== 'rebuilding' && worker.lane === null);
    for (const worker of starting) {
      worker.generation += 1;
      const checkpoint = checkpoints.get(worker.projection.name);
      worker.position = checkpoint?.position ?? 0;
      worker.storedRebuildTarget = checkpoint?.rebuildTarget ?? null;
      if (worker.storedRebuildTarget !== null && worker.position < worker.storedRebuildTarget) {
        // A rebuild stopped before its end (a shutdown, a crash, a Ctrl-C of the offline
        // rebuild): its tables hold only what it replayed, so it goes on as a rebuild.
        worker.state = 'rebuilding';
        this.log?.info({ projection: worker.projection.name, position: worker.position, head: worker.storedRebuildTarget }, 'projection rebuild resumed');
      } else if (worker.state === 'stopped') worker.state = 'running';
    }
    // Lowest checkpoint first, so projections at about the same position share a lane.
    for (const worker of starting.sort((a, b) => a.position - b.position)) this.place(worker);
    this.settleWaiters();
  }

  async stop(): Promise<void> {
    this.started = false;
    await Promise.all([...this.workers.values()].map((worker) => this.halt(worker, 'stopped')));
    this.settleWaiters();
  }

  /** One rebuild is done emptying its tables; when none is left, those waiting start replaying, all at once (see rebuildFromStart). */
  private doneEmptying(): void {
    this.emptying -= 1;
    if (this.emptying > 0) return;
    const waiting = this.waitingToReplay;
    this.waitingToReplay = [];
    for (const replay of waiting) replay();
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
      lastError: worker.lastError ?? this.interruptedRebuild(worker),
    }));
  }

  /** The embedded log is totally ordered: reaching the write's global position is enough. */
  async settle(write: AppendedWrite, timeoutMs: number): Promise<readonly string[]> {
    if (!(await this.waitUntil(() => this.reached(write.position), timeoutMs))) throw this.waitTimedOut(write.position, timeoutMs, this.unapplied(write));
    return this.unapplied(write);
  }

  /** The projections that handle the write's events and have not applied it (stopped, failed or rebuilding ones are not waited for). */
  private unapplied(write: AppendedWrite): string[] {
    return [...this.workers.values()]
      .filter((worker) => worker.position < write.position && write.types.some((type) => worker.eventTypes.has(type)))
      .map((worker) => worker.projection.name);
  }

  async caughtUp(position: number, timeoutMs: number): Promise<boolean> {
    if (!(await this.waitUntil(() => this.reached(position), timeoutMs))) return false;
    // A rebuild empties its tables first: until it has replayed the log, what was written is not all readable.
    return ![...this.workers.values()].some((worker) => worker.state === 'rebuilding');
  }

  /** The log is applied in order: reaching `position` is having applied every write through it, whatever its stream. */
  projectionReached(name: string, position: number, timeoutMs: number): Promise<boolean> {
    const worker = this.workers.get(name);
    if (!worker) throw new Error(`unknown projection ${name}`);
    // A rebuild's position starts again at 0, so position alone says it; a stopped or failed one is waited for all the same.
    return this.waitUntil(() => worker.state !== 'rebuilding' && worker.position >= position, timeoutMs);
  }

  /**
   * Resolves once every running projection has applied `position` (read-your-writes after an
   * append); rejects with ProjectionWaitTimeoutError after `timeoutMs`. Failed, stopped and
   * rebuilding projections are not waited for: they would only turn a stored write into an error.
   */
  async waitFor(position: number, timeoutMs: number): Promise<void> {
    if (!(await this.waitUntil(() => this.reached(position), timeoutMs))) throw this.waitTimedOut(position, timeoutMs);
  }

  /** The error of a wait for `position` that ran out: the running projections still behind it, and for settle those that had not applied the write. */
  private waitTimedOut(position: number, timeoutMs: number, unapplied: readonly string[] = []): ProjectionWaitTimeoutError {
    const behind = [...this.workers.values()]
      .filter((worker) => worker.state === 'running' && worker.position < position)
      .map((worker) => `${worker.projection.name} at ${worker.position}`);
    return new ProjectionWaitTimeoutError(position, timeoutMs, behind, unapplied);
  }

  /** True once `done()` holds, false after `timeoutMs`. */
  private waitUntil(done: () => boolean, timeoutMs: number): Promise<boolean> {
    if (done()) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const waiter: Waiter = {
        done,
        resolve: () => resolve(true),
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((other) => other !== waiter);
          resolve(false);
        }, timeoutMs),
      };
      this.waiters.push(waiter);
      // Someone reads their write: the next batch should not wait for the pause to run out.
      for (const lane of this.lanes) lane.endPause?.();
    });
  }

  /**
   * Empties the projection's tables and resets its checkpoint (one transaction), replays the log
   * from 0 to the current head, then resumes live if the runner is started (otherwise stops).
   * `onProgress(done, total)` counts in global positions. Rebuilds started together share one
   * reading of the log.
   */
  rebuild(name: string, onProgress?: (done: number, total: number) => void): Promise<void> {
    // Its statements (the truncate, the checkpoint reset) are projection work, not a request's:
    // a request goes before them, and they do not make the node look busy (partBudgetMs).
    return inProjections(() => this.rebuildFromStart(name, onProgress));
  }

  private async rebuildFromStart(name: string, onProgress?: (done: number, total: number) => void): Promise<void> {
    const worker = this.workers.get(name);
    if (!worker) throw new Error(`unknown projection ${name}; known: ${[...this.workers.keys()].join(', ')}`);
    // Claimed before the first await: `worker.rebuild` is set only after the tables are emptied,
    // and a second call meanwhile took the rebuild over and left the first waiting for ever.
    if (this.rebuildsUnderway.has(name)) throw new ProjectionRebuildConflictError(`projection ${name} is already rebuilding`);
    this.rebuildsUnderway.add(name);
    try {
      await this.replayFromStart(worker, onProgress);
    } finally {
      this.rebuildsUnderway.delete(name);
    }
  }

  private async replayFromStart(worker: Worker, onProgress?: (done: number, total: number) => void): Promise<void> {
    const { name } = worker.projection;
    // Counted from the first step: rebuilds called together are all counted before any empties its tables.
    this.emptying += 1;
    const previousState = worker.state;
    let total: number;
    try {
      await this.ensureCheckpoints();
      await this.halt(worker, 'rebuilding');
      this.settleWaiters(); // it no longer counts as running
      // Read before the transaction: on PGlite the store's read would wait for its connection.
      total = await this.store.headPosition();
      // Kept with the checkpoint until the replay reaches it (none for an empty log: nothing to replay).
      const target = total > 0 ? total : null;
      await this.db.knex.transaction(async (trx) => {
        await lockProjectionKeys(trx, [name]);
        if (worker.projection.tables.length > 0) {
          const identifiers = worker.projection.tables.map(() => '??').join(', ');
          await trx.raw(`TRUNCATE ${identifiers}`, [...worker.projection.tables]);
        }
        await trx('projection_checkpoints').where('name', name).update({ position: 0, rebuild_target: target, updated_at: trx.fn.now() });
      });
      // Its tables are empty: the status says so (lag = the whole log) until the replay moves it on.
      worker.position = 0;
      worker.storedRebuildTarget = target;
    } catch (error) {
      worker.state = previousState === 'rebuilding' ? 'stopped' : previousState;
      this.doneEmptying();
      if (this.started) await this.resume(worker);
      throw error;
    }
    worker.lastError = null;
    this.log?.info({ projection: name, head: total }, 'projection rebuild started');
    onProgress?.(0, total);
    const done = new Promise<void>((resolve, reject) => {
      worker.rebuild = { target: total, onProgress, resolve, reject };
    });
    // Rebuilds started together replay in one lane, reading the log once, only if they join it
    // before it has read its first batch: a lane that has read past a projection's position
    // cannot take it in, and each late one read the log again alone until the lanes met (on a
    // server, three readings for the first batches of a rebuild of every read model). So the
    // last of them done emptying its tables places them all at once.
    const generation = worker.generation;
    this.waitingToReplay.push(() => {
      if (worker.generation !== generation) return; // stopped meanwhile: its rebuild was rejected
      worker.generation += 1;
      this.placeAt(worker, 0);
      this.progressRebuild(worker);
    });
    this.doneEmptying();
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

  /** Each projection's checkpoint and the end of a rebuild under way, if one is (see migrateProjectionCheckpoints). */
  private async readCheckpointRows(
    names: readonly string[] = [...this.workers.keys()],
    runner: Knex = this.db.knex,
  ): Promise<Map<string, { position: number; rebuildTarget: number | null }>> {
    const rows = (await runner('projection_checkpoints').select('name', 'position', 'rebuild_target').whereIn('name', [...names])) as Array<{
      name: string;
      position: string | number;
      rebuild_target: string | number | null;
    }>;
    return new Map(rows.map((row) => [row.name, { position: Number(row.position), rebuildTarget: row.rebuild_target === null ? null : Number(row.rebuild_target) }]));
  }

  /** Each projection's checkpoint (readCheckpointRows without the rebuilds' ends). */
  private async readCheckpoints(names: readonly string[] = [...this.workers.keys()], runner: Knex = this.db.knex): Promise<Map<string, number>> {
    const rows = await this.readCheckpointRows(names, runner);
    return new Map([...rows].map(([name, row]) => [name, row.position]));
  }

  /**
   * The stored checkpoints of a runner that is not running (`projections list`): read only. A
   * reader makes no table and no row (a read-only role, a replica, or a database no projection
   * has run on yet: every projection at 0); start() and rebuild() create them.
   */
  private async loadPositions(): Promise<void> {
    if (!(await relationsExist(this.db.knex, 'projection_checkpoints'))) return;
    for (const [name, checkpoint] of await this.readCheckpointRows()) {
      const worker = this.workers.get(name);
      if (worker && worker.state === 'stopped') {
        worker.position = checkpoint.position;
        worker.storedRebuildTarget = checkpoint.rebuildTarget;
      }
    }
  }

  /**
   * What a stopped projection's status says of a rebuild it left half-way (a shutdown, a crash, a
   * Ctrl-C of the offline rebuild): its tables hold only part of the log until a start goes on
   * with it. Without this, `projections list` with no service showed such a projection as plainly
   * `stopped`, as one whose read model is whole.
   */
  private interruptedRebuild(worker: Worker): string | null {
    const target = worker.storedRebuildTarget;
    if (worker.state !== 'stopped' || target === null || worker.position >= target) return null;
    return `its rebuild stopped at position ${worker.position} of ${target}, so its read model holds only part of the log; the next start (factlog serve) or \`factlog projections rebuild ${worker.projection.name}\` completes it`;
  }

  /** Feeds a projection again from its stored checkpoint (after a rebuild reset, a failure or a moved checkpoint). */
  private async resume(worker: Worker): Promise<void> {
    worker.generation += 1;
    const generation = worker.generation;
    let position: number;
    try {
      position = (await this.readCheckpoints([worker.projection.name])).get(worker.projection.name) ?? 0;
    } catch (error) {
      // Halted meanwhile (stop() does not wait for a resume): its failure is dropped as its
      // success would be. Reported, it armed a retry on the stopped runner, which failed again
      // once the database was closed and retried for ever, keeping the process alive.
      if (generation !== worker.generation) return;
      throw error;
    }
    if (generation !== worker.generation) return; // halted or replaced meanwhile
    this.placeAt(worker, position);
  }

  /** Feeds a halted projection again from `position`, its checkpoint. */
  private placeAt(worker: Worker, position: number): void {
    worker.position = position;
    if (worker.state === 'stopped') worker.state = 'running';
    this.place(worker);
    this.settleWaiters();
  }

  /**
   * Feeds a projection from its position: a lane that has read no further than that position,
   * and at most a batch less, takes it (skipping what it applied already); one that has read
   * further would skip events it needs, and one far behind would hold it back: a new lane then.
   */
  private place(worker: Worker): void {
    let best: Lane | null = null;
    for (const lane of this.lanes) {
      if (!lane.closed && lane.readThrough <= worker.position && (!best || lane.readThrough > best.readThrough)) best = lane;
    }
    if (best && worker.position - best.readThrough <= this.batchSize) this.joinLane(best, worker);
    else this.openLane(worker);
  }

  private openLane(worker: Worker): void {
    const after = worker.position;
    const batchSize = worker.rebuild || worker.storedRebuildTarget !== null ? this.rebuildBatchSize : this.batchSize;
    const lane: Lane = { subscription: null, workers: new Set(), readThrough: after, inFlight: Promise.resolve(), closed: false, endPause: null, batchSize };
    this.lanes.add(lane);
    this.joinLane(lane, worker);
    // The subscription's reads and the batches it delivers queue after requests (src/db/priority.ts).
    lane.subscription = inProjections(() => this.store.subscribe({
      after,
      batchSize,
      handler: async (batch) => {
        const started = this.now();
        lane.inFlight = this.applyBatch(lane, batch);
        await lane.inFlight;
        // The subscription reads again when the handler returns: a short pause lets the appends
        // of the meantime gather into one batch. Not part of inFlight: no write happens in it.
        if (batch.length < batchSize) await this.pause(lane, started + this.minBatchIntervalMs - this.now());
      },
      onError: (error) => this.onLaneError(lane, error),
    }));
  }

  /** Waits `ms` unless the lane closes or someone waits for a position meanwhile. */
  private pause(lane: Lane, ms: number): Promise<void> {
    if (ms <= 0 || lane.closed || this.waiters.length > 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const end = () => {
        clearTimeout(timer);
        lane.endPause = null;
        resolve();
      };
      const timer = setTimeout(end, ms);
      lane.endPause = end;
    });
  }

  private joinLane(lane: Lane, worker: Worker): void {
    worker.lane?.workers.delete(worker);
    worker.lane = lane;
    lane.workers.add(worker);
  }

  private leaveLane(worker: Worker): void {
    const lane = worker.lane;
    if (!lane) return;
    worker.lane = null;
    lane.workers.delete(worker);
    if (lane.workers.size === 0) this.closeLane(lane);
  }

  /** Stops a lane's subscription; not awaited, since a lane may close itself from its own handler. */
  private closeLane(lane: Lane): void {
    if (lane.closed) return;
    lane.closed = true;
    this.lanes.delete(lane);
    lane.endPause?.();
    void lane.subscription?.stop();
  }

  /** Stops feeding a projection (waiting for a batch that includes it) and cancels a pending retry. */
  private async halt(worker: Worker, state: ProjectionStatus['state']): Promise<void> {
    worker.generation += 1;
    if (worker.retryTimer) clearTimeout(worker.retryTimer);
    worker.retryTimer = null;
    const lane = worker.lane;
    this.leaveLane(worker);
    worker.state = state;
    if (lane) {
      await lane.inFlight.catch(() => undefined);
      if (lane.closed) await lane.subscription?.stop();
    }
    if (worker.rebuild && state !== 'rebuilding') worker.rebuild.reject(new ProjectionRebuildStoppedError(worker.projection.name));
  }

  private async applyBatch(lane: Lane, batch: RecordedEvent[]): Promise<void> {
    const last = batch[batch.length - 1];
    if (!last || lane.closed) return;
    lane.readThrough = last.globalPosition;
    // Projections that applied this batch already (they joined ahead of the lane) only wait.
    const fed = [...lane.workers].filter((worker) => worker.position < last.globalPosition);
    // External projections first (see Projection.external), those that start work last (Projection.startsWork).
    fed.sort((a, b) => rankOf(a) - rankOf(b));
    const generations = new Map(fed.map((worker) => [worker, worker.generation]));
    // A full batch: the lane is catching up (a rebuild, a start from behind), not following the head.
    const catchingUp = batch.length >= lane.batchSize;
    const outcomes = fed.length > 0 ? await this.applyShared(fed, batch, last.globalPosition, catchingUp) : new Map<Worker, BatchOutcome>();
    for (const [worker, outcome] of outcomes) {
      if (generations.get(worker) !== worker.generation) continue; // halted or rebuilt meanwhile
      if (outcome.kind === 'applied') this.applied(worker, last.globalPosition);
      else if (outcome.kind === 'moved') {
        this.leaveLane(worker);
        void this.resume(worker).catch((error: unknown) => this.failed(worker, error));
      } else {
        this.leaveLane(worker);
        this.failed(worker, outcome.error);
      }
    }
    this.mergeLanes(lane);
    this.settleWaiters();
  }

  /**
   * On PGlite a transaction has the one connection to itself (knex hands it to one caller at a
   * time, and the data-directory lock keeps other processes out), so no other runner can move a
   * checkpoint while a batch is applied: the advisory lock and the checkpoint read before the
   * batch are two statements per batch for nothing. The batch is applied at once and the
   * checkpoints are advanced only where they still hold the positions this runner knows; if
   * one moved (a rebuild reset it between batches) the transaction rolls back and the careful
   * path below finds out which. Not with an external projection, whose writes leave the
   * database before the check and would not roll back.
   */
  private canApplyOptimistically(fed: readonly Worker[]): boolean {
    return this.db.kind === 'pglite' && fed.every((worker) => worker.projection.external !== true);
  }

  /**
   * The batch for every fed projection in one transaction; on failure, one transaction each.
   *
   * On PGlite a transaction holds the one connection until it ends, and a batch of a busy
   * pipeline holds it for hundreds of milliseconds, while a request waits. So when a request
   * waits (`Database.requestsWaiting`) after a projection has applied its part, the transaction
   * commits what it has (those projections' writes and checkpoints: each still exactly once)
   * and the rest of the batch follows in a new one, which queues behind the request.
   * Projections that start work commit last (Projection.startsWork).
   *
   * One projection's part can be long too: a summary pass appends a slice event for every
   * concept, and the `summaries` projection took 200–360 ms over 400 of them
   * (docs/performance.md, "Eleventh round"). So a projection's events go in parts of about
   * PART_BUDGET_MS each, by what its events have cost so far (`partSize`), and when a request
   * waits after a part, the transaction commits with that projection's checkpoint at the part's
   * last event: as if the subscription had delivered a smaller batch.
   *
   * On a quiet node the projections that do not start work apply side by side instead, in
   * slices of the batch (applySideBySideInParts), and the intake follows them.
   *
   * On a server, a full batch goes in several transactions side by side on the pool instead
   * (applySideBySideOnPool): requests have connections of their own there.
   */
  private async applyShared(fed: readonly Worker[], batch: readonly RecordedEvent[], last: number, catchingUp: boolean): Promise<Map<Worker, BatchOutcome>> {
    const outcomes = new Map<Worker, BatchOutcome>();
    let pending = fed;
    if (fed.length > 1 && this.canApplyOptimistically(fed)) {
      try {
        while (pending.length > 0) {
          const generations = new Map(pending.map((worker) => [worker, worker.generation]));
          const { whole, partial } = await this.db.knex.transaction(async (trx) => {
            const applied: Worker[] = [];
            let cut: Cut | null = null;
            // On a quiet node the read models go side by side (see applySideBySideInParts); the intake after them.
            const sideBySide = this.isQuiet() ? pending.filter((worker) => worker.projection.startsWork !== true) : [];
            if (sideBySide.length > 1) {
              cut = await this.applySideBySideInParts(trx, sideBySide, batch);
              if (cut === null) applied.push(...sideBySide);
            }
            // The rest one after the other: the intake, or every projection while requests come.
            const oneByOne = cut === null ? pending.filter((worker) => !applied.includes(worker)) : [];
            for (const worker of oneByOne) {
              if (applied.length > 0 && this.db.requestsWaiting?.() === true) break;
              const through = await this.applyInParts(trx, worker, this.eventsFor(worker, batch));
              if (through !== null) {
                cut = { workers: [worker], through };
                break;
              }
              applied.push(worker);
            }
            if (applied.length > 0) await this.advanceCheckpoints(trx, applied, last);
            if (cut !== null) await this.advanceCheckpoints(trx, cut.workers, cut.through);
            return { whole: applied, partial: cut };
          });
          for (const worker of whole) outcomes.set(worker, { kind: 'applied' });
          pending = pending.filter((worker) => !whole.includes(worker));
          // Committed up to the cut; the rest of their events go in the next transaction.
          if (partial !== null) {
            for (const worker of partial.workers) if (generations.get(worker) === worker.generation) this.applied(worker, partial.through);
          }
        }
        return outcomes;
      } catch {
        // A checkpoint moved or a projection failed: find out which of the rest, each in its own transaction.
      }
    } else if (fed.length > 1) {
      // PGlite's one connection would only run the transactions one after the other.
      if (catchingUp && this.catchUpTransactions > 1 && this.db.kind !== 'pglite') return this.applySideBySideOnPool(fed, batch, last);
      try {
        for (const [worker, outcome] of await this.applyTogether(fed, batch, last)) outcomes.set(worker, outcome);
        return outcomes;
      } catch {
        // Some projection failed: find which, each in its own transaction.
      }
    }
    for (const worker of pending) outcomes.set(worker, await this.applyAlone(worker, batch, last));
    return outcomes;
  }

  /**
   * A server's catch-up batch in up to `catchUpTransactions` transactions side by side on the
   * pool, the projections split between them by what their events in the batch are expected to
   * cost (splitByCost). In one transaction every statement of every projection went one after
   * the other on one connection, the process and one backend taking turns: about half of two
   * cores busy. Side by side the backends run at once; a rebuild of every read model went
   * 40–50% faster (docs/performance.md, "Thirty-seventh round"). Each group commits with its
   * own checkpoints, so every event still takes effect once per projection; a group that fails
   * is applied again one projection per transaction, as a failed shared batch is. Projections
   * that start work go after every other group has committed (Projection.startsWork).
   */
  private async applySideBySideOnPool(fed: readonly Worker[], batch: readonly RecordedEvent[], last: number): Promise<Map<Worker, BatchOutcome>> {
    const outcomes = new Map<Worker, BatchOutcome>();
    const phases = [fed.filter((worker) => worker.projection.startsWork !== true), fed.filter((worker) => worker.projection.startsWork === true)];
    for (const phase of phases.filter((workers) => workers.length > 0)) {
      const groups = this.splitByCost(phase, batch);
      const applied = await Promise.all(groups.map((group) => this.applyTogether(group, batch, last).catch(() => null)));
      for (const [index, groupOutcomes] of applied.entries()) {
        if (groupOutcomes === null) {
          for (const worker of groups[index]) outcomes.set(worker, await this.applyAlone(worker, batch, last));
        } else for (const [worker, outcome] of groupOutcomes) outcomes.set(worker, outcome);
      }
    }
    return outcomes;
  }

  /**
   * `workers` in at most `catchUpTransactions` groups of about equal cost: the costliest first,
   * each to the group with the least so far. A projection's cost is its events in the batch
   * times its measured cost per event; until that is known, the mean of those known (or 1).
   */
  private splitByCost(workers: readonly Worker[], batch: readonly RecordedEvent[]): Worker[][] {
    const known = workers.map((worker) => worker.msPerEvent).filter((cost): cost is number => cost !== null);
    const fallback = known.length > 0 ? known.reduce((sum, cost) => sum + cost, 0) / known.length : 1;
    const costed = workers
      .map((worker) => ({ worker, cost: this.eventsFor(worker, batch).length * (worker.msPerEvent ?? fallback) }))
      .sort((a, b) => b.cost - a.cost);
    const groups = Array.from({ length: Math.min(this.catchUpTransactions, workers.length) }, () => ({ cost: 0, workers: [] as Worker[] }));
    for (const { worker, cost } of costed) {
      const lightest = groups.reduce((best, group) => (group.cost < best.cost ? group : best));
      lightest.cost += cost;
      lightest.workers.push(worker);
    }
    // Projections with nothing to apply cost nothing and all go to the first group: the rest may be empty.
    return groups.filter((group) => group.workers.length > 0).map((group) => group.workers.sort((a, b) => rankOf(a) - rankOf(b)));
  }

  /**
   * `fed`'s part of the batch in one transaction on a server: the projections' locks, then
   * their checkpoints checked, their events applied one projection after the other and the
   * checkpoints moved. A projection whose checkpoint moved meanwhile is left out ('moved').
   * Throws when one fails: the transaction rolls back.
   */
  private async applyTogether(fed: readonly Worker[], batch: readonly RecordedEvent[], last: number): Promise<Map<Worker, BatchOutcome>> {
    const outcomes = new Map<Worker, BatchOutcome>();
    await this.db.knex.transaction(async (trx) => {
      const names = fed.map((worker) => worker.projection.name);
      // The lock serialises runners of the same projection (e.g. a CLI rebuild beside a server).
      await lockProjectionKeys(trx, names);
      const stored = await this.readCheckpoints(names, trx);
      const applying: Worker[] = [];
      for (const worker of fed) {
        const position = stored.get(worker.projection.name) ?? 0;
        if (position === worker.position) applying.push(worker);
        else outcomes.set(worker, { kind: 'moved', stored: position });
      }
      for (const worker of applying) {
        const events = this.eventsFor(worker, batch);
        const began = this.now();
        await applyEvents(worker.projection, trx, events);
        worker.msPerEvent = followedCost(worker.msPerEvent, events.length, this.now() - began);
      }
      await trx('projection_checkpoints')
        .whereIn('name', applying.map((worker) => worker.projection.name))
        .update({ position: last, updated_at: trx.fn.now(), ...this.rebuildTargetUpdate(trx, applying, last) });
      for (const worker of applying) outcomes.set(worker, { kind: 'applied' });
    });
    return outcomes;
  }

  /**
   * Moves the checkpoints of `applied` to `last` where they still hold the positions this runner
   * knows (see canApplyOptimistically); throws, rolling the transaction back, if one moved.
   */
  private async advanceCheckpoints(trx: Knex.Transaction, applied: readonly Worker[], last: number): Promise<void> {
    const names = applied.map((worker) => worker.projection.name);
    const positions = new Set(applied.map((worker) => worker.position));
    // Only while a rebuild is under way: a running projection's statement stays as it was.
    const rebuilding = applied.some((worker) => worker.storedRebuildTarget !== null);
    const clearTarget = rebuilding ? `, rebuild_target = ${CLEARED_AT_TARGET}` : '';
    // Projections of a lane mostly stand at one position: then a plain index lookup, which
    // plans in half the time of the join over the pairs.
    const result =
      positions.size === 1
        ? await trx.raw<{ rows: Array<{ name: string }> }>(
            `UPDATE projection_checkpoints SET position = ?, updated_at = now()${clearTarget}
              WHERE name = ANY(?::text[]) AND position = ? RETURNING name`,
            [last, ...(rebuilding ? [last] : []), names, applied[0].position],
          )
        : await trx.raw<{ rows: Array<{ name: string }> }>(
            `UPDATE projection_checkpoints AS c SET position = ?, updated_at = now()${clearTarget}
               FROM unnest(?::text[], ?::bigint[]) AS known(name, position)
              WHERE c.name = known.name AND c.position = known.position
              RETURNING c.name`,
            [last, ...(rebuilding ? [last] : []), names, applied.map((worker) => worker.position)],
          );
    if (result.rows.length !== applied.length) throw new Error('a projection checkpoint moved during the batch');
  }

  /**
   * Applies a projection's events in parts (see applyShared). Returns null when all are applied,
   * or the position it stopped after: a request waits after a part and events are left.
   */
  private async applyInParts(trx: Knex.Transaction, worker: Worker, events: readonly RecordedEvent[]): Promise<number | null> {
    let start = 0;
    while (start < events.length) {
      const part = events.slice(start, start + this.partSize(worker, events.length - start));
      const began = this.now();
      await applyEvents(worker.projection, trx, part);
      worker.msPerEvent = followedCost(worker.msPerEvent, part.length, this.now() - began);
      start += part.length;
      if (start < events.length && this.db.requestsWaiting?.() === true) return part[part.length - 1].globalPosition;
    }
    return null;
  }

  /**
   * Applies the batch for `workers` side by side: each projection sends its statements without
   * waiting for the others', so PGlite's thread works on one projection's statement while this
   * thread builds the next of another. One after the other, each thread waited for the other at
   * every statement; side by side a rebuild of every read model ran 7–15% faster (30–40% on a
   * slow hour with whole batches: docs/performance.md, "Thirty-first round", "Thirty-second
   * round"). They may, because a read-model projection writes and reads only its own tables, so
   * the order of their statements does not change what they leave. Only on a quiet node
   * (isQuiet): a request arriving meanwhile would queue behind every projection's statements.
   *
   * In slices of the batch of about QUIET_PART_BUDGET_MS, by what a batch event has cost the
   * group so far (groupMsPerEvent); a request waiting after a slice cuts the whole group there,
   * every projection's checkpoint at the slice's last position. Returns null when all are applied.
   */
  private async applySideBySideInParts(trx: Knex.Transaction, workers: readonly Worker[], batch: readonly RecordedEvent[]): Promise<Cut | null> {
    const from = Math.min(...workers.map((worker) => worker.position));
    const events = batch.filter((event) => event.globalPosition > from);
    let start = 0;
    while (start < events.length) {
      const slice = events.slice(start, start + this.sliceSize(workers, events.length - start));
      const began = this.now();
      const results = await Promise.allSettled(workers.map((worker) => applyEvents(worker.projection, trx, this.eventsFor(worker, slice))));
      const failed = results.find((result) => result.status === 'rejected');
      if (failed) throw failed.reason;
      this.groupMsPerEvent = followedCost(this.groupMsPerEvent, slice.length, this.now() - began);
      start += slice.length;
      const through = slice[slice.length - 1].globalPosition;
      if (start < events.length && this.db.requestsWaiting?.() === true) {
        // Projections that stood at or past the slice's end applied nothing of it and stay where they are.
        const moved = workers.filter((worker) => worker.position < through);
        if (moved.length > 0) return { workers: moved, through };
      }
    }
    return null;
  }

  /** How many batch events fit the quiet part budget at the group's cost so far (see applySideBySideInParts). */
  private sliceSize(workers: readonly Worker[], remaining: number): number {
    // Until the group's cost is known: the projections' own costs summed, as if every event were each one's.
    const costs = workers.map((worker) => worker.msPerEvent);
    const cost = this.groupMsPerEvent ?? (costs.every((each) => each !== null) ? costs.reduce((sum, each) => sum + each, 0) : null);
    return eventsWithinBudget(cost, QUIET_PART_BUDGET_MS, remaining);
  }

  /** No request for QUIET_AFTER_MS and none waiting (see applySideBySideInParts). */
  private isQuiet(): boolean {
    return (this.db.msSinceRequest?.() ?? 0) > QUIET_AFTER_MS && this.db.requestsWaiting?.() !== true;
  }

  /**
   * How many of `remaining` events fit the part budget (partBudgetMs) at the projection's cost so far. While the
   * cost is unknown, a first part of COST_SAMPLE_MIN_EVENTS tells it: the first summary pass of a
   * repository once went whole, about 400 slice events in three statements that held PGlite's
   * connection 570 ms while a search waited (docs/performance.md, "Twenty-first round").
   */
  private partSize(worker: Worker, remaining: number): number {
    return eventsWithinBudget(worker.msPerEvent, this.partBudgetMs(), remaining);
  }

  /** PART_BUDGET_MS while requests come, QUIET_PART_BUDGET_MS when none came for QUIET_AFTER_MS. */
  private partBudgetMs(): number {
    return this.isQuiet() ? QUIET_PART_BUDGET_MS : PART_BUDGET_MS;
  }

  private async applyAlone(worker: Worker, batch: readonly RecordedEvent[], last: number): Promise<BatchOutcome> {
    const { name } = worker.projection;
    try {
      return await this.db.knex.transaction(async (trx): Promise<BatchOutcome> => {
        // On PGlite the transaction runs alone (canApplyOptimistically): the read suffices.
        if (this.db.kind !== 'pglite') await lockProjectionKeys(trx, [name]);
        const stored = (await this.readCheckpoints([name], trx)).get(name) ?? 0;
        if (stored !== worker.position) return { kind: 'moved', stored };
        await applyEvents(worker.projection, trx, this.eventsFor(worker, batch));
        await trx('projection_checkpoints').where('name', name).update({ position: last, updated_at: trx.fn.now(), ...this.rebuildTargetUpdate(trx, [worker], last) });
        return { kind: 'applied' };
      });
    } catch (error) {
      return { kind: 'failed', error };
    }
  }

  /**
   * The `rebuild_target` part of a checkpoint update to `last`: cleared where the rebuild reaches
   * its end, in the statement that moves the checkpoint there; nothing when none of `workers`
   * is rebuilding, so a running projection's batches send the statement they always did.
   */
  private rebuildTargetUpdate(trx: Knex.Transaction, workers: readonly Worker[], last: number): { rebuild_target?: Knex.Raw } {
    if (workers.every((worker) => worker.storedRebuildTarget === null)) return {};
    return { rebuild_target: trx.raw(CLEARED_AT_TARGET, [last]) };
  }

  private eventsFor(worker: Worker, batch: readonly RecordedEvent[]): RecordedEvent[] {
    return batch.filter((event) => event.globalPosition > worker.position && worker.eventTypes.has(event.type));
  }

  private applied(worker: Worker, position: number): void {
    worker.position = position;
    worker.consecutiveFailures = 0;
    const target = worker.storedRebuildTarget;
    // The batch's statement cleared the stored end (CLEARED_AT_TARGET) if it reached it.
    if (target !== null && position >= target) worker.storedRebuildTarget = null;
    if (worker.state === 'failed') {
      this.log?.info({ projection: worker.projection.name, position }, 'projection recovered');
      // A rebuild that failed half-way has not replayed what its tables miss: still a rebuild.
      worker.state = worker.storedRebuildTarget !== null ? 'rebuilding' : 'running';
      worker.lastError = null;
    } else if (worker.state === 'rebuilding' && worker.rebuild === null && worker.storedRebuildTarget === null) {
      // A rebuild resumed by start() (or after a failure) has reached its end; rebuild() ends its own.
      this.log?.info({ projection: worker.projection.name, position }, 'projection rebuilt');
      worker.state = 'running';
    }
    this.progressRebuild(worker);
  }

  /**
   * A lane that has read as far as another (and at most a batch further) hands its projections to
   * it and closes. The bound keeps a lane at the head from joining one that replays from far back.
   */
  private mergeLanes(lane: Lane): void {
    if (lane.closed) return;
    for (const other of this.lanes) {
      if (other === lane || other.closed || other.readThrough > lane.readThrough) continue;
      if (lane.readThrough - other.readThrough > this.batchSize) continue;
      // `other` reads on after its readThrough, which this lane's projections have all passed.
      for (const worker of [...lane.workers]) this.joinLane(other, worker);
      this.closeLane(lane);
      return;
    }
  }

  /** A read of the log failed: every projection of the lane fails and retries. */
  private onLaneError(lane: Lane, error: unknown): void {
    if (lane.closed) return;
    const workers = [...lane.workers];
    this.closeLane(lane);
    for (const worker of workers) {
      worker.lane = null;
      this.failed(worker, error);
    }
  }

  private failed(worker: Worker, error: unknown): void {
    worker.consecutiveFailures += 1;
    // A failed statement's message carries its SQL: a batch's can be megabytes, shown by every status read and retry log.
    worker.lastError = boundedErrorMessage(error);
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
    const generation = worker.generation;
    worker.retryTimer = setTimeout(() => {
      worker.retryTimer = null;
      if (generation !== worker.generation) return;
      void this.resume(worker).catch((resumeError: unknown) => this.failed(worker, resumeError));
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
    const pending: Waiter[] = [];
    for (const waiter of this.waiters) {
      if (waiter.done()) {
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

/** How an offline rebuild ended: done, or stopped by a signal at `position` of the `total` it was replaying. */
export type RebuildEnd = { interruptedBy: null } | { interruptedBy: 'SIGINT' | 'SIGTERM'; position: number; total: number };

/**
 * `rebuildWithProgressBar`, stopped cleanly by SIGINT or SIGTERM: the runner stops between
 * batches (rows and checkpoint agree), so the caller can close the database and release its
 * lock, and say where the rebuild stood; the next start or rebuild completes it. Without this a
 * signal ended the process mid-batch with nothing said.
 */
export async function rebuildUntilInterrupted(
  runner: Pick<ReadModelRunner, 'rebuild' | 'stop' | 'status'>,
  name: string,
  signals: Pick<NodeJS.EventEmitter, 'once' | 'off'> = process,
  stream: NodeJS.WritableStream = process.stderr,
): Promise<RebuildEnd> {
  let interruptedBy: 'SIGINT' | 'SIGTERM' | null = null;
  let total = 0;
  const interrupt = (signal: 'SIGINT' | 'SIGTERM') => () => {
    interruptedBy ??= signal;
    void runner.stop();
  };
  const onInterrupt = interrupt('SIGINT');
  const onTerminate = interrupt('SIGTERM');
  signals.once('SIGINT', onInterrupt);
  signals.once('SIGTERM', onTerminate);
  try {
    const counting: Pick<ReadModelRunner, 'rebuild'> = {
      rebuild: (projection, onProgress) =>
        runner.rebuild(projection, (done, all) => {
          total = all;
          onProgress?.(done, all);
        }),
    };
    await rebuildWithProgressBar(counting, name, stream);
    // Finished, a late signal or none: the rebuild is done.
    return { interruptedBy: null };
  } catch (error) {
    if (interruptedBy === null) throw error;
  } finally {
    signals.off('SIGINT', onInterrupt);
    signals.off('SIGTERM', onTerminate);
  }
  const stopped: 'SIGINT' | 'SIGTERM' = interruptedBy;
  const position = (await runner.status()).find((projection) => projection.name === name)?.position ?? 0;
  return { interruptedBy: stopped, position, total };
}

/** How many of `remaining` events fit `budgetMs` at `cost` ms an event; while the cost is unknown, COST_SAMPLE_MIN_EVENTS to tell it. */
function eventsWithinBudget(cost: number | null, budgetMs: number, remaining: number): number {
  if (cost === null) return Math.min(remaining, COST_SAMPLE_MIN_EVENTS);
  if (cost <= 0) return remaining;
  return Math.max(1, Math.min(remaining, Math.floor(budgetMs / cost)));
}

/**
 * A cost per event followed as a moving average; only runs long enough that a statement's fixed
 * cost does not pass for the events' (COST_SAMPLE_MIN_EVENTS) count.
 */
function followedCost(cost: number | null, events: number, ms: number): number | null {
  if (events < COST_SAMPLE_MIN_EVENTS) return cost;
  const sample = ms / events;
  return cost === null ? sample : cost * 0.7 + sample * 0.3;
}
