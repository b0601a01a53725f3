import { sourceDecider } from '../../domain/source/decider.js';
import { FoldedStates, foldStream, handleCommand, loadStream, type CommandResult, type LoadedStream } from '../../eventstore/commandHandler.js';

export { foldStream, loadStream, type LoadedStream };
import { ConcurrencyError } from '../../eventstore/port.js';
import type { Decider } from '../../domain/decider.js';
import type { DomainEvent } from '../../domain/event.js';
import { parseStreamName, streamName, type EventMetadata, type RecordedEvent, type StreamCategory } from '../../eventstore/envelope.js';
import { followMergeChains, MAX_MERGE_CHAIN } from '../../domain/mergeChain.js';
import { boundedErrorMessage, errorMessage, reboundedErrorMessage } from '../../util/errorMessage.js';
import type { EventStore, ReadStreamsOptions } from '../../eventstore/port.js';
import { isConcurrencyError } from '../runtime.js';
import { isPermanentError, PermanentJobError, type Job, type JobContext, type JobRunOutcome, type Stage } from '../types.js';

/**
 * handleCommand from a stream the stage has read already: decides on `loaded` and appends with
 * its version, saving the read. When the stream moved since (a version conflict), it runs
 * handleCommand, which reads, decides and appends again: the outcome is the one handleCommand
 * alone would have had at this moment (with `shared`, commandOnSharedStream's). Returns the
 * result and the stream as it is after it.
 */
export async function commandFrom<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  loaded: LoadedStream<State>,
  command: Command,
  metadata: EventMetadata,
  options: { retries?: number; shared?: boolean } = {},
): Promise<{ result: CommandResult<State>; after: LoadedStream<State> }> {
  const decided = decider.decide(command, loaded.state);
  if (decided.length === 0) return { result: { events: decided, state: loaded.state, position: null, write: null }, after: loaded };
  const appended = await appendDecided(store, streamId, decider, loaded, decided, metadata);
  if (appended) return appended;
  const result = options.shared
    ? await commandOnSharedStream(store, streamId, decider, command, metadata)
    : await handleCommand(store, streamId, decider, command, metadata, { retries: options.retries });
  // Read again next time: the events a twin appended are not in `loaded`.
  return { result, after: await loadStream(store, streamId, decider) };
}

/** commandOnSharedStream from a stream read already (see commandFrom); a moved stream is re-decided as there. */
export async function sharedCommandFrom<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  loaded: LoadedStream<State>,
  command: Command,
  metadata: EventMetadata,
): Promise<CommandResult<State>> {
  const decided = decider.decide(command, loaded.state);
  if (decided.length === 0) return { events: decided, state: loaded.state, position: null, write: null };
  const appended = await appendDecided(store, streamId, decider, loaded, decided, metadata);
  return appended ? appended.result : commandOnSharedStream(store, streamId, decider, command, metadata);
}

/**
 * Commands of one job on one shared stream (commandOnSharedStream), one after another, each
 * decided on the stream as the job's previous command left it: a job whose parts record on its
 * source side by side (extract_concepts' batches) reads the stream once, not once a part, and
 * its parts never lose a version race to each other. A race with another writer is re-decided
 * as commandOnSharedStream does, and the stream is read again for the next command.
 */
export class SharedStreamWriter<State, Command, Event extends DomainEvent> {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly store: EventStore,
    private readonly streamId: string,
    private readonly decider: Decider<State, Command, Event>,
    /** The stream as the job read it. */
    private known: LoadedStream<State>,
    private readonly metadata: EventMetadata,
  ) {}

  execute(command: Command): Promise<CommandResult<State>> {
    const run = this.queue.then(() => this.executeNow(command));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async executeNow(command: Command): Promise<CommandResult<State>> {
    const { result, after } = await commandFrom(this.store, this.streamId, this.decider, this.known, command, this.metadata, { shared: true });
    this.known = after;
    return result;
  }
}

/** One command of a batch for sharedCommandsFrom: a stream read already and what to do on it. */
export interface BatchCommand<State, Command> {
  streamId: string;
  /**
   * The stream as read (its state and version: a batch decides on the state alone, so a caller
   * that queues reads need not keep their events); commands on the same stream must give the same.
   */
  loaded: Pick<LoadedStream<State>, 'state' | 'version'>;
  command: Command;
  /** The metadata of this command's events, when not the batch's (commands of several jobs). */
  metadata?: EventMetadata;
}

/**
 * sharedCommandFrom for many commands at once: each is decided on its stream as read (after the
 * batch's earlier commands on the same stream), and everything decided is appended in one
 * multi-stream append, each stream at its read version. A stream that moved meanwhile (a
 * version conflict) is re-read and its commands re-decided one by one, as commandOnSharedStream
 * does, so each outcome is the one sharedCommandFrom would have had. Results come in the order
 * of `commands`; a result's state is its stream's right after its command.
 */
export async function sharedCommandsFrom<State, Command, Event extends DomainEvent>(
  store: EventStore,
  decider: Decider<State, Command, Event>,
  commands: readonly BatchCommand<State, Command>[],
  metadata: EventMetadata,
): Promise<CommandResult<State>[]> {
  const results: CommandResult<State>[] = [];
  const byStream = new Map<string, { loaded: BatchCommand<State, Command>['loaded']; state: State; events: Array<{ event: Event; metadata: EventMetadata }>; members: number[] }>();
  for (const [index, { streamId, loaded, command, metadata: own }] of commands.entries()) {
    const stream = byStream.get(streamId) ?? { loaded, state: loaded.state, events: [], members: [] };
    byStream.set(streamId, stream);
    const decided = decider.decide(command, stream.state);
    for (const event of decided) stream.state = decider.evolve(stream.state, event);
    stream.events.push(...decided.map((event) => ({ event, metadata: own ?? metadata })));
    stream.members.push(index);
    results.push({ events: decided, state: stream.state, position: null, write: null });
  }
  const writing = [...byStream].filter(([, stream]) => stream.events.length > 0);
  if (writing.length === 0) return results;
  const outcomes = await store.appendToStreams(
    writing.map(([streamId, stream]) => ({
      streamId,
      events: stream.events.map(({ event, metadata: own }) => ({ type: event.type, data: event.data, metadata: own })),
      expected: stream.loaded.version === null ? 'no_stream' : stream.loaded.version,
    })),
  );
  for (const [position, [streamId, stream]] of writing.entries()) {
    const appended = outcomes[position].result;
    if (!appended) {
      for (const index of stream.members) results[index] = await commandOnSharedStream(store, streamId, decider, commands[index].command, commands[index].metadata ?? metadata);
      continue;
    }
    for (const index of stream.members) {
      if (results[index].events.length === 0) continue;
      results[index] = {
        ...results[index],
        position: appended.lastPosition,
        write: { position: appended.lastPosition, streamId, streamVersion: appended.nextExpectedVersion, types: stream.events.map(({ event }) => event.type) },
      };
    }
  }
  return results;
}

/** Splits a runMany group by subject stream: the first job of each stream, and the repeats (for runRepeatsAlone). */
export function firstsAndRepeats(streamIds: readonly string[]): { firsts: number[]; repeats: number[] } {
  const firsts: number[] = [];
  const repeats: number[] = [];
  const seen = new Set<string>();
  for (const [index, streamId] of streamIds.entries()) {
    (seen.has(streamId) ? repeats : firsts).push(index);
    seen.add(streamId);
  }
  return { firsts, repeats };
}

/**
 * The jobs of a runMany group whose subject came earlier in the group, run alone with `run` after
 * the others (on the stream as those left it); a failure is recorded in `outcomes`.
 */
export async function runRepeatsAlone(
  stage: Pick<Stage, 'run'>,
  contexts: readonly JobContext[],
  repeats: readonly number[],
  outcomes: JobRunOutcome[],
): Promise<void> {
  for (const index of repeats) {
    try {
      await stage.run(contexts[index]);
    } catch (error) {
      outcomes[index] = { ok: false, error };
    }
  }
}

/**
 * A runMany for a stage whose jobs gain nothing from one shared plan: each job's `run` side by
 * side, a subject's repeats alone after the others. Their statements still go together where the
 * store coalesces them (the pipeline's store on PGlite, src/eventstore/coalescing.ts). Each
 * outcome is a promise of its own, so a job is recorded as soon as it ends: a page fetched in a
 * second is not held `running` for the minutes a host that never answers takes.
 */
export async function runSideBySide(stage: Pick<Stage, 'run'>, contexts: readonly JobContext[], streamIds: readonly string[]): Promise<Array<Promise<JobRunOutcome>>> {
  const ran = (index: number): Promise<JobRunOutcome> =>
    stage.run(contexts[index]).then(
      (): JobRunOutcome => ({ ok: true }),
      (error: unknown): JobRunOutcome => ({ ok: false, error }),
    );
  const outcomes: Array<Promise<JobRunOutcome>> = [];
  const { firsts, repeats } = firstsAndRepeats(streamIds);
  for (const index of firsts) outcomes[index] = ran(index);
  // A subject's repeats run alone, one after another, on the stream as the others left it (runRepeatsAlone).
  let previous: Promise<unknown> = Promise.all(firsts.map((index) => outcomes[index]));
  for (const index of repeats) previous = outcomes[index] = previous.then(() => ran(index));
  return outcomes;
}

/**
 * Concept states a stage keeps across its jobs (FoldedStates): the concepts a page mentions are
 * mostly ones read before, and a kept state is read on from its version. A state is the
 * concept's names and its slices' fact ids: kilobytes, so a few MB at most.
 */
export const FOLDED_CONCEPTS = 5_000;

/**
 * Streams of one category read in batches (one readStreams per step) and kept for one job, with
 * the job's own decisions folded in as it makes them (`set`), so its later decisions see its
 * earlier ones. `survivorOf` says where a merged aggregate's chain goes on (null: it ends here).
 */
export class StreamCache<State, Event extends DomainEvent> {
  private readonly streams = new Map<string, LoadedStream<State>>();

  constructor(
    private readonly store: EventStore,
    private readonly category: StreamCategory,
    private readonly decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
    private readonly survivorOf: (state: State) => string | null,
    /** Fields of the streams' events the decider's evolve never reads (ReadStreamsOptions). */
    private readonly readOptions: Omit<ReadStreamsOptions, 'after'> = {},
    /** States kept across jobs: a stream read before is read on from there (its `events` are then the new ones only). */
    private readonly folded: FoldedStates<State, Event> | null = null,
  ) {}

  /** Reads the streams of `ids` not read yet, all in one statement. */
  async load(ids: Iterable<string>): Promise<void> {
    const missing = [...new Set(ids)].filter((id) => !this.streams.has(id));
    if (missing.length === 0) return;
    const streamIds = missing.map((id) => streamName(this.category, id));
    if (this.folded) {
      const loaded = await this.folded.load(this.store, streamIds, this.readOptions);
      for (const [index, id] of missing.entries()) this.streams.set(id, loaded.get(streamIds[index]) as LoadedStream<State>);
      return;
    }
    const read = await this.store.readStreams(streamIds, this.readOptions);
    for (const id of missing) this.streams.set(id, foldStream(read.get(streamName(this.category, id)) ?? [], this.decider));
  }

  /** A stream loaded before. */
  get(id: string): LoadedStream<State> {
    const stream = this.streams.get(id);
    if (!stream) throw new Error(`${this.category} ${id} was not loaded`);
    return stream;
  }

  set(id: string, stream: LoadedStream<State>): void {
    this.streams.set(id, stream);
  }

  /** Where each id's merge chain ends, the chains followed together (followMergeChains): one read per step along the longest. */
  async finals(ids: readonly string[]): Promise<Map<string, { id: string; stream: LoadedStream<State> }>> {
    const starts = [...new Set(ids)];
    // MAX_MERGE_CHAIN steps, and then the last one's stream read to see that the chain ends there.
    const chains = await followMergeChains(
      starts,
      async (at) => {
        await this.load(at);
        return at.map((id) => this.survivorOf(this.get(id).state));
      },
      MAX_MERGE_CHAIN + 1,
    );
    const cut = starts.find((_, index) => !chains[index].ended);
    if (cut !== undefined) throw new Error(`merge chain of ${this.category} ${cut} is longer than ${MAX_MERGE_CHAIN}: a cycle?`);
    return new Map(starts.map((start, index) => [start, { id: chains[index].node, stream: this.get(chains[index].node) }]));
  }
}

/** Appends decided events at the loaded version; null when the stream moved since (a version conflict). */
async function appendDecided<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  loaded: LoadedStream<State>,
  decided: Event[],
  metadata: EventMetadata,
): Promise<{ result: CommandResult<State>; after: LoadedStream<State> } | null> {
  let appended;
  try {
    appended = await store.append(
      streamId,
      decided.map((event) => ({ type: event.type, data: event.data, metadata })),
      loaded.version === null ? 'no_stream' : loaded.version,
    );
  } catch (error) {
    if (error instanceof ConcurrencyError || isConcurrencyError(error)) return null;
    throw error;
  }
  let state = loaded.state;
  for (const event of decided) state = decider.evolve(state, event);
  const result: CommandResult<State> = {
    events: decided,
    state,
    position: appended.lastPosition,
    write: { position: appended.lastPosition, streamId, streamVersion: appended.nextExpectedVersion, types: decided.map((event) => event.type) },
  };
  return { result, after: { events: [...loaded.events, ...appended.events], state, version: appended.nextExpectedVersion } };
}

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

/** The repository a job works in: its trigger's, else its row's; null when neither has one. */
export function repositoryIdOf(context: JobContext): string | null {
  return context.trigger.repositoryId ?? context.job.repositoryId;
}

/** The repository a job works in; a trigger without one cannot be processed. */
export function requireRepositoryId(context: JobContext): string {
  const repositoryId = repositoryIdOf(context);
  if (!repositoryId) throw new PermanentJobError(`${context.trigger.type} ${context.trigger.eventId} carries no repository id`);
  return repositoryId;
}

/** Rejects with the signal's reason when it is aborted (between model calls and writes). */
export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('job aborted');
}

/**
 * Records on the source that a stage gave up, so its status shows `failed` with the reason: the
 * error's message, its start and its end within MAX_KEPT_ERROR_CHARS characters (boundedErrorMessage).
 */
async function failSource(
  store: EventStore,
  stream: string,
  stage: string,
  error: unknown,
  metadata: EventMetadata,
): Promise<void> {
  await handleCommand(store, stream, sourceDecider, { type: 'FailSource', stage, reason: boundedErrorMessage(error) }, metadata);
}

/**
 * Stage.onDead of a source stage: its source fails with the job's last error, as its last attempt
 * would have failed it. The error itself is gone (the attempt that died never ended; what is left
 * is the job's `last_error`, bounded already to MAX_TASK_ERROR_CHARS), so the stored text is
 * bounded again with reboundedErrorMessage: the count its marker shows is of the characters left
 * out of the original message, not of the stored text, and no marker sits inside another.
 */
export function failSourceOfDeadJob(store: EventStore, stage: string): (job: Job) => Promise<void> {
  return async (job) => {
    if (!job.sourceId) return;
    const metadata = { repositoryId: job.repositoryId, actor: `system:${stage}`, causationId: job.triggerEventId, correlationId: job.correlationId ?? job.triggerEventId };
    const reason = job.lastError === null ? 'its worker stopped during the last attempt' : reboundedErrorMessage(job.lastError);
    await handleCommand(store, streamName('source', job.sourceId), sourceDecider, { type: 'FailSource', stage, reason }, metadata);
  };
}

/**
 * The one rule for what a stage's failure ends as. A lost version race is rethrown (a twin did
 * the work: the runtime counts it as done); a failure a retry may fix, before the job's last
 * attempt, is rethrown for the runtime to retry with backoff; any other is recorded on the
 * stage's subject (`record`: a source's `failed` status, a report's failed annotation) and ends
 * the job as failed.
 */
export async function recordingFailure(context: JobContext, maxAttempts: number, record: (error: unknown) => Promise<void>, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (isConcurrencyError(error)) throw error;
    if (!isPermanentError(error) && context.job.attempts < maxAttempts) throw error;
    await record(error);
    throw error instanceof PermanentJobError ? error : new PermanentJobError(errorMessage(error));
  }
}

/** Runs a source stage's work (recordingFailure): a failure that ends the job is recorded on the source (status `failed`). */
export function recordingSourceFailure(
  context: JobContext,
  options: { store: EventStore; stream: string; stage: string; maxAttempts: number },
  work: () => Promise<void>,
): Promise<void> {
  return recordingFailure(context, options.maxAttempts, (error) => failSource(options.store, options.stream, options.stage, error, stageMetadata(context)), work);
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
