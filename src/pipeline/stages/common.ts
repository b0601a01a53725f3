import { sourceDecider } from '../../domain/source/decider.js';
import { handleCommand, type CommandResult } from '../../eventstore/commandHandler.js';
import type { Decider } from '../../domain/decider.js';
import { parseStreamName, type DomainEvent, type EventMetadata, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import { isConcurrencyError } from '../runtime.js';
import { PermanentJobError, type JobContext } from '../types.js';

/** The id of the trigger's stream when it is of `category`, else null. */
export function streamSubject(category: string): (event: RecordedEvent) => string | null {
  return (event) => {
    const stream = parseStreamName(event.streamId);
    return stream.category === category && stream.id ? stream.id : null;
  };
}

/** Source stages work on the source whose stream the trigger event belongs to. */
export const sourceSubject = streamSubject('source');
/** Fact stages (cleanup_facts) work on the fact whose stream the trigger belongs to. */
export const factSubject = streamSubject('fact');
/** Concept stages (embed_concepts) work on the concept whose stream the trigger belongs to. */
export const conceptSubject = streamSubject('concept');
/** Repository-wide stages (migrate_context) work on the repository of the trigger's stream. */
export const repositorySubject = streamSubject('repository');

/**
 * Metadata of events a job appends: the stage is the actor, the trigger the cause. A scheduled
 * job has no trigger in the log, so its events name no cause; its correlation id is the job's
 * derived trigger id, shared by everything one scheduled run appends.
 */
export function stageMetadata(context: JobContext): EventMetadata {
  return {
    repositoryId: context.trigger.repositoryId,
    actor: context.actor,
    causationId: context.scheduled ? null : context.trigger.eventId,
    correlationId: context.trigger.correlationId ?? context.trigger.eventId,
  };
}

/** The repository a job works in; a trigger without one cannot be processed. */
export function requireRepositoryId(context: JobContext): string {
  const repositoryId = context.trigger.repositoryId ?? context.job.repositoryId;
  if (!repositoryId) throw new PermanentJobError(`${context.trigger.type} ${context.trigger.eventId} carries no repository id`);
  return repositoryId;
}

/** Rejects with the signal's reason when it is aborted (between model calls and writes). */
export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('job aborted');
}

/**
 * Runs `work` over `items` with at most `limit` in flight, results in input order. The first
 * failure stops new work from starting and is rethrown once the running ones settle.
 */
export async function mapWithConcurrency<Item, Result>(
  items: readonly Item[],
  limit: number,
  work: (item: Item, index: number) => Promise<Result>,
): Promise<Result[]> {
  const results = new Array<Result>(items.length);
  let next = 0;
  let failure: { error: unknown } | null = null;
  const worker = async (): Promise<void> => {
    while (failure === null && next < items.length) {
      const index = next++;
      try {
        results[index] = await work(items[index], index);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  if (failure !== null) throw (failure as { error: unknown }).error;
  return results;
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
    // A lost version race means a twin did the work: the runtime counts it as done.
    if (isConcurrencyError(error)) throw error;
    if (!isPermanent(error) && context.job.attempts < options.maxAttempts) throw error;
    await failSource(options.store, options.stream, options.stage, error, stageMetadata(context));
    throw error instanceof PermanentJobError ? error : new PermanentJobError(error instanceof Error ? error.message : String(error));
  }
}

/** A stream that other stages write too stayed contended through every re-decision. */
export class ContendedStreamError extends Error {
  override readonly name = 'ContendedStreamError';
}

/** Re-decisions after a lost race on a shared stream before the job is handed back for a retry. */
const SHARED_STREAM_RETRIES = 8;

/**
 * handleCommand on a stream other stages write too (a concept, a fact, a source's batch
 * records). The runtime counts a job that ends in a ConcurrencyError as done by a twin, which
 * is right only when the stream is the job's own result; here a lost race is another writer
 * (an alias added, an embedding recorded), so it is re-decided, and a stream still contended
 * after that fails the job with an ordinary error the runtime retries with backoff, instead of
 * silently dropping what this job had to record.
 */
export async function commandOnSharedStream<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  command: Command,
  metadata: EventMetadata,
): Promise<CommandResult<State>> {
  try {
    return await handleCommand(store, streamId, decider, command, metadata, { retries: SHARED_STREAM_RETRIES });
  } catch (error) {
    if (!isConcurrencyError(error)) throw error;
    throw new ContendedStreamError(`stream ${streamId} kept changing under ${SHARED_STREAM_RETRIES + 1} attempts: ${(error as Error).message}`, { cause: error });
  }
}
