import type { EventStore } from '../eventstore/port.js';
import { ConcurrencyError } from '../eventstore/port.js';
import type { Metrics } from './metrics.js';

/** Counts appends and appended events by outcome and type, around any EventStore adapter. */
export function instrumentEventStore(store: EventStore, metrics: Pick<Metrics, 'appends' | 'appendedEvents'>): EventStore {
  return {
    ...store,
    readStream: store.readStream.bind(store),
    readStreams: store.readStreams.bind(store),
    readAll: store.readAll.bind(store),
    headPosition: store.headPosition.bind(store),
    subscribe: store.subscribe.bind(store),
    close: store.close.bind(store),
    async appendToStreams(appends) {
      const outcomes = await store.appendToStreams(appends);
      appends.forEach((part, index) => {
        const outcome = outcomes[index];
        metrics.appends.inc({ outcome: outcome?.conflict ? 'conflict' : 'ok' });
        if (outcome?.result) for (const event of part.events) metrics.appendedEvents.inc({ type: event.type });
      });
      return outcomes;
    },
    async append(streamId, events, expected) {
      try {
        const result = await store.append(streamId, events, expected);
        metrics.appends.inc({ outcome: 'ok' });
        for (const event of events) metrics.appendedEvents.inc({ type: event.type });
        return result;
      } catch (error) {
        metrics.appends.inc({ outcome: error instanceof ConcurrencyError ? 'conflict' : 'error' });
        throw error;
      }
    },
  };
}
