import { coalescer, takeBounded } from '../db/coalesce.js';
import type { NewEvent, RecordedEvent } from './envelope.js';
import type { AppendResult, EventStore, ExpectedVersion, ReadStreamOptions } from './port.js';

interface AppendCall {
  streamId: string;
  events: readonly NewEvent[];
  expected: ExpectedVersion;
  resolve(result: AppendResult): void;
  reject(error: unknown): void;
}

interface ReadCall {
  streamId: string;
  resolve(events: RecordedEvent[]): void;
  reject(error: unknown): void;
}

/**
 * Bounds of one batch: a statement of many calls holds PGlite's one connection, and a request
 * that arrives meanwhile waits for it to end. A summary pass's hundred concepts, each appending
 * slices, would otherwise go as one append of hundreds of events.
 */
const MAX_EVENTS_PER_APPEND = 64;
const MAX_STREAMS_PER_READ = 64;

/**
 * The event store with its single-stream calls sent together (src/db/coalesce.ts): the `append`s
 * that arrive while one of their priority level is out go next as one `appendToStreams`, and
 * whole-stream `readStream`s as one `readStreams`. Each caller gets what its own call would have
 * given: its stream's result, or the ConcurrencyError of a version that did not hold. A batch
 * that fails as a whole (an invalid event of one caller) is sent again call by call, so the
 * error reaches only the caller it belongs to.
 *
 * For a one-connection database (PGlite), where the pipeline's jobs queue their statements for
 * the connection: N jobs at one step then cost a statement, not N (docs/performance.md, "Twelfth
 * round").
 */
export function coalescingEventStore(store: EventStore): EventStore {
  const appendOne = (call: AppendCall): Promise<void> => store.append(call.streamId, call.events, call.expected).then(call.resolve, call.reject);

  const queueAppend = coalescer<AppendCall>(
    async (batch) => {
      if (batch.length === 1) return appendOne(batch[0]);
      let outcomes;
      try {
        outcomes = await store.appendToStreams(batch.map(({ streamId, events, expected }) => ({ streamId, events, expected })));
      } catch {
        for (const call of batch) await appendOne(call);
        return;
      }
      for (const [index, call] of batch.entries()) {
        const outcome = outcomes[index];
        if (outcome.result) call.resolve(outcome.result);
        else call.reject(outcome.conflict);
      }
    },
    // appendToStreams takes a stream once per call; a batch of at most MAX_EVENTS_PER_APPEND events.
    takeBounded({ keyOf: ({ streamId }) => streamId, weightOf: ({ events }) => Math.max(1, events.length), maxWeight: MAX_EVENTS_PER_APPEND }),
  );

  const queueRead = coalescer<ReadCall>(
    async (batch) => {
      const streams = await store.readStreams([...new Set(batch.map(({ streamId }) => streamId))]);
      // Each caller its own array: callers of one stream must not see what another changes in it.
      for (const call of batch) call.resolve([...(streams.get(call.streamId) ?? [])]);
    },
    takeBounded({ maxWeight: MAX_STREAMS_PER_READ }),
  );

  return {
    ...store,
    // Bound: an adapter's methods may use `this`.
    readStreams: store.readStreams.bind(store),
    appendToStreams: store.appendToStreams.bind(store),
    readAll: store.readAll.bind(store),
    headPosition: store.headPosition.bind(store),
    ...(store.recentHeadPosition ? { recentHeadPosition: store.recentHeadPosition.bind(store) } : {}),
    subscribe: store.subscribe.bind(store),
    close: store.close.bind(store),
    append(streamId, events, expected) {
      return new Promise<AppendResult>((resolve, reject) => queueAppend({ streamId, events, expected, resolve, reject }));
    },
    readStream(streamId: string, options?: ReadStreamOptions) {
      // Only whole streams go together; a read from a version or of a few events goes as asked.
      if (typeof streamId !== 'string' || options?.fromVersion !== undefined || options?.limit !== undefined) return store.readStream(streamId, options);
      return new Promise<RecordedEvent[]>((resolve, reject) => queueRead({ streamId, resolve, reject }));
    },
  };
}
