import type { Knex } from 'knex';
import { MIN_PERIODIC_INTERVAL_MS } from '../config/duration.js';
import { inBackground } from '../db/priority.js';
import { JobRepository, scheduledTriggerId } from './jobs.js';
import type { RuntimeLogger } from './runtime.js';

/**
 * The scheduler of periodic jobs (docs/pipeline.md, "Stages"): for every live repository and
 * every periodic kind it enqueues one job per interval bucket. The job's trigger id is derived
 * from (kind, repository, bucket) and buckets are cut on the database clock, so any number of
 * workers ticking at any moment within a bucket enqueue the same row once. A bucket whose
 * repository still has the kind's previous scheduled job queued or running gets none: the
 * passes of one repository never overlap (JobRepository.enqueueMany, `skipWhilePending`).
 */

export interface PeriodicJob {
  kind: string;
  /** Bucket length; one job per repository per bucket. */
  intervalMs: number;
}

export interface SchedulerOptions {
  knex: Knex;
  periodic: readonly PeriodicJob[];
  log: RuntimeLogger;
  /** How often to look for a new bucket; default a quarter of the shortest interval, within [1 s, 60 s]. */
  tickMs?: number;
  /** Attempt budget written on new rows (the runtime rewrites it at claim). */
  maxAttempts?: number;
  /** Called after a tick with the kinds that received new jobs (wire it to `StageRuntime.wake`). */
  onEnqueued?: (kinds: readonly string[]) => void;
}

export interface Scheduler {
  /** Runs one tick at once, then every `tickMs`. */
  start(): Promise<void>;
  /** Stops ticking and waits for a tick in flight. Idempotent. */
  stop(): Promise<void>;
  /** One pass: enqueues the current bucket's jobs; returns how many rows were new. */
  tick(): Promise<number>;
}

export function createScheduler(options: SchedulerOptions): Scheduler {
  const { knex, periodic, log } = options;
  const kinds = new Set<string>();
  for (const job of periodic) {
    if (typeof job.kind !== 'string' || job.kind === '') throw new TypeError('every periodic job needs a kind');
    if (kinds.has(job.kind)) throw new Error(`periodic kind ${job.kind} is listed twice`);
    if (!Number.isFinite(job.intervalMs) || job.intervalMs < MIN_PERIODIC_INTERVAL_MS) {
      throw new RangeError(`interval of ${job.kind} must be at least 1 s, got ${String(job.intervalMs)} ms`);
    }
    kinds.add(job.kind);
  }
  const shortest = Math.min(...periodic.map((job) => job.intervalMs));
  const tickMs = options.tickMs ?? Math.min(60_000, Math.max(1000, Math.floor(shortest / 4)));
  const jobs = new JobRepository(knex);
  let timer: NodeJS.Timeout | null = null;
  let inFlight: Promise<unknown> = Promise.resolve();
  let stopped = false;

  async function tick(): Promise<number> {
    if (periodic.length === 0) return 0;
    const clock = await knex.raw<{ rows: Array<{ now_ms: string | number }> }>(
      `SELECT floor(extract(epoch FROM now()) * 1000)::bigint AS now_ms`,
    );
    const nowMs = Number(clock.rows[0]?.now_ms);
    const repositories: Array<{ id: string }> = await knex('repositories').whereNull('deleted_at').select('id').orderBy('id');
    const inputs = periodic.flatMap((job) => {
      const bucket = Math.floor(nowMs / job.intervalMs);
      return repositories.map((repository) => {
        const triggerEventId = scheduledTriggerId(job.kind, repository.id, bucket);
        return {
          kind: job.kind,
          subjectId: repository.id,
          triggerEventId,
          triggerPosition: 0,
          repositoryId: repository.id,
          correlationId: triggerEventId,
          maxAttempts: options.maxAttempts,
        };
      });
    });
    const results = await jobs.enqueueMany(inputs, { skipWhilePending: true });
    const woken = new Set(inputs.filter((_, index) => results[index].inserted).map((input) => input.kind));
    const inserted = results.filter((result) => result.inserted).length;
    if (woken.size > 0) {
      log.debug({ kinds: [...woken], inserted }, 'scheduled jobs enqueued');
      options.onEnqueued?.([...woken]);
    }
    return inserted;
  }

  function guardedTick(): Promise<void> {
    const run = inFlight.then(() => (stopped ? 0 : inBackground(tick)));
    inFlight = run.catch(() => undefined);
    return run.then(
      () => undefined,
      (error: unknown) => log.warn({ err: error }, 'scheduling periodic jobs failed; next tick tries again'),
    );
  }

  return {
    tick,
    async start() {
      if (timer || stopped) return;
      timer = setInterval(() => void guardedTick(), tickMs);
      timer.unref();
      await guardedTick();
    },
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      timer = null;
      await inFlight;
    },
  };
}
