import type { Logger } from 'pino';
import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Projection } from '../../projection/types.js';
import { createJobIntakeProjection } from '../../pipeline/intake.js';
import { createPipelineStages, stageRegistry } from '../../pipeline/registry.js';
import { createStageRuntime, type StageRuntime } from '../../pipeline/runtime.js';
import { createScheduler, type Scheduler } from '../../pipeline/scheduler.js';
import type { StageDefinition, StageDeps } from '../../pipeline/types.js';

export interface PipelineWiring {
  runtime: StageRuntime;
  /** The job-intake projection: trigger events become job rows (run it with the other projections). */
  intake: Projection;
  /** Enqueues the periodic jobs the stages declare; null where no workers run. */
  scheduler: Scheduler | null;
}

/**
 * The stages of the registry that `config` enables, the runtime that runs them, the intake that
 * feeds it, and the scheduler of their periodic jobs.
 */
export function createPipeline(options: {
  config: Config;
  db: Database;
  store: EventStore;
  deps: StageDeps;
  /** Whether this process runs workers: only workers enqueue periodic jobs. */
  runWorkers: boolean;
  log: Logger;
  registry?: readonly StageDefinition[];
}): PipelineWiring {
  const { config, log } = options;
  const { stages, periodic, kindsWithoutStage } = createPipelineStages(config, options.deps, options.registry ?? stageRegistry);
  if (kindsWithoutStage.length > 0) log.debug({ kinds: kindsWithoutStage }, 'job kinds of the spec without a stage: their jobs would not run');
  const retry = {
    maxAttempts: config.task.retry.max_attempts,
    baseDelayMs: parseDuration(config.task.retry.base_delay),
    maxDelayMs: parseDuration(config.task.retry.max_delay),
  };
  const runtime = createStageRuntime({
    db: options.db,
    store: options.store,
    stages,
    settings: {
      concurrency: config.task.queues,
      jobTimeoutMs: parseDuration(config.task.job_timeout),
      heartbeatIntervalMs: parseDuration(config.task.heartbeat_interval),
      heartbeatTimeoutMs: parseDuration(config.task.heartbeat_timeout),
      leaseMs: parseDuration(config.task.heartbeat_timeout),
      pollIntervalMs: parseDuration(config.task.poll_interval),
      idlePollIntervalMs: idlePollIntervalMs(options.db.kind, parseDuration(config.task.poll_interval)),
      retry,
      rescueOnStartup: config.task.rescue_on_startup,
    },
    log: log.child({ component: 'pipeline' }),
  });
  const wake = (kinds: readonly string[]) => kinds.forEach((kind) => runtime.wake(kind));
  const intake = createJobIntakeProjection(stages, { maxAttempts: retry.maxAttempts, afterCommit: wake });
  // The derived job ids make several workers enqueue each periodic job once.
  const scheduler = options.runWorkers
    ? createScheduler({ knex: options.db.knex, periodic, log: log.child({ component: 'scheduler' }), maxAttempts: retry.maxAttempts, onEnqueued: wake })
    : null;
  return { runtime, intake, scheduler };
}

/**
 * How long an embedded node's kind with an empty queue waits for a wake. One process owns an
 * embedded data directory and enqueues every job itself, waking the kind as it does (intake, the
 * scheduler, a retry due within this wait, rescues, `POST .../retry`), so `task.poll_interval`
 * there only made kinds without jobs ask PGlite's one connection for nothing: four such kinds
 * made 296 of a 500-page run's 1,108 claims (docs/performance.md, "Fifteenth round"). On a server
 * other processes enqueue, and idle kinds look every poll interval.
 */
const EMBEDDED_IDLE_POLL_MS = 5_000;

function idlePollIntervalMs(kind: Database['kind'], pollIntervalMs: number): number {
  return kind === 'pglite' ? Math.max(pollIntervalMs, EMBEDDED_IDLE_POLL_MS) : pollIntervalMs;
}

