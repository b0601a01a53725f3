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
