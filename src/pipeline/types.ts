import type { Knex } from 'knex';
import type { Config, QueuedJobKind } from '../config/types.js';
import type { NamedLocks } from '../db/namedLock.js';
import type { RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import type { DocumentExtractor } from '../providers/fetch/extractionWorkers.js';
import type { Embedder } from '../providers/embeddings/port.js';
import type { ChatModel } from '../providers/llm/port.js';
import type { SearchIndex } from '../search/port.js';
import type { AssetStore } from '../storage/assets.js';

/** One job of the spec's job kinds (`retrieve_source`, `source_decomposition`, ...). */
export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'dead';

export interface Job {
  id: string;
  kind: string;
  repositoryId: string | null;
  /** What the job works on, e.g. a source id (a repository id for scheduled jobs). */
  subjectId: string;
  /** The source the job works for (tasks API: "is this source done"); null when none. */
  sourceId: string | null;
  /** The report the job works for; null when none. */
  reportId: string | null;
  /**
   * The event that triggered the job; (kind, subjectId, triggerEventId) is unique. A scheduled
   * job has no trigger event: its id is derived from (kind, repository, interval bucket) and
   * its position is 0, which no event holds (positions are 1-based).
   */
  triggerEventId: string;
  triggerPosition: number;
  /** Correlation id of the trigger event, propagated to the events the job appends. */
  correlationId: string | null;
  state: JobState;
  attempts: number;
  lastError: string | null;
  createdAt: string;
  updatedAt: string;
}

/** What a running job can do besides its own work. */
export interface JobContext {
  readonly job: Job;
  /**
   * The trigger event as stored; for a scheduled job a synthetic `ScheduledJobDue` event on the
   * repository's stream (never appended: `scheduled` is true and its position is 0).
   */
  readonly trigger: RecordedEvent;
  /** True for a job the scheduler enqueued (no trigger event in the log). */
  readonly scheduled: boolean;
  /** Aborted when the job's timeout expires or the worker shuts down. */
  readonly signal: AbortSignal;
  /** `system:<kind>`: the actor stamped on events the job appends. */
  readonly actor: string;
  /**
   * Ends the queued jobs of this job's kind and subject whose triggers are at or before
   * `throughPosition`, without running them; returns how many. For a stage whose run does the
   * whole subject's work from the read models (summarize_concepts: every stale concept of the
   * repository): once the read models have applied everything up to a position and a run reads
   * them, the jobs of the triggers up to there have nothing left to do. Call it before reading.
   */
  coverQueued(throughPosition: number): Promise<number>;
}

/**
 * A stage consumes the events that trigger it and appends the events that record its result.
 * `run` is idempotent by construction: it decides from the subject's stream, so a second run
 * (after a crash, or a duplicate delivery) decides nothing new. A ConcurrencyError thrown by
 * `run` means a twin already did the work and counts as success.
 */
export interface Stage {
  readonly kind: string;
  readonly triggers: readonly string[];
  /** Which subject a trigger event concerns; return null to ignore the event. */
  subjectOf(event: RecordedEvent): string | null;
  /**
   * Which source a trigger event's job works for; when absent, intake takes the id of a
   * `source-` stream, else the event's `data.source_id`.
   */
  sourceOf?(event: RecordedEvent): string | null;
  run(context: JobContext): Promise<void>;
  /**
   * What a job of this stage that died leaves behind: one whose worker was killed or stopped
   * during its last attempt (src/pipeline/jobs.ts rescueOrphans) never ended that attempt itself.
   * The source stages fail their source here, as the attempt would have (recordingSourceFailure);
   * otherwise it stayed `fetching` with no task left to move it.
   */
  onDead?(job: Job): Promise<void>;
  /**
   * True when `run` uses only what the job row knows of its trigger (event id, position,
   * repository and correlation id): the runtime then gives a trigger built from the row
   * (`JOB_TRIGGER_TYPE`, no data) instead of reading the event, one statement less per job.
   */
  readonly triggerFromJob?: boolean;
  /**
   * True for a stage that derives from what the source stages made (summaries, syntheses,
   * relations): its jobs' statements wait on PGlite's one connection behind every other stage's
   * (src/db/priority.ts), so that sources are decomposed and linked first.
   */
  readonly deferred?: boolean;
  /**
   * Runs several claimed jobs of this kind as one unit of work (one read of their streams, one
   * model call, one append), when the stage can: the runtime then hands a worker up to a claim's
   * worth of jobs at once instead of one. Each job ends as `run` would have ended it: one
   * outcome per context, in order (`undefined` for done, else what `run` would have thrown).
   * An outcome may be a promise of it: that job is recorded when it settles, not when the
   * group's slowest job does (jobs run side by side, runSideBySide).
   * `signal` is aborted once every job's own signal is (shutdown, or the shared timeout).
   */
  runMany?(contexts: readonly JobContext[], signal: AbortSignal): Promise<ReadonlyArray<JobRunOutcome | Promise<JobRunOutcome>>>;
}

/** How one job of a `runMany` ended: done, or the error its `run` would have thrown. */
export type JobRunOutcome = { ok: true } | { ok: false; error: unknown };

/** The ports a stage may use, as the composition root wired them; settings come from `config`. */
export interface StageDeps {
  readonly config: Config;
  readonly store: EventStore;
  /** The read-model database (stages read projections: repository settings, concepts, host health). */
  readonly knex: Knex;
  readonly assets: AssetStore;
  readonly search: SearchIndex;
  readonly chat: ChatModel;
  /** Null when `providers.embeddings.provider` is `none`: stages that embed are then disabled. */
  readonly embedder: Embedder | null;
  /** Text, Markdown and images of a fetched or uploaded body, off the API thread in the service. */
  readonly documents: DocumentExtractor;
  /** Work that must not run beside another of the same name, in any process of the deployment. */
  readonly locks: NamedLocks;
}

/**
 * One entry of the stage registry (`src/pipeline/registry.ts`): the composition root creates the
 * stages whose `enabled` says yes, and schedules the periodic runs they declare. A stage file
 * exports its definition beside its `create...Stage` function.
 */
export interface StageDefinition {
  /** A job kind of the spec (`task.queues` has its worker count); the created stage has this kind. */
  readonly kind: QueuedJobKind;
  /** Whether this deployment runs the stage at all. */
  enabled(config: Config): boolean;
  /** Builds the stage once per process; called only when `enabled`. */
  create(deps: StageDeps): Stage;
  /** Interval of the scheduler's periodic runs (one job per repository per interval), or null: none. */
  periodicIntervalMs?(config: Config): number | null;
}

/** Whether an embedder is configured (`providers.embeddings.provider` is not `none`). */
export function embeddingsConfigured(config: Config): boolean {
  return config.providers.embeddings.provider !== 'none';
}

/** The embedder of a stage that cannot run without one; its definition is enabled only with one. */
export function requireEmbedder(deps: StageDeps, kind: QueuedJobKind): Embedder {
  if (!deps.embedder) throw new Error(`stage ${kind} needs an embedder, and providers.embeddings.provider is none`);
  return deps.embedder;
}

/** Type of the synthetic trigger a scheduled job runs with (never stored in the log). */
export const SCHEDULED_TRIGGER_TYPE = 'ScheduledJobDue';

/** Type of the trigger given to a stage that takes it from the job row (`Stage.triggerFromJob`). */
export const JOB_TRIGGER_TYPE = 'JobTrigger';

/** Data of the synthetic trigger of a scheduled job. */
export interface ScheduledTriggerData extends Record<string, unknown> {
  kind: string;
}

/** Errors a stage throws to say a retry cannot help (bad URL, 404, unsupported content). */
export class PermanentJobError extends Error {
  override readonly name = 'PermanentJobError';
}

/**
 * The one test of "a retry cannot help": a PermanentJobError, or any error a provider flagged
 * `permanent: true` (FetchError, ModelCallError, ...). By name too, not only instanceof: a second
 * copy of this module (a duplicated package) would break instanceof.
 */
export function isPermanentError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  return (error as { name?: unknown }).name === 'PermanentJobError' || (error as { permanent?: unknown }).permanent === true;
}

/**
 * How long the server behind a failure asked to be left alone (its Retry-After, delta-seconds
 * or an HTTP date, as milliseconds), when a provider put it on the error as `retryAfterMs`
 * (ModelCallError); undefined otherwise. Read by shape, as isPermanentError.
 */
export function retryAfterMsOf(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const retryAfterMs = (error as { retryAfterMs?: unknown }).retryAfterMs;
  return typeof retryAfterMs === 'number' && Number.isFinite(retryAfterMs) && retryAfterMs > 0 ? retryAfterMs : undefined;
}
