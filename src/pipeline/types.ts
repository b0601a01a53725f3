import type { RecordedEvent } from '../eventstore/envelope.js';

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
}

/** Type of the synthetic trigger a scheduled job runs with (never stored in the log). */
export const SCHEDULED_TRIGGER_TYPE = 'ScheduledJobDue';

/** Data of the synthetic trigger of a scheduled job. */
export interface ScheduledTriggerData extends Record<string, unknown> {
  kind: string;
}

/** Errors a stage throws to say a retry cannot help (bad URL, 404, unsupported content). */
export class PermanentJobError extends Error {
  override readonly name = 'PermanentJobError';
}
