import type { RecordedEvent } from '../eventstore/envelope.js';

/** One job of the spec's job kinds (`retrieve_source`, `source_decomposition`, ...). */
export type JobState = 'queued' | 'running' | 'succeeded' | 'failed' | 'dead';

export interface Job {
  id: string;
  kind: string;
  repositoryId: string | null;
  /** What the job works on, e.g. a source id. */
  subjectId: string;
  /** The event that triggered the job; (kind, subjectId, triggerEventId) is unique. */
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
  /** The trigger event as stored. */
  readonly trigger: RecordedEvent;
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
  run(context: JobContext): Promise<void>;
}

/** Errors a stage throws to say a retry cannot help (bad URL, 404, unsupported content). */
export class PermanentJobError extends Error {
  override readonly name = 'PermanentJobError';
}
