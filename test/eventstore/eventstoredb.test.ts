import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import { EventStoreDBClient, jsonEvent, MaxAppendSizeExceededError } from '@eventstore/db-client';
import type { NewEvent, RecordedEvent } from '../../src/eventstore/envelope.js';
import { AppendTooLargeError, ConcurrencyError, type EventStore } from '../../src/eventstore/port.js';
import { isPermanentError } from '../../src/pipeline/types.js';
import { createEventStoreDbStore, EventStoreDbSubscription } from '../../src/eventstore/eventstoredb.js';
import { copyEvents } from '../../src/eventstore/copy.js';
import { eventStorePortContract, metadata, openMemoryPglite, openStore, testSchemas, thing, waitUntil, type ContractStore } from './contract.js';
import { DEFAULT_MAX_APPEND_SIZE, startFakeEventStoreDb } from './fake-esdb/server.js';

/**
 * The EventStoreDB adapter against the fake gRPC server (test/eventstore/fake-esdb), or against a
 * real KurrentDB / EventStoreDB when FACTLOG_EVENTSTOREDB_URL is set (e.g.
 * `esdb://localhost:2113?tls=false`): then no fake server starts, and every subtest works in its
 * own slice of the shared log (see scopedToSubtest).
 */
const realServerUrl = process.env.FACTLOG_EVENTSTOREDB_URL;

/** A server for one subtest: the real one, or a fresh fake. */
async function openServer(t: Test): Promise<string> {
  if (realServerUrl) return realServerUrl;
  const fake = await startFakeEventStoreDb();
  t.teardown(() => fake.close());
  return fake.connectionString;
}

function other(value: number): NewEvent {
  return { type: 'OtherHappened', data: { value }, metadata };
}

let sliceCounter = 0;

/**
 * A view of the store that looks like a fresh, empty one on a server that is not: stream names
 * get a prefix unique to this subtest, and the log starts after the head at opening time. Only
 * the names and the starting point change; every call goes through the adapter unchanged.
 */
async function scopedToSubtest(store: EventStore): Promise<EventStore> {
  const prefix = `t${Date.now().toString(36)}${(sliceCounter += 1)}.`;
  const baseline = await store.headPosition();
  const outside = (streamId: string) => streamId.slice(prefix.length);
  const unprefixed = (event: RecordedEvent): RecordedEvent => ({ ...event, streamId: outside(event.streamId) });
  const ours = (events: RecordedEvent[]) => events.filter((event) => event.streamId.startsWith(prefix)).map(unprefixed);
  // Out-of-range values pass unchanged so the adapter's own checks answer them.
  const from = (after: number | undefined) => (after !== undefined && (!Number.isInteger(after) || after < 0) ? after : Math.max(after ?? 0, baseline));
  return {
    async append(streamId, events, expected) {
      try {
        const result = await store.append(streamId === '' ? '' : prefix + streamId, events, expected);
        return { ...result, events: result.events.map(unprefixed) };
      } catch (error) {
        if (error instanceof ConcurrencyError) throw new ConcurrencyError(streamId, error.expected, error.actual);
        throw error;
      }
    },
    readStream: async (streamId, options) => (await store.readStream(prefix + streamId, options)).map(unprefixed),
    async readStreams(streamIds, options) {
      const after = options?.after && Object.fromEntries(Object.entries(options.after).map(([streamId, version]) => [prefix + streamId, version]));
      const read = await store.readStreams(streamIds.map((streamId) => prefix + streamId), { ...options, ...(after ? { after } : {}) });
      return new Map([...read].map(([streamId, events]) => [outside(streamId), events.map(unprefixed)]));
    },
    async appendToStreams(appends) {
      const outcomes = await store.appendToStreams(appends.map((part) => ({ ...part, streamId: part.streamId === '' ? '' : prefix + part.streamId })));
      return outcomes.map((outcome) =>
        outcome.conflict
          ? { streamId: outside(outcome.streamId), conflict: new ConcurrencyError(outside(outcome.streamId), outcome.conflict.expected, outcome.conflict.actual) }
          : { streamId: outside(outcome.streamId), result: { ...outcome.result, events: outcome.result.events.map(unprefixed) } },
      );
    },
    readAll: async (options = {}) =>
      ours(
        await store.readAll({
          ...options,
          after: from(options.after),
          streamId: options.streamId === undefined ? undefined : prefix + options.streamId,
        }),
      ),
    headPosition: async () => {
      const head = await store.headPosition();
      return head <= baseline ? 0 : head;
    },
    subscribe: (options) =>
      store.subscribe({ ...options, after: from(options.after) as number, handler: (batch) => options.handler(ours(batch)) }),
    close: () => store.close(),
  };
}

/** The port contract's store: a fresh fake server per subtest, or a slice of the real server. */
async function openContractStore(connectionString: string | null): Promise<ContractStore> {
  const fake = connectionString === null && !realServerUrl ? await startFakeEventStoreDb() : null;
  const store = createEventStoreDbStore({ connectionString: fake?.connectionString ?? connectionString ?? realServerUrl!, schemas: testSchemas() });
  const view = fake ? store : await scopedToSubtest(store);
  return {
    store: view,
    close: async () => {
      await store.close();
      await fake?.close();
    },
  };
}

if (realServerUrl) {
  t.test('port contract on the real server, one slice of its log per subtest', async (t) => {
    eventStorePortContract(t, { open: () => openContractStore(realServerUrl), eventIdScope: 'stream' });
  });
} else {
  t.test('port contract, a fresh fake server per subtest', async (t) => {
    eventStorePortContract(t, { open: () => openContractStore(null), eventIdScope: 'stream' });
  });
  t.test('port contract on one shared fake server, one slice per subtest (the path a real server takes)', async (t) => {
    const fake = await startFakeEventStoreDb();
    t.teardown(() => fake.close());
    eventStorePortContract(t, { open: () => openContractStore(fake.connectionString), eventIdScope: 'stream' });
  });
  t.test('appends through the Append call of a server without BatchAppend', async (t) => {
    const fake = await startFakeEventStoreDb({ batchAppend: false });
    t.teardown(() => fake.close());
    const store = createEventStoreDbStore({ connectionString: fake.connectionString, schemas: testSchemas() });
    t.teardown(() => store.close());
    const first = await store.append('plain-1', [thing('a'), thing('b')], 'no_stream');
    t.same(first.events.map((event) => event.streamVersion), [0, 1]);
    t.match(await t.rejects(store.append('plain-1', [thing('c')], 0), ConcurrencyError), { expected: 0, actual: 1 });
    t.match(await t.rejects(store.append('plain-2', [thing('c')], 'stream_exists'), ConcurrencyError), { actual: 'no_stream' });
    const eventId = randomUUID();
    await store.append('plain-1', [{ ...thing('c'), eventId }], 1);
    t.match(await t.rejects(store.append('plain-1', [{ ...thing('c'), eventId }], 1), ConcurrencyError), { actual: 2 }, 'a retry loses');
    t.same((await store.readStream('plain-1')).map((event) => event.data.name), ['a', 'b', 'c']);
  });

  for (const batchAppend of [true, false]) {
    const call = batchAppend ? 'BatchAppend' : 'Append';
    t.test(`the server refuses an append over its maximum append size (${call}), as a real one does`, async (t) => {
      const fake = await startFakeEventStoreDb({ batchAppend, maxAppendSize: 1000 });
      t.teardown(() => fake.close());
      const client = EventStoreDBClient.connectionString(fake.connectionString);
      t.teardown(() => client.dispose());
      // Without metadata an event counts its JSON data plus two bytes per character of its type.
      const sized = (bytes: number) => jsonEvent({ type: 'Sized', data: { pad: 'x'.repeat(bytes - 2 * 'Sized'.length - '{"pad":""}'.length) } });
      await client.appendToStream('sized-1', [sized(400), sized(600)]);
      t.equal(fake.log.stream('sized-1')?.length, 2, 'exactly the limit is stored');
      const refused: unknown = await client.appendToStream('sized-2', [sized(400), sized(601)]).then(
        () => null,
        (error: unknown) => error,
      );
      t.ok(refused instanceof MaxAppendSizeExceededError, 'one byte more: the client throws MaxAppendSizeExceededError');
      t.match(refused, { type: 'maximum-append-size-exceeded', maxAppendSize: 1000 }, 'with the limit from the answer');
      t.equal(fake.log.stream('sized-2'), undefined, 'one byte more: nothing of the append is stored');
    });

    t.test(`the adapter turns the refusal into a permanent AppendTooLargeError naming size and limit (${call})`, async (t) => {
      const fake = await startFakeEventStoreDb({ batchAppend });
      t.teardown(() => fake.close());
      const store = createEventStoreDbStore({ connectionString: fake.connectionString, schemas: testSchemas() });
      t.teardown(() => store.close());
      // Three events of 400 KB: each fits, together they are over the default 1 MiB.
      const large = (name: string) => thing(name, { note: 'n'.repeat(400_000) });
      const error = await t.rejects(store.append('large-1', [large('a'), large('b'), large('c')], 'no_stream'), AppendTooLargeError);
      const size = (error as AppendTooLargeError).size;
      t.ok(size > DEFAULT_MAX_APPEND_SIZE && size < 1_300_000, `the size as the server counts it (${size})`);
      t.match(error, { streamId: 'large-1', limit: DEFAULT_MAX_APPEND_SIZE, permanent: true });
      t.match((error as Error).message, new RegExp(`${size} bytes.*maximum append size is ${DEFAULT_MAX_APPEND_SIZE} bytes.*MaxAppendSize`));
      t.ok(isPermanentError(error), 'the pipeline does not retry it');
      t.same(await store.readStream('large-1'), [], 'nothing stored');
      const stored = await store.append('large-1', [large('a'), large('b')], 'no_stream');
      t.equal(stored.events.length, 2, 'what fits is stored');
    });
  }
}

/** A store on a server for one subtest, with a raw client beside it to see what the server holds. */
async function openAdapter(t: Test, searchWindow?: number) {
  const connectionString = await openServer(t);
  const store = createEventStoreDbStore({ connectionString, schemas: testSchemas(), searchWindow });
  const client = EventStoreDBClient.connectionString(connectionString);
  const run = `r${randomUUID().slice(0, 8)}`; // unique stream names, so a real server's earlier runs do not matter
  t.teardown(async () => {
    await store.close();
    await client.dispose();
  });
  const writeSystemEvents = async (count: number) => {
    const events = Array.from({ length: count }, () => jsonEvent({ type: '$statsCollected', data: { run } }));
    await client.appendToStream(`$stats-${run}`, events);
  };
  return { store, client, run, writeSystemEvents };
}

t.test('events are stored as EventStoreDB events: type, JSON data, envelope in metadata, ids kept', async (t) => {
  const { store, client, run } = await openAdapter(t);
  const eventId = randomUUID();
  const causationId = randomUUID();
  const [stored] = (
    await store.append(
      `source-${run}`,
      [{ ...thing('a'), eventId, schemaVersion: 3, metadata: { repositoryId: 'repo-9', actor: 'system:fetch', causationId, correlationId: 'corr-9' } }],
      'no_stream',
    )
  ).events;
  const raw: Array<{ id: string; type: string; isJson: boolean; data: unknown; metadata: unknown; revision: bigint; position?: { commit: bigint } }> = [];
  for await (const resolved of client.readStream(`source-${run}`)) if (resolved.event) raw.push(resolved.event);
  t.equal(raw.length, 1);
  t.equal(raw[0].id, eventId, 'the event id is the port event id');
  t.equal(raw[0].type, 'ThingHappened');
  t.equal(raw[0].isJson, true);
  t.same(raw[0].data, { name: 'a', count: 1, tags: [], note: null, detail: null });
  t.same(raw[0].metadata, {
    repositoryId: 'repo-9',
    actor: 'system:fetch',
    causationId,
    correlationId: 'corr-9',
    schemaVersion: 3,
    $correlationId: 'corr-9',
    $causationId: causationId,
  });
  t.equal(raw[0].revision, 0n, 'stream version = revision');
  t.equal(raw[0].position?.commit, BigInt(stored.globalPosition), 'global position = commit position');
});

t.test('a write by another client makes a stale append a ConcurrencyError', async (t) => {
  const { store, client, run } = await openAdapter(t);
  const streamId = `fact-${run}`;
  const { nextExpectedVersion } = await store.append(streamId, [thing('a')], 'no_stream');
  await client.appendToStream(streamId, jsonEvent({ type: 'ThingHappened', data: { name: 'elsewhere', count: 1 }, metadata: { actor: 'other' } }));
  const conflict = await t.rejects(store.append(streamId, [thing('b')], nextExpectedVersion), ConcurrencyError);
  t.match(conflict, { streamId, expected: 0, actual: 1 });
  const conflictNew = await t.rejects(store.append(streamId, [thing('b')], 'no_stream'), ConcurrencyError);
  t.match(conflictNew, { expected: 'no_stream', actual: 1 });
  t.same((await store.readStream(streamId)).map((event) => event.actor), ['user-1', 'other']);
});

t.test('system events are not part of the log: readAll, headPosition and subscriptions skip them', async (t) => {
  const { store, client, run, writeSystemEvents } = await openAdapter(t);
  const baseline = await store.headPosition();
  const first = await store.append(`thing-${run}`, [thing('a')], 'no_stream');
  await writeSystemEvents(5);
  // A user-typed event in a system stream is still a system stream's event.
  await client.appendToStream(`$system-${run}`, jsonEvent({ type: 'ThingHappened', data: { name: 'hidden', count: 1 } }));
  t.equal(await store.headPosition(), first.lastPosition, 'the head is the last user event, not the system events after it');
  const second = await store.append(`thing-${run}`, [thing('b')], 0);
  await writeSystemEvents(3);
  const seen = await store.readAll({ after: baseline });
  t.same(seen.map((event) => event.data.name), ['a', 'b']);
  t.same(await store.readAll({ after: first.lastPosition, limit: 1 }), second.events, 'after and limit count user events only');
  const delivered: RecordedEvent[] = [];
  const subscription = store.subscribe({ after: baseline, handler: async (batch) => void delivered.push(...batch) });
  t.teardown(() => subscription.stop());
  await subscription.caughtUp();
  t.same(delivered.map((event) => event.data.name), ['a', 'b']);
});

t.test('readAll filters on the server: types, a stream; repository on the client', async (t) => {
  const { store, run, writeSystemEvents } = await openAdapter(t, 8);
  const baseline = await store.headPosition();
  const stream = `mixed-${run}`;
  const written = (await store.append(stream, [thing('a'), ...Array.from({ length: 40 }, (_, n) => other(n)), thing('b')], 'no_stream')).events;
  await writeSystemEvents(20);
  await store.append(`elsewhere-${run}`, [{ ...thing('c'), metadata: { ...metadata, repositoryId: 'repo-2' } }], 'no_stream');
  t.same((await store.readAll({ after: baseline, types: ['ThingHappened'] })).map((event) => event.data.name), ['a', 'b', 'c']);
  t.same((await store.readAll({ after: baseline, types: ['ThingHappened'], limit: 2 })).map((event) => event.data.name), ['a', 'b'], 'a long stretch of other types between two matches');
  t.same((await store.readAll({ after: baseline, streamId: stream, types: ['ThingHappened'] })).map((event) => event.data.name), ['a', 'b']);
  t.same((await store.readAll({ after: baseline, repositoryId: 'repo-2' })).map((event) => event.data.name), ['c']);
  t.same(
    (await store.readAll({ after: written[0].globalPosition, streamId: stream, limit: 3 })).map((event) => event.streamVersion),
    [1, 2, 3],
    'a stream from a position, in pages',
  );
});

t.test('a subscription keeps checkpointing through filtered stretches', async (t) => {
  const searchWindow = 16;
  const { store, run, writeSystemEvents } = await openAdapter(t, searchWindow);
  const baseline = await store.headPosition();
  const stream = `stretch-${run}`;
  await store.append(stream, [thing('first')], 'no_stream');
  const stretch = await store.append(stream, Array.from({ length: 100 }, (_, n) => other(n)), 0);
  await writeSystemEvents(50);

  const delivered: RecordedEvent[] = [];
  const subscription = store.subscribe({ after: baseline, types: ['ThingHappened'], handler: async (batch) => void delivered.push(...batch) });
  t.teardown(() => subscription.stop());
  t.ok(subscription instanceof EventStoreDbSubscription);
  const scanned = () => (subscription as EventStoreDbSubscription).scannedPosition;
  await subscription.caughtUp();
  t.same(delivered.map((event) => event.data.name), ['first']);
  await waitUntil(() => scanned() >= stretch.lastPosition, 10_000, 'catch-up checkpoints past the filtered stretch');
  t.ok(scanned() >= stretch.lastPosition, 'after catching up, the position is past the stretch it did not deliver');

  // Live: filtered events only move the position through checkpoints.
  const liveStretch = await store.append(stream, Array.from({ length: 3 * searchWindow }, (_, n) => other(1000 + n)), 100);
  const liveMiddle = liveStretch.events[2 * searchWindow - 1].globalPosition;
  await waitUntil(() => scanned() >= liveMiddle, 10_000, 'live checkpoints through filtered events');
  t.same(delivered.length, 1, 'nothing delivered from the stretch');
  const before = scanned();
  await writeSystemEvents(3 * searchWindow);
  await waitUntil(() => scanned() > before, 10_000, 'live checkpoints through system events');
  await subscription.caughtUp();
  const last = await store.append(stream, [thing('last')], 148);
  await waitUntil(() => delivered.length === 2, 10_000, 'the next match');
  t.equal(delivered[1].globalPosition, last.lastPosition);
  t.equal(scanned(), last.lastPosition);

  // Resuming from the stretch's middle position delivers only what follows.
  const resumed: RecordedEvent[] = [];
  const fromMiddle = store.subscribe({ after: stretch.events[50].globalPosition, types: ['ThingHappened'], handler: async (batch) => void resumed.push(...batch) });
  await fromMiddle.caughtUp();
  t.same(resumed.map((event) => event.data.name), ['last']);
  await fromMiddle.stop();
});

t.test('copy a log from PGlite to EventStoreDB and back: equal logs, re-runs are harmless', async (t) => {
  const source = await openStore(openMemoryPglite);
  t.teardown(() => source.close());
  const { store: esdb, run } = await openAdapter(t);
  const streams = [`repository-${run}`, `source-${run}`, `fact-${run}`];
  // Interleaved streams, batches of several sizes, envelope fields of every kind.
  for (let round = 0; round < 6; round += 1) {
    for (const [index, streamId] of streams.entries()) {
      const events = Array.from({ length: 1 + ((round + index) % 3) }, (_, n) => ({
        ...thing(`${streamId}-${round}-${n}`, { tags: [String(round)] }),
        schemaVersion: 1 + (n % 2),
        metadata: { repositoryId: index === 0 ? null : 'repo-1', actor: `user-${round}`, causationId: randomUUID(), correlationId: `corr-${round}` },
      }));
      await source.store.append(streamId, events, 'any');
    }
  }
  await source.store.append(`other-${run}`, [other(1), other(2)], 'no_stream');
  const sourceLog = await source.store.readAll({ limit: 10_000 });

  // An interrupted copy: the target already holds the start of one stream.
  await esdb.append(streams[0], [toNew(sourceLog[0])], 'no_stream');
  const progress: number[] = [];
  const baseline = 0;
  const first = await copyEvents(source.store, esdb, { pageSize: 7, onProgress: (step) => progress.push(step.copied + step.skipped) });
  t.equal(first.copied + first.skipped, sourceLog.length);
  t.equal(first.skipped, 1, 'the event already there is skipped');
  t.ok(progress.length > 1 && progress.every((count, index) => index === 0 || count > progress[index - 1]), 'progress reported per page');
  const ours = (events: RecordedEvent[]) => events.filter((event) => event.streamId.endsWith(run));
  const copied = ours(await esdb.readAll({ after: baseline, limit: 100_000 }));
  t.same(comparable(copied), comparable(sourceLog), 'the EventStoreDB log equals the source, in global order');

  const again = await copyEvents(source.store, esdb);
  t.same({ copied: again.copied, skipped: again.skipped }, { copied: 0, skipped: sourceLog.length }, 'a second run copies nothing');

  const back = await openStore(openMemoryPglite);
  t.teardown(() => back.close());
  const restored = await copyEvents(esdb, back.store, { pageSize: 5 });
  t.ok(restored.copied >= sourceLog.length);
  t.same(comparable(ours(await back.store.readAll({ limit: 100_000 }))), comparable(sourceLog), 'and back to PostgreSQL, equal again');

  // Diverged logs are refused, not merged.
  const diverged = await openStore(openMemoryPglite);
  t.teardown(() => diverged.close());
  await diverged.store.append(streams[1], [thing('not the same')], 'no_stream');
  await t.rejects(copyEvents(source.store, diverged.store), /cannot copy .*the target holds/);
});

function toNew(event: RecordedEvent): NewEvent {
  const { repositoryId, actor, causationId, correlationId } = event;
  return { type: event.type, data: event.data, schemaVersion: event.schemaVersion, eventId: event.eventId, metadata: { repositoryId, actor, causationId, correlationId } };
}

/** Everything a copy keeps: all but the store-assigned global position and recording time. */
function comparable(events: readonly RecordedEvent[]) {
  return events.map(({ globalPosition: _position, occurredAt: _occurredAt, ...kept }) => kept);
}
