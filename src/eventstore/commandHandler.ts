import type { Decider } from '../domain/decider.js';
import type { DomainEvent } from '../domain/event.js';
import type { EventMetadata, RecordedEvent } from './envelope.js';
import { ConcurrencyError, type EventStore } from './port.js';
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

/**
 * Runs a command against a stream: read, fold, decide, append with the read version as the
 * expected version. `retries` re-runs the whole cycle after a lost race (API commands), while
 * pipeline stages pass 0 and let the ConcurrencyError mark the job done by its twin.
 */
export async function handleCommand<State, Command, Event extends DomainEvent>(
  store: EventStore,
  streamId: string,
  decider: Decider<State, Command, Event>,
  command: Command,
  metadata: EventMetadata,
  options: { retries?: number } = {},
): Promise<CommandResult<State>> {
  const retries = options.retries ?? 3;
  for (let attempt = 0; ; attempt++) {
    const loaded = await loadState(store, streamId, decider);
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

/** A stream's events read already (readStream, readStreams) folded into the decider's state. */
export function foldStream<State, Event extends DomainEvent>(
  events: RecordedEvent[],
  decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
): LoadedStream<State> {
  let state = decider.initialState();
  // The stream holds the decider's own events; the store returns them as untyped recorded envelopes.
  for (const event of events) state = decider.evolve(state, event as unknown as Event);
  return { events, state, version: events.length === 0 ? null : events[events.length - 1].streamVersion };
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
