import type { Decider } from '../domain/decider.js';
import type { DomainEvent } from '../domain/event.js';
import type { EventMetadata, RecordedEvent } from './envelope.js';
import { ConcurrencyError, type EventStore, type ReadStreamsOptions } from './port.js';
import type { AppendedWrite } from '../projection/types.js';

export interface CommandResult<State> {
  /** The events the decider produced (empty when the command changed nothing). */
  events: DomainEvent[];
  /** State after the new events. */
  state: State;
  /** Global position of the last appended event, or null if nothing was appended. */
  position: number | null;
  /** Where the appended events landed, for waiting on read models; null if nothing was appended. */
  write: AppendedWrite | null;
}

/** handleCommand's options. */
export interface HandleCommandOptions {
  /** Re-runs after a lost race; default 3 (API commands). Pipeline stages pass 0 and let the ConcurrencyError mark the job done by its twin. */
  retries?: number;
  /**
   * The stream id was made just now (a random UUID): the stream has no events, so the first
   * attempt decides on the initial state without reading and appends expecting no stream. A
   * request that creates something (a source, a repository) is a chain of turns on the
   * embedded database's one connection, each waiting for the statement in flight; this is one
   * fewer. Should the stream exist after all, the append fails and the retry reads it.
   */
  newStream?: boolean;
}

/**
 * Runs a command against a stream: read, fold, decide, append with the read version as the
 * expected version (HandleCommandOptions for retries and new streams).
 */
export async function handleCommand<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  command: Command,
  metadata: EventMetadata,
  options: HandleCommandOptions = {},
): Promise<CommandResult<State>> {
  const retries = options.retries ?? 3;
  for (let attempt = 0; ; attempt++) {
    const loaded = options.newStream === true && attempt === 0 ? { state: decider.initialState(), version: null } : await loadState(store, streamId, decider);
    let state = loaded.state;
    const events = decider.decide(command, state);
    if (events.length === 0) return { events, state, position: null, write: null };
    const expected = loaded.version === null ? 'no_stream' : loaded.version;
    try {
      const result = await store.append(
        streamId,
        events.map((event) => ({ type: event.type, data: event.data, metadata })),
        expected,
      );
      for (const event of events) state = decider.evolve(state, event);
      return {
        events,
        state,
        position: result.lastPosition,
        write: { position: result.lastPosition, streamId, streamVersion: result.nextExpectedVersion, types: events.map((event) => event.type) },
      };
    } catch (error) {
      if (error instanceof ConcurrencyError && attempt < retries) continue;
      throw error;
    }
  }
}

/** A stream read once: its events, the decider's state after them and its version (null: no stream). */
export interface LoadedStream<State> {
  events: RecordedEvent[];
  state: State;
  version: number | null;
}

/** Reads a stream once and folds it, so a caller can decide and look at its events without reading again. */
export async function loadStream<State, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
): Promise<LoadedStream<State>> {
  return foldStream(await store.readStream(streamId), decider);
}

/**
 * A stream's events read already (readStream, readStreams) folded into the decider's state; with
 * `from`, the events after its version folded onto its state (FoldedStates).
 */
export function foldStream<State, Event extends DomainEvent>(
  events: RecordedEvent[],
  decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
  from?: { state: State; version: number },
): LoadedStream<State> {
  let state = from?.state ?? decider.initialState();
  // The stream holds the decider's own events; the store returns them as untyped recorded envelopes.
  for (const event of events) state = decider.evolve(state, event as unknown as Event);
  return { events, state, version: events.at(-1)?.streamVersion ?? from?.version ?? null };
}

/**
 * States folded from streams, kept so the next read of a stream reads on from the version they
 * were folded to (`readStreams`' `after`) instead of the whole stream: a concept that every page
 * touches is read whole each time otherwise, and its stream grows with every summary. Safe
 * because streams only grow and a decider's evolve is pure: the events after the version, folded
 * onto the kept state, give the state of the whole stream. The least recently read go first
 * beyond `capacity`. The returned `events` are those read now, not the whole stream.
 */
export class FoldedStates<State, Event extends DomainEvent> {
  private readonly states = new Map<string, { state: State; version: number }>();

  constructor(
    private readonly decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
    private readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
  }

  /** The streams' states now, reading only what came after the kept ones, in one readStreams. */
  async load(store: EventStore, streamIds: readonly string[], options: Omit<ReadStreamsOptions, 'after'> = {}): Promise<Map<string, LoadedStream<State>>> {
    const after: Record<string, number> = {};
    for (const streamId of streamIds) {
      const kept = this.states.get(streamId);
      if (kept) after[streamId] = kept.version;
    }
    const read = await store.readStreams(streamIds, { ...options, after });
    const loaded = new Map<string, LoadedStream<State>>();
    for (const streamId of streamIds) {
      const stream = foldStream(read.get(streamId) ?? [], this.decider, this.states.get(streamId));
      loaded.set(streamId, stream);
      // Re-inserted, so the Map's order is the order of last reading.
      this.states.delete(streamId);
      if (stream.version !== null) this.states.set(streamId, { state: stream.state, version: stream.version });
    }
    for (const oldest of this.states.keys()) {
      if (this.states.size <= this.capacity) break;
      this.states.delete(oldest);
    }
    return loaded;
  }
}

/** Folds a stream into a decider's state (for reads that must see the latest write). */
export async function loadState<State, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
): Promise<{ state: State; version: number | null }> {
  const { state, version } = await loadStream(store, streamId, decider);
  return { state, version };
}
