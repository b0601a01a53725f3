import { foldEvents, type Decider } from './decider.js';
import type { DomainEvent } from './event.js';

/**
 * Given/when/then for deciders, in the shape of Emmett's DeciderSpecification:
 *
 *   spec(sourceDecider).given([registered]).when(startFetch).then([fetchStarted])
 *   spec(sourceDecider).given([]).when(startFetch).thenThrows(DomainError)
 *
 * `then` returns the produced events so a tap test can assert them with t.same.
 */
export function spec<State, Command, Event extends DomainEvent>(decider: Decider<State, Command, Event>) {
  return {
    given(events: readonly Event[]) {
      return {
        when(command: Command) {
          const run = (): Event[] => decider.decide(command, foldEvents(decider, events));
          return {
            /** The events the command produced. */
            events: run,
            /** Throws if the decider did not throw an error of `errorType` (and matching `check`). */
            thenThrows<E extends Error>(errorType: new (...args: never[]) => E, check?: (error: E) => boolean): E {
              try {
                const produced = run();
                throw new Error(`expected ${errorType.name}, got events ${JSON.stringify(produced)}`);
              } catch (error) {
                if (error instanceof errorType && (!check || check(error))) return error;
                throw error;
              }
            },
          };
        },
      };
    },
  };
}
