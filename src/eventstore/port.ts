import type { NewEvent, RecordedEvent } from './envelope.js';

/**
 * The EventStore port. Adapters: `postgres.ts` (PGlite and PostgreSQL server, same code)
 * and, on the distributed tier, `eventstoredb.ts`.
 *
 * Expected version semantics (as EventStoreDB and Emmett):
 * - `'no_stream'`: the stream must not exist yet;
 * - `'stream_exists'`: the stream must have at least one event;
 * - `'any'`: no check;
 * - a number: the stream's last event must have exactly this 0-based version.
 */
export type ExpectedVersion = 'no_stream' | 'stream_exists' | 'any' | number;

export interface AppendResult {
  /** Version of the last appended event: pass it as the expected version of the next append. */
  nextExpectedVersion: number;
  /** Global position of the last appended event. */
  lastPosition: number;
  /** The events as stored. */
  events: RecordedEvent[];
}

export interface ReadStreamOptions {
  /** First stream version to return (inclusive); default 0. */
  fromVersion?: number;
  /** Maximum number of events to return; default all. */
  limit?: number;
}

/** Top-level fields of `data` a reader does not need, by event type (see ReadStreamsOptions). */
export type OmittedData = Readonly<Record<string, readonly string[]>>;

export interface ReadStreamsOptions {
  /**
   * Fields left out of the `data` of events of these types, for a reader that folds state from
   * the others (a concept's decider needs a slice's fact ids, not its Markdown): the store need
   * not send them. The events are otherwise as stored; a field not present is no error.
   */
  omitData?: OmittedData;
  /**
   * For these streams, only the events after the given version: a reader that holds a state
   * folded up to it (FoldedStates) reads on from there instead of the whole stream.
   */
  after?: Readonly<Record<string, number>>;
}

/** One stream's part of a multi-stream append (`appendToStreams`). */
export interface StreamAppend {
  streamId: string;
  events: readonly NewEvent[];
  expected: ExpectedVersion;
}

/**
 * How one stream's part of a multi-stream append ended: appended (`result`, as `append` returns
 * it), or refused because its expected version did not hold (`conflict`, the error `append`
 * would have thrown).
 */
export type StreamAppendOutcome =
  | { streamId: string; result: AppendResult; conflict?: undefined }
  | { streamId: string; result?: undefined; conflict: ConcurrencyError };

export interface ReadAllOptions {
  /** Return events with globalPosition strictly greater than this; default 0 (from the start). */
  after?: number;
  /** Maximum number of events to return; default 1000. */
  limit?: number;
  /** Only these event types. */
  types?: readonly string[];
  /** Only events of this repository. */
  repositoryId?: string;
  /** Only events of this stream. */
  streamId?: string;
}

export interface SubscribeOptions {
  /** Deliver events after this global position (exclusive). */
  after: number;
  /** Events per delivered batch; default 500. */
  batchSize?: number;
  /** Only these event types (a server-side filter where the adapter can). */
  types?: readonly string[];
  /**
   * Called with each batch in order. The subscription waits for the promise before reading on,
   * so a handler that commits its checkpoint with its effects gets exactly-once effects.
   */
  handler: (batch: RecordedEvent[]) => Promise<void>;
  /** Called when the handler or a read fails; the subscription stops after it. */
  onError?: (error: unknown) => void;
}

export interface Subscription {
  /** Resolves once the subscription has stopped and no handler is running. */
  stop(): Promise<void>;
  /** Resolves when the subscription has delivered everything up to the log head known when called. */
  caughtUp(): Promise<void>;
}

export interface EventStore {
  append(streamId: string, events: readonly NewEvent[], expected: ExpectedVersion): Promise<AppendResult>;
  readStream(streamId: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /**
   * Several whole streams at once (one round trip where the adapter can): each stream's events in
   * version order, by stream id; a stream that does not exist maps to an empty list.
   */
  readStreams(streamIds: readonly string[], options?: ReadStreamsOptions): Promise<Map<string, RecordedEvent[]>>;
  /**
   * Appends to several streams at once (one round trip where the adapter can), each part with
   * its own expected version. Each stream's part is stored whole or not at all, and parts are
   * independent: a part whose expected version does not hold is refused (its outcome's
   * `conflict`) while the others are stored. Outcomes come in the order of `appends`. Every
   * event is validated first: an invalid one (or an event id given twice in the call) throws
   * InvalidEventError and nothing is stored. A stream may appear once per call.
   */
  appendToStreams(appends: readonly StreamAppend[]): Promise<StreamAppendOutcome[]>;
  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]>;
  /** Global position of the last event visible to readers (0 for an empty log). */
  headPosition(): Promise<number>;
  /**
   * Global position of the last committed event, visible to readers or not yet: on a PostgreSQL
   * server readers see an append only once every older transaction there has ended, so for a
   * while this can be ahead of headPosition. For "is all the work done" checks, which must not
   * take work that readers cannot see yet for finished. Adapters whose every committed event is
   * readable at once leave it out (headPosition is then the same).
   */
  committedHeadPosition?(): Promise<number>;
  /**
   * The head as this process last learnt it (headPosition, a subscription's reads, its own
   * appends where they are visible at once), if it read the log within `maxAgeMs`; null when it
   * has not (nothing read yet, or too long ago). Runs no statement: for answers that must not
   * wait for the database (/healthz, docs/api.md). Adapters that do not track it leave it out.
   */
  recentHeadPosition?(maxAgeMs: number): number | null;
  /** Catch-up subscription: reads from `after` to the head, then follows new appends. */
  subscribe(options: SubscribeOptions): Subscription;
  close(): Promise<void>;
}

/** Thrown when the expected version does not match; the HTTP layer maps it to 409. */
export class ConcurrencyError extends Error {
  override readonly name = 'ConcurrencyError';
  constructor(
    readonly streamId: string,
    readonly expected: ExpectedVersion,
    readonly actual: number | 'no_stream',
  ) {
    super(`stream ${streamId}: expected version ${String(expected)}, actual ${String(actual)}`);
  }
}

/** Thrown when an event does not match its type's Avro schema; nothing of the batch is stored. */
export class InvalidEventError extends Error {
  override readonly name = 'InvalidEventError';
  constructor(
    readonly eventType: string,
    message: string,
  ) {
    super(`invalid ${eventType} event: ${message}`);
  }
}

/**
 * Thrown when the store refuses an append for its size (EventStoreDB's `MaxAppendSize`); nothing
 * of it is stored. Permanent: the same append is refused again, so the pipeline's runtime does
 * not retry it (`permanent`, read by isPermanentError).
 */
export class AppendTooLargeError extends Error {
  override readonly name = 'AppendTooLargeError';
  readonly permanent = true;
  constructor(
    readonly streamId: string,
    /** The append's size as the server counts it (events' data, metadata and type), in bytes. */
    readonly size: number,
    /** The server's limit in bytes. */
    readonly limit: number,
  ) {
    super(
      `stream ${streamId}: the event store refused an append of ${size} bytes (data, metadata and type of its events) because its ` +
        `maximum append size is ${limit} bytes; nothing was stored. Record less per append (split the events over several appends), ` +
        `or raise the server's MaxAppendSize (EventStoreDB allows up to 16 MiB)`,
    );
  }
}
