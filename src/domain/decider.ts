import type { DomainEvent } from './event.js';

/**
 * A decider (after Emmett): pure functions that decide which events a command produces
 * given the state folded from the stream so far. No I/O, no clocks, no randomness: anything
 * like that arrives inside the command.
 */
export interface Decider<State, Command, Event extends DomainEvent> {
  decide(command: Command, state: State): Event[];
  evolve(state: State, event: Event): State;
  initialState(): State;
}

/**
 * Fields of its events' data that a decider's `evolve` never reads, by event type: a reader that
 * only folds state may leave them out of its read (the event store's `omitData`). Typed by the
 * events, so a renamed field fails to compile here.
 */
export type UnreadData<Event extends DomainEvent> = {
  readonly [Type in Event['type']]?: ReadonlyArray<keyof Extract<Event, { type: Type }>['data'] & string>;
};

/** A rule of the domain was broken by a command; the HTTP layer maps `code` to a status. */
export class DomainError extends Error {
  override readonly name = 'DomainError';
  constructor(
    readonly code: 'not_found' | 'conflict' | 'invalid' | 'forbidden' | 'gone',
    message: string,
  ) {
    super(message);
  }
}

export function foldEvents<State, Event extends DomainEvent>(
  decider: Pick<Decider<State, unknown, Event>, 'evolve' | 'initialState'>,
  events: readonly Event[],
): State {
  return events.reduce((state, event) => decider.evolve(state, event), decider.initialState());
}
