import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Database } from '../db/database.js';
import { inBackground } from '../db/priority.js';
import { Doorbell } from '../util/concurrency.js';
import { errorMessage } from '../util/errorMessage.js';
import type { RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import { type ClaimedJob, JobRepository, type JobRecord } from './jobs.js';
import { isPermanentError, retryAfterMsOf, JOB_TRIGGER_TYPE, SCHEDULED_TRIGGER_TYPE, type JobContext, type JobRunOutcome, type ScheduledTriggerData, type Stage } from './types.js';

/**
 * The stage runtime (DESIGN.md, "Stage runtime"): per stage, one dispatcher claims jobs while
 * fewer than the stage's concurrency are running; each job runs with a timeout, a heartbeat
 * and an AbortSignal, then is finished according to how it ended. Every database access is a
 * single short statement and a running stage holds no transaction, so on PGlite (one
 * connection) hundreds of jobs can be in flight while the connection stays free.
 */

export interface RetrySettings {
  /** Attempts including the first. */
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export interface StageRuntimeSettings {
  /** Workers per job kind (`task.queues`); a stage missing here gets 1, 0 disables it. */
  concurrency: Readonly<Record<string, number>>;
  /** `task.job_timeout`; 0 = unlimited. */
  jobTimeoutMs: number;
  /** `task.heartbeat_interval`. */
  heartbeatIntervalMs: number;
  /** `task.heartbeat_timeout`: a running job not heard of for this long is an orphan. */
  heartbeatTimeoutMs: number;
  /** Lease granted at claim and renewed by each heartbeat; must exceed the heartbeat interval. */
  leaseMs: number;
  /** How often an idle dispatcher looks for due jobs when nobody wakes it. */
  pollIntervalMs: number;
  /**
   * How long a kind whose queue was found empty waits for a wake before it looks again (default
   * `pollIntervalMs`). Where every job is enqueued by this process, which wakes its kind (the
   * embedded tier: intake, the scheduler, retries and rescues all wake), the wait is a safety
   * net, and the looks of kinds that have no jobs are statements on the one connection for
   * nothing. A retry due within it wakes its kind when it is due.
   */
  idlePollIntervalMs?: number;
  retry: RetrySettings;
  /** `task.rescue_on_startup`. */
  rescueOnStartup: boolean;
  /** How long stop() waits for running jobs before aborting them; default 30 s. */
  stopTimeoutMs?: number;
  /**
   * How often to requeue jobs orphaned by other workers (crashed processes on a shared
   * server) while running; default `heartbeatTimeoutMs`; 0 = only at start-up.
   */
  rescueIntervalMs?: number;
}

/** The subset of pino's API the runtime uses (pino loggers fit). */
export interface RuntimeLogger {
  debug(details: Record<string, unknown>, message: string): void;
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

/**
 * How a run ended, as recorded:
 * - `succeeded`: the job is done (also when a twin won the version race: `error` is the ConcurrencyError);
 * - `retry_scheduled`: a transient failure, queued again for `job.nextAttemptAt`;
 * - `failed`: a permanent failure, or a transient one with no attempt left;
 * - `abandoned`: the worker let go without recording anything (shutdown, lost lease, or the
 *   finishing write failed); the lease expires and rescue requeues the job.
 */
export type JobOutcome = 'succeeded' | 'retry_scheduled' | 'failed' | 'abandoned';

export interface JobFinishedEvent {
  /** The row as recorded (or, when abandoned, as claimed). */
  job: JobRecord;
  outcome: JobOutcome;
  /** What the run threw, if it threw. */
  error?: unknown;
  durationMs: number;
}

export type JobFinishedListener = (event: JobFinishedEvent) => void;

export interface StageRuntimeOptions {
  db: Database;
  /** Reads the trigger event by its global position. */
  store: Pick<EventStore, 'readAll'>;
  stages: readonly Stage[];
  settings: StageRuntimeSettings;
  log: RuntimeLogger;
  /** Identifies this process in `claimed_by`; default `<host>:<pid>:<random>`. */
  workerId?: string;
  /** Jitter source, injectable for tests; default Math.random. */
  random?: () => number;
}

export interface StageRuntime {
  readonly workerId: string;
  readonly jobs: JobRepository;
  /** Rescues orphans when configured, then starts the dispatchers. */
  start(): Promise<void>;
  /**
   * Stops claiming, waits up to `timeoutMs` (default `settings.stopTimeoutMs`) for running
   * jobs, then aborts the rest and leaves their leases to expire. Idempotent.
   */
  stop(options?: { timeoutMs?: number }): Promise<void>;
  /** Pokes the dispatchers of `kind` (all when omitted) to claim now, e.g. after intake. */
  wake(kind?: string): void;
  /** Returns a function that removes the listener. */
  onJobFinished(listener: JobFinishedListener): () => void;
  /** Jobs this runtime is running now. */
  runningCount(): number;
}

/** Why a job's signal was aborted. */
export class JobTimeoutError extends Error {
  override readonly name = 'JobTimeoutError';
  constructor(readonly timeoutMs: number) {
    super(`job timed out after ${timeoutMs} ms`);
  }
}

export class WorkerShutdownError extends Error {
  override readonly name = 'WorkerShutdownError';
  constructor() {
    super('worker shutting down');
  }
}

export class LeaseLostError extends Error {
  override readonly name = 'LeaseLostError';
  constructor() {
    super('job lease lost: rescued or retried elsewhere');
  }
}

export function isConcurrencyError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { name?: unknown }).name === 'ConcurrencyError';
}

/**
 * A job's failure as its `last_error` shows it: an Error's message (errorMessage, as a source's or
 * a report's failure reason), not `PermanentJobError: …`: the class is the code's business, and a
 * dead job's `last_error` becomes its source's failure. Only an Error with no message says its
 * class; a thrown value that is no Error is shown as JSON.
 */
function describeJobError(error: unknown): string {
  if (error instanceof Error) return errorMessage(error) || error.name;
  if (typeof error === 'string') return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error); // cyclic or BigInt-bearing values
  }
}

/** The job as stages and listeners see it: the claim token stays inside the runtime. */
function publicView(claim: ClaimedJob): JobRecord {
  const { claimToken, ...record } = claim;
  void claimToken;
  return record;
}

/**
 * The synthetic trigger of a scheduled job (position 0, which no stored event holds): a
 * `ScheduledJobDue` on the repository's stream, so stages read repository, correlation and
 * time from one place whether or not an event triggered them.
 */
export function scheduledTrigger(job: JobRecord): RecordedEvent {
  const data: ScheduledTriggerData = { kind: job.kind };
  return {
    eventId: job.triggerEventId,
    streamId: job.repositoryId === null ? 'repository-' : `repository-${job.repositoryId}`,
    streamVersion: -1,
    globalPosition: 0,
    type: SCHEDULED_TRIGGER_TYPE,
    schemaVersion: 1,
    data,
    occurredAt: job.createdAt,
    repositoryId: job.repositoryId,
    actor: 'system:scheduler',
    causationId: null,
    correlationId: job.correlationId,
  };
}

/**
 * The trigger of a job whose stage needs only what the row knows of it (`Stage.triggerFromJob`):
 * its id, position, repository and correlation id are the event's, copied at intake; its type
 * is `JobTrigger` and it carries no data.
 */
function jobTrigger(job: JobRecord): RecordedEvent {
  return {
    eventId: job.triggerEventId,
    streamId: '',
    streamVersion: -1,
    globalPosition: job.triggerPosition,
    type: JOB_TRIGGER_TYPE,
    schemaVersion: 1,
    data: {},
    occurredAt: job.createdAt,
    repositoryId: job.repositoryId,
    actor: 'system:intake',
    causationId: null,
    correlationId: job.correlationId,
  };
}

/**
 * Exponential backoff with jitter: the n-th attempt (1-based) that failed waits between half
 * and all of min(maxDelay, base * 2^(n-1)).
 */
export function retryDelayMs(failedAttempt: number, retry: RetrySettings, random: () => number = Math.random): number {
  const exponent = Math.max(0, failedAttempt - 1);
  const ceiling = Math.min(retry.maxDelayMs, retry.baseDelayMs * 2 ** Math.min(exponent, 52));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/**
 * The wait before a failed job's next attempt: the backoff, or longer when the error carries the
 * server's Retry-After (retryAfterMsOf), so the job does not ask again sooner than it was told.
 * That wish is capped at `maxDelay`, so a server cannot park a job for days.
 */
export function nextAttemptDelayMs(failedAttempt: number, retry: RetrySettings, error: unknown, random: () => number = Math.random): number {
  const backoff = retryDelayMs(failedAttempt, retry, random);
  const retryAfterMs = retryAfterMsOf(error);
  return retryAfterMs === undefined ? backoff : Math.max(backoff, Math.min(Math.ceil(retryAfterMs), retry.maxDelayMs));
}

function requirePositive(name: string, value: unknown, allowZero = false): void {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw new RangeError(`${name} must be a finite number ${allowZero ? '>= 0' : '> 0'}, got ${String(value)}`);
  }
}

function validateStageRuntimeSettings(settings: StageRuntimeSettings): void {
  requirePositive('jobTimeoutMs', settings.jobTimeoutMs, true);
  requirePositive('heartbeatIntervalMs', settings.heartbeatIntervalMs);
  requirePositive('heartbeatTimeoutMs', settings.heartbeatTimeoutMs);
  requirePositive('leaseMs', settings.leaseMs);
  requirePositive('pollIntervalMs', settings.pollIntervalMs);
  if (settings.idlePollIntervalMs !== undefined) {
    requirePositive('idlePollIntervalMs', settings.idlePollIntervalMs);
    if (settings.idlePollIntervalMs < settings.pollIntervalMs) throw new RangeError('idlePollIntervalMs must not be shorter than pollIntervalMs');
  }
  if (settings.leaseMs <= settings.heartbeatIntervalMs) {
    throw new RangeError('leaseMs must exceed heartbeatIntervalMs, or leases lapse between heartbeats');
  }
  if (settings.heartbeatTimeoutMs <= settings.heartbeatIntervalMs) {
    throw new RangeError('heartbeatTimeoutMs must exceed heartbeatIntervalMs');
  }
  const { maxAttempts, baseDelayMs, maxDelayMs } = settings.retry ?? {};
  // 1000: the configuration schema's bound on task.retry.max_attempts (definitions/attempts).
  if (typeof maxAttempts !== 'number' || !Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 1000) {
    throw new RangeError(`retry.maxAttempts must be an integer in [1, 1000], got ${String(maxAttempts)}`);
  }
  requirePositive('retry.baseDelayMs', baseDelayMs, true);
  requirePositive('retry.maxDelayMs', maxDelayMs, true);
  if (maxDelayMs < baseDelayMs) throw new RangeError('retry.maxDelayMs must be >= retry.baseDelayMs');
  if (settings.stopTimeoutMs !== undefined) requirePositive('stopTimeoutMs', settings.stopTimeoutMs, true);
  if (settings.rescueIntervalMs !== undefined) requirePositive('rescueIntervalMs', settings.rescueIntervalMs, true);
  for (const [kind, count] of Object.entries(settings.concurrency ?? {})) {
    if (!Number.isInteger(count) || count < 0) {
      throw new RangeError(`concurrency of ${kind} must be an integer >= 0, got ${String(count)}`);
    }
  }
}

/** Most jobs one claim statement takes for a dispatcher (and a quarter of a success batch). */
const maxClaimBatch = 25;

/** A signal aborted once all of `signals` are, with the last one's reason. */
function abortedWhenAll(signals: readonly AbortSignal[]): AbortSignal {
  const controller = new AbortController();
  const check = (): void => {
    if (!controller.signal.aborted && signals.every((signal) => signal.aborted)) controller.abort(signals.at(-1)?.reason);
  };
  for (const signal of signals) signal.addEventListener('abort', check, { once: true });
  check();
  return controller.signal;
}

interface ActiveJob {
  claim: ClaimedJob;
  stage: Stage;
  controller: AbortController;
  startedAt: number;
  /** Its run has ended and its outcome is being recorded: a lease found gone is that record, not a loss. */
  ended: boolean;
  /** Settles once the job's outcome is recorded (or given up); never rejects. */
  done: Promise<void>;
}

export function createStageRuntime(options: StageRuntimeOptions): StageRuntime {
  const { db, store, stages, settings, log } = options;
  validateStageRuntimeSettings(settings);
  const random = options.random ?? Math.random;
  const workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const jobs = new JobRepository(db.knex);
  const stageOf = new Map<string, Stage>();
  for (const stage of stages) {
    if (stageOf.has(stage.kind)) throw new Error(`two stages share the kind ${stage.kind}`);
    stageOf.set(stage.kind, stage);
  }
  const stopTimeoutMs = settings.stopTimeoutMs ?? 30_000;
  const rescueIntervalMs = settings.rescueIntervalMs ?? settings.heartbeatTimeoutMs;
  const idlePollIntervalMs = settings.idlePollIntervalMs ?? settings.pollIntervalMs;

  const doorbells = new Map<string, Doorbell>(stages.map((stage) => [stage.kind, new Doorbell()]));
  /** Kinds whose queue may hold due jobs beyond what their workers hold (a claim came back full, or a wake came since). */
  const backlog = new Set<string>(stages.map((stage) => stage.kind));
  /** Wakes per kind so far, to tell whether one came while a claim was in flight. */
  const wakes = new Map<string, number>(stages.map((stage) => [stage.kind, 0]));
  const activeByKind = new Map<string, Set<ActiveJob>>(stages.map((stage) => [stage.kind, new Set()]));
  /** Workers busy per kind: a job, or a group of jobs run together (Stage.runMany). */
  const busyByKind = new Map<string, number>(stages.map((stage) => [stage.kind, 0]));
  const listeners = new Set<JobFinishedListener>();
  const timers = new Set<NodeJS.Timeout>();
  let dispatchers: Promise<void>[] = [];
  let heartbeatInFlight: Promise<void> = Promise.resolve();
  let rescueInFlight: Promise<void> = Promise.resolve();
  let phase: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  let stopping: Promise<void> | null = null;

  function activeJobs(): ActiveJob[] {
    return [...activeByKind.values()].flatMap((set) => [...set]);
  }

  function emit(event: JobFinishedEvent): void {
    for (const listener of listeners) {
      try {
        listener(event);
      } catch (error) {
        log.warn({ err: error, jobId: event.job.id }, 'job-finished listener threw');
      }
    }
  }

  function wake(kind?: string): void {
    if (kind === undefined) {
      for (const known of doorbells.keys()) wake(known);
    } else if (doorbells.has(kind)) {
      backlog.add(kind);
      wakes.set(kind, (wakes.get(kind) ?? 0) + 1);
      doorbells.get(kind)?.poke();
    }
  }

  /** The trigger event sits at its global position; readers see a gap-free log. */
  async function loadTrigger(job: ClaimedJob, stage: Stage): Promise<RecordedEvent> {
    if (job.triggerPosition === 0) return scheduledTrigger(job);
    if (stage.triggerFromJob) return jobTrigger(job);
    const [event] = await store.readAll({ after: job.triggerPosition - 1, limit: 1 });
    if (!event || event.globalPosition !== job.triggerPosition) {
      // Not visible yet (the distributed tier may enqueue ahead of a reader): transient.
      throw new Error(`trigger event ${job.triggerEventId} at position ${job.triggerPosition} is not readable yet`);
    }
    if (event.eventId !== job.triggerEventId) {
      throw Object.assign(
        new Error(
          `position ${job.triggerPosition} holds event ${event.eventId}, not the trigger ${job.triggerEventId}`,
        ),
        { permanent: true },
      );
    }
    return event;
  }

  /**
   * Successes are recorded in batches: while one batch's statement runs, the next ones gather,
   * so a busy runtime records many finished jobs per round trip and an idle one waits for none.
   */
  const pendingSuccesses: Array<{ claim: ClaimedJob; resolve: (record: JobRecord | null) => void; reject: (error: unknown) => void }> = [];
  let successFlush: Promise<void> | null = null;

  function succeedSoon(claim: ClaimedJob): Promise<JobRecord | null> {
    return new Promise((resolve, reject) => {
      pendingSuccesses.push({ claim, resolve, reject });
      successFlush ??= flushSuccesses().finally(() => (successFlush = null));
    });
  }

  async function flushSuccesses(): Promise<void> {
    while (pendingSuccesses.length > 0) {
      const batch = pendingSuccesses.splice(0, maxClaimBatch * 4);
      try {
        const recorded = await jobs.succeedMany(batch.map((entry) => entry.claim));
        for (const entry of batch) entry.resolve(recorded.get(entry.claim.claimToken) ?? null);
      } catch (error) {
        for (const entry of batch) entry.reject(error);
      }
    }
  }

  function contextFor(claim: ClaimedJob, stage: Stage, trigger: RecordedEvent, signal: AbortSignal): JobContext {
    return {
      job: publicView(claim),
      trigger,
      scheduled: claim.triggerPosition === 0,
      signal,
      actor: `system:${stage.kind}`,
      coverQueued: (throughPosition) => jobs.endCovered(stage.kind, claim.subjectId, throughPosition),
    };
  }

  /** Runs one job (or, with `grouped`, waits for its part of a group's run) and records how it ended. */
  async function runJob(active: ActiveJob, grouped?: Promise<JobRunOutcome>): Promise<void> {
    const { claim, stage, controller } = active;
    const signal = controller.signal;
    const aborted = new Promise<void>((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', () => resolve(), { once: true });
    });
    let timeout: NodeJS.Timeout | undefined;
    if (settings.jobTimeoutMs > 0) {
      timeout = setTimeout(() => controller.abort(new JobTimeoutError(settings.jobTimeoutMs)), settings.jobTimeoutMs);
    }
    // The race never waits on a run that ignores its signal: abort settles the job at once.
    const attempt =
      grouped ??
      (async (): Promise<JobRunOutcome> => {
        try {
          const trigger = await loadTrigger(claim, stage);
          if (signal.aborted) return { ok: false, error: signal.reason };
          await stage.run(contextFor(claim, stage, trigger, signal));
          return { ok: true };
        } catch (error) {
          return { ok: false, error };
        }
      })();
    const result = await Promise.race([attempt, aborted.then((): null => null)]);
    active.ended = true;
    if (timeout) clearTimeout(timeout);
    const durationMs = Date.now() - active.startedAt;
    const reason: unknown = signal.aborted ? signal.reason : undefined;

    if (reason instanceof WorkerShutdownError || reason instanceof LeaseLostError) {
      log.warn({ jobId: claim.id, kind: stage.kind, reason: reason.message }, 'job abandoned');
      emit({ job: publicView(claim), outcome: 'abandoned', error: reason, durationMs });
      attempt.then(
        (late) =>
          log.debug({ jobId: claim.id, kind: stage.kind, ok: late.ok }, 'abandoned job settled after abort'),
        () => undefined,
      );
      return;
    }

    const error: unknown = reason instanceof JobTimeoutError ? reason : result && !result.ok ? result.error : undefined;
    let recorded: JobRecord | null;
    let outcome: JobOutcome;
    try {
      if (error === undefined || isConcurrencyError(error)) {
        if (error !== undefined) {
          log.debug({ jobId: claim.id, kind: stage.kind, err: error }, 'version conflict: a twin already did this job');
        }
        recorded = await succeedSoon(claim);
        outcome = 'succeeded';
      } else {
        const permanent = !(error instanceof JobTimeoutError) && isPermanentError(error);
        recorded = await jobs.fail(claim, {
          error: describeJobError(error),
          permanent,
          retryDelayMs: nextAttemptDelayMs(claim.attempts, settings.retry, error, random),
        });
        outcome = recorded?.state === 'queued' ? 'retry_scheduled' : 'failed';
        const details = { jobId: claim.id, kind: stage.kind, attempt: claim.attempts, err: error };
        const retryAfterMs = retryAfterMsOf(error);
        if (outcome === 'retry_scheduled') {
          log.info({ ...details, nextAttemptAt: recorded?.nextAttemptAt, ...(retryAfterMs === undefined ? {} : { retryAfterMs }) }, 'job failed, retry scheduled');
        } else log.warn({ ...details, permanent }, 'job failed');
        if (recorded && outcome === 'retry_scheduled') scheduleWake(stage.kind, recorded.nextAttemptAt);
      }
    } catch (writeError) {
      // The lease will expire and rescue requeues the job; the rerun is a no-op if it had finished.
      log.error({ jobId: claim.id, kind: stage.kind, err: writeError }, 'could not record job outcome');
      emit({ job: publicView(claim), outcome: 'abandoned', error: writeError, durationMs });
      return;
    }
    if (!recorded) {
      log.warn({ jobId: claim.id, kind: stage.kind }, 'job lease lost before its outcome was recorded');
      emit({ job: publicView(claim), outcome: 'abandoned', error: new LeaseLostError(), durationMs });
      return;
    }
    emit({ job: recorded, outcome, error, durationMs });
  }

  /**
   * Pokes the dispatcher when a backoff shorter than the idle poll interval ends, so the retry
   * is not up to a whole interval late; longer backoffs are left to the idle poll.
   */
  function scheduleWake(kind: string, dueAt: string): void {
    const delay = Math.max(0, Date.parse(dueAt) - Date.now()) + 5;
    if (delay > idlePollIntervalMs) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      wake(kind);
    }, delay);
    timer.unref();
    timers.add(timer);
  }

  function occupy(kind: string, delta: number): void {
    busyByKind.set(kind, (busyByKind.get(kind) ?? 0) + delta);
  }

  /** A freed worker claims again only when jobs may be waiting: an emptied queue waits for intake's wake. */
  function freed(kind: string): void {
    occupy(kind, -1);
    if (backlog.has(kind)) doorbells.get(kind)?.poke();
  }

  function track(stage: Stage, claim: ClaimedJob, grouped?: (active: ActiveJob) => Promise<JobRunOutcome>): ActiveJob {
    const active: ActiveJob = {
      claim,
      stage,
      controller: new AbortController(),
      startedAt: Date.now(),
      ended: false,
      done: Promise.resolve(),
    };
    const set = activeByKind.get(stage.kind);
    set?.add(active);
    active.done = runJob(active, grouped?.(active))
      .catch((error: unknown) => log.error({ jobId: claim.id, err: error }, 'job runner crashed'))
      .finally(() => set?.delete(active));
    return active;
  }

  function launch(stage: Stage, claim: ClaimedJob): void {
    occupy(stage.kind, 1);
    void track(stage, claim).done.finally(() => freed(stage.kind));
  }

  /**
   * Claimed jobs of a `runMany` stage, run together by one worker. Each job keeps its own
   * record, timeout, heartbeat and abort; a job whose trigger cannot be read fails alone, and a
   * group whose run throws ends every job of it with that error, as each run alone would have.
   */
  function launchGroup(stage: Stage, runMany: NonNullable<Stage['runMany']>, claims: readonly ClaimedJob[]): void {
    occupy(stage.kind, 1);
    let release!: (actives: ActiveJob[]) => void;
    const started = new Promise<ActiveJob[]>((resolve) => (release = resolve));
    const outcomes = started.then(async (actives): Promise<Array<JobRunOutcome | Promise<JobRunOutcome>>> => {
      const results: Array<JobRunOutcome | Promise<JobRunOutcome>> = actives.map(() => ({ ok: true }));
      try {
        const signal = abortedWhenAll(actives.map((active) => active.controller.signal));
        const contexts: JobContext[] = [];
        const members: number[] = [];
        for (const [index, active] of actives.entries()) {
          try {
            const trigger = await loadTrigger(active.claim, stage);
            contexts.push(contextFor(active.claim, stage, trigger, active.controller.signal));
            members.push(index);
          } catch (error) {
            results[index] = { ok: false, error };
          }
        }
        if (contexts.length === 0) return results;
        if (signal.aborted) {
          for (const index of members) results[index] = { ok: false, error: signal.reason };
          return results;
        }
        const ran = await runMany(contexts, signal);
        for (const [position, index] of members.entries()) {
          results[index] = ran[position] ?? { ok: false, error: new Error(`${stage.kind}: runMany returned no outcome for a job`) };
        }
      } catch (error) {
        return actives.map(() => ({ ok: false, error }));
      }
      return results;
    });
    const actives = claims.map((claim, index) => track(stage, claim, () => outcomes.then((all) => all[index] ?? { ok: true })));
    release(actives);
    void Promise.all(actives.map((active) => active.done)).finally(() => freed(stage.kind));
  }

  async function dispatch(stage: Stage, limit: number): Promise<void> {
    // Both maps hold every stage's kind from construction on.
    const bell = doorbells.get(stage.kind) as Doorbell;
    const runMany = stage.runMany?.bind(stage);
    while (phase === 'running') {
      const idle = limit - (busyByKind.get(stage.kind) ?? 0);
      // A worker of a runMany stage takes a whole claim's worth of jobs.
      const free = runMany ? (idle > 0 ? maxClaimBatch : 0) : Math.min(idle, maxClaimBatch);
      if (free <= 0) {
        await bell.wait(pollWait(stage.kind));
        continue;
      }
      let claims: ClaimedJob[] = [];
      let more = true;
      const wakesBefore = wakes.get(stage.kind) ?? 0;
      try {
        ({ claims, more } = await jobs.claimBatch(stage.kind, workerId, free, {
          leaseMs: settings.leaseMs,
          maxAttempts: settings.retry.maxAttempts,
        }));
      } catch (error) {
        log.error({ kind: stage.kind, err: error }, 'claiming a job failed');
      }
      // None left behind: the queue is empty until intake wakes this kind (or the next poll), so
      // a freed worker does not claim again only to find nothing. A wake that came while the
      // claim ran may have brought jobs the claim did not see.
      if (!more && wakes.get(stage.kind) === wakesBefore) backlog.delete(stage.kind);
      else backlog.add(stage.kind);
      if (claims.length > 0) {
        if (phase !== 'running') {
          // stop() began while the claim was in flight: give them back uncounted.
          for (const claim of claims) {
            await jobs.release(claim).catch((error: unknown) => {
              log.warn({ jobId: claim.id, err: error }, 'could not release a job claimed during stop');
            });
          }
          break;
        }
        // A deferred stage's jobs (and all they start) queue for the database behind the others'.
        inBackground(() => {
          if (runMany && claims.length > 1) launchGroup(stage, runMany, claims);
          else for (const claim of claims) launch(stage, claim);
        }, stage.deferred ? 'deferred' : 'background');
        // More are due: claim again at once (or, with every worker busy, when one is freed).
        if (more) continue;
      }
      await bell.wait(pollWait(stage.kind));
    }
  }

  /** A kind with jobs left behind looks again after the poll interval; one whose queue is empty, after the idle one. */
  function pollWait(kind: string): number {
    return backlog.has(kind) ? settings.pollIntervalMs : idlePollIntervalMs;
  }

  function beat(): void {
    heartbeatInFlight = heartbeatInFlight.then(async () => {
      const running = activeJobs().filter((job) => !job.controller.signal.aborted);
      if (running.length === 0) return;
      try {
        const held = await jobs.heartbeat(
          running.map((job) => job.claim.claimToken),
          settings.leaseMs,
        );
        for (const job of running) {
          // A job whose outcome was written meanwhile holds no claim token: its run is over, nothing to abort.
          if (!held.has(job.claim.claimToken) && !job.controller.signal.aborted && !job.ended) {
            job.controller.abort(new LeaseLostError());
          }
        }
      } catch (error) {
        log.warn({ err: error, running: running.length }, 'heartbeat failed; will try again');
      }
    });
  }

  /** What the stages of dead jobs record of them (Stage.onDead). */
  async function recordDeaths(dead: readonly JobRecord[]): Promise<void> {
    for (const job of dead) {
      try {
        await stageOf.get(job.kind)?.onDead?.(job);
      } catch (error) {
        log.warn({ err: error, jobId: job.id, kind: job.kind }, 'could not record what a dead job leaves behind');
      }
    }
  }

  async function rescue(startup: boolean): Promise<void> {
    const result = await jobs.rescueOrphans({
      heartbeatTimeoutMs: settings.heartbeatTimeoutMs,
      // Right after start nothing of ours runs: every job claimed under our id is an orphan,
      // and on PGlite (one process per data directory) every running job is.
      claimedBy: startup ? workerId : undefined,
      everyRunning: startup && db.kind === 'pglite',
    });
    await recordDeaths(result.dead);
    const total = result.requeued.length + result.dead.length;
    if (total > 0) {
      log.info(
        { requeued: result.requeued.map((job) => job.id), dead: result.dead.map((job) => job.id) },
        'rescued orphaned jobs',
      );
      wake();
    }
  }

  function every(ms: number, tick: () => void): void {
    const timer = setInterval(tick, ms);
    timer.unref();
    timers.add(timer);
  }

  function startDispatching(): void {
    every(settings.heartbeatIntervalMs, beat);
    if (rescueIntervalMs > 0) {
      every(rescueIntervalMs, () => {
        rescueInFlight = rescueInFlight
          .then(() => rescue(false))
          .catch((error: unknown) => log.warn({ err: error }, 'orphan sweep failed'));
      });
    }
    dispatchers = stages.flatMap((stage) => {
      const limit = settings.concurrency[stage.kind] ?? 1;
      if (limit === 0) {
        log.info({ kind: stage.kind }, 'stage disabled (concurrency 0)');
        return [];
      }
      return [dispatch(stage, limit)];
    });
    log.info({ workerId, stages: stages.map((stage) => stage.kind) }, 'stage runtime started');
  }

  return {
    workerId,
    jobs,

    async start(): Promise<void> {
      if (phase !== 'idle') throw new Error(`stage runtime cannot start: it is ${phase}`);
      phase = 'running';
      if (settings.rescueOnStartup) {
        try {
          await rescue(true);
        } catch (error) {
          phase = 'stopped'; // nothing was started: a later stop() has nothing to wait for
          throw error;
        }
      }
      if (phase !== 'running') return; // stop() was called during the rescue
      // Jobs, claims and timers run as background work: requests go first on PGlite's one connection.
      inBackground(() => startDispatching());
    },

    stop(stopOptions: { timeoutMs?: number } = {}): Promise<void> {
      if (stopping) return stopping;
      if (phase === 'idle') {
        phase = 'stopped';
        return (stopping = Promise.resolve());
      }
      phase = 'stopping';
      const timeoutMs = stopOptions.timeoutMs ?? stopTimeoutMs;
      stopping = (async () => {
        wake();
        await Promise.all(dispatchers);
        const running = activeJobs();
        if (running.length > 0) {
          log.info({ running: running.length, timeoutMs }, 'waiting for running jobs');
          let deadline: NodeJS.Timeout | undefined;
          await Promise.race([
            Promise.all(running.map((job) => job.done)),
            new Promise<void>((resolve) => (deadline = setTimeout(resolve, timeoutMs))),
          ]);
          clearTimeout(deadline);
        }
        const left = activeJobs();
        for (const job of left) job.controller.abort(new WorkerShutdownError());
        // Abort settles each job promptly (the race does not wait for the run itself).
        await Promise.all(left.map((job) => job.done));
        for (const timer of timers) clearTimeout(timer);
        timers.clear();
        await heartbeatInFlight;
        await rescueInFlight;
        phase = 'stopped';
        log.info({ workerId, abandoned: left.length }, 'stage runtime stopped');
      })();
      return stopping;
    },

    wake,

    onJobFinished(listener: JobFinishedListener): () => void {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },

    runningCount(): number {
      return activeJobs().length;
    },
  };
}

