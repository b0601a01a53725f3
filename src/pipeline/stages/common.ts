import { sourceDecider } from '../../domain/source/decider.js';
import { handleCommand } from '../../eventstore/commandHandler.js';
import { parseStreamName, type EventMetadata, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import { PermanentJobError, type JobContext } from '../types.js';

/** Source stages work on the source whose stream the trigger event belongs to. */
export function sourceSubject(event: RecordedEvent): string | null {
  const { category, id } = parseStreamName(event.streamId);
  return category === 'source' && id ? id : null;
}

/** Metadata of events a job appends: the stage is the actor, the trigger the cause. */
export function stageMetadata(context: JobContext): EventMetadata {
  return {
    repositoryId: context.trigger.repositoryId,
    actor: context.actor,
    causationId: context.trigger.eventId,
    correlationId: context.trigger.correlationId ?? context.trigger.eventId,
  };
}

/** Providers mark errors a retry cannot fix with `permanent: true`. */
export function isPermanent(error: unknown): boolean {
  return (
    error instanceof PermanentJobError ||
    (typeof error === 'object' && error !== null && (error as { permanent?: unknown }).permanent === true)
  );
}

/** Records on the source that a stage gave up, so its status shows `failed` with the reason. */
export async function failSource(
  store: EventStore,
  stream: string,
  stage: string,
  error: unknown,
  metadata: EventMetadata,
): Promise<void> {
  const reason = error instanceof Error ? error.message : String(error);
  await handleCommand(store, stream, sourceDecider, { type: 'FailSource', stage, reason: reason.slice(0, 2000) }, metadata);
}

/**
 * Runs a source stage's work. A failure a retry cannot fix, or one on the job's last attempt,
 * is recorded on the source (status `failed`) and ends the job as failed; any other failure is
 * rethrown for the runtime to retry with backoff.
 */
export async function recordingSourceFailure(
  context: JobContext,
  options: { store: EventStore; stream: string; stage: string; maxAttempts: number },
  work: () => Promise<void>,
): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (!isPermanent(error) && context.job.attempts < options.maxAttempts) throw error;
    await failSource(options.store, options.stream, options.stage, error, stageMetadata(context));
    throw error instanceof PermanentJobError ? error : new PermanentJobError(error instanceof Error ? error.message : String(error));
  }
}
