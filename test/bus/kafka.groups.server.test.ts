import { randomUUID } from 'node:crypto';
import { openScratchPostgres } from '../../src/db/database.js';
import t, { type Test } from 'tap';
import { encodeEvent } from '../../src/bus/avro.js';
import { createKafkaBus, createKafkaRelay, deadLetterTopic, type KafkaBusConsumer, type KafkaOptions } from '../../src/bus/kafka.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { metadata, openStore, thing, waitUntil } from '../eventstore/contract.js';
import {
  deferred,
  deleteTestTopics,
  ensureBroker,
  lastPosition,
  perStreamOrderProblems,
  quickConsumer,
  rawKafka,
  readTopic,
  recordingLogger,
  testKafkaOptions,
} from './helpers.js';

type StoreFixture = Awaited<ReturnType<typeof openStore>>;

/** A store, a relay to fresh topics, and a bus over them (categories: thing streams only). */
async function fixture(t: Test, overrides: Partial<KafkaOptions> = {}, consumer = {}) {
  const brokers = await ensureBroker();
  const storeFixture = await openStore(() => openScratchPostgres(), { pollIntervalMs: 10 });
  const kafka = testKafkaOptions(brokers, overrides);
  const relay = createKafkaRelay({ store: storeFixture.store, db: storeFixture.db, registry: storeFixture.schemas, kafka });
  const log = recordingLogger();
  const bus = createKafkaBus({ kafka, registry: storeFixture.schemas, log, categories: ['thing'], consumer: { ...quickConsumer, ...consumer } });
  const admin = rawKafka(brokers).admin();
  await admin.connect();
  t.teardown(async () => {
    await bus.close();
    await relay.stop();
    await admin.deleteGroups(groups).catch(() => undefined);
    await admin.disconnect();
    await storeFixture.close();
    await deleteTestTopics(brokers, kafka.topicPrefix);
  });
  const topic = `${kafka.topicPrefix}.things`;
  const groups: string[] = [];
  /** A fresh group name, deleted from the broker after the test. */
  const newGroup = (): string => {
    const group = `g-${randomUUID()}`;
    groups.push(group);
    return group;
  };
  /** Sum of the group's committed offsets on the things topic (-1 when none: nothing committed). */
  const committed = async (group: string): Promise<number> => {
    const [offsets] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    return offsets.partitions.reduce((sum, partition) => sum + Math.max(0, Number(partition.offset)), 0);
  };
  return { brokers, kafka, relay, bus, log, admin, topic, committed, newGroup, ...storeFixture };
}

async function appendThings(store: StoreFixture['store'], streams: number, count: number, label: string): Promise<RecordedEvent[]> {
  const stored: RecordedEvent[] = [];
  for (let index = 0; index < count; index += 1) {
    stored.push(...(await store.append(`thing-${index % streams}`, [thing(`${label}${index}`)], 'any')).events);
  }
  return stored;
}

function partitionsOf(consumer: KafkaBusConsumer): number[] {
  return consumer.assignment().flatMap((entry) => entry.partitions);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

t.test('two consumers of a group split the partitions and together see every event exactly once', async (t) => {
  const { store, db, relay, bus, committed, newGroup } = await fixture(t, { partitions: 4 });
  const group = newGroup();
  const seen: Array<{ member: string; event: RecordedEvent }> = [];
  const member = (name: string) =>
    bus.consume({
      group,
      types: ['ThingHappened'],
      handler: async (batch) => {
        for (const event of batch) seen.push({ member: name, event });
      },
    });
  const first = await member('first');
  t.equal(first.topics().length, 1, 'subscribed to the one category topic');
  const second = await member('second');
  await waitUntil(
    () => {
      const a = partitionsOf(first);
      const b = partitionsOf(second);
      return a.length > 0 && b.length > 0 && new Set([...a, ...b]).size === 4 && a.length + b.length === 4;
    },
    20_000,
    'the group to settle with two members',
  );
  t.comment(`assignment: first ${partitionsOf(first).join(',')}; second ${partitionsOf(second).join(',')}`);

  const stored = await appendThings(store, 12, 60, 'e');
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  await waitUntil(() => seen.length >= stored.length, 20_000, 'every event delivered');
  t.equal(await pollUntil(() => committed(group), (value) => value === stored.length), stored.length, 'offsets committed to the end');
  await sleep(300); // a duplicate would show up by now
  t.equal(seen.length, stored.length, 'no event twice');
  t.strictSame(new Set(seen.map((entry) => entry.event.eventId)), new Set(stored.map((event) => event.eventId)), 'every event once');
  const byMember = (name: string) => seen.filter((entry) => entry.member === name).length;
  t.ok(byMember('first') > 0 && byMember('second') > 0, `both members worked (${byMember('first')} + ${byMember('second')})`);
  const streamsOf = (name: string) => new Set(seen.filter((entry) => entry.member === name).map((entry) => entry.event.streamId));
  t.strictSame([...streamsOf('first')].filter((stream) => streamsOf('second').has(stream)), [], 'a stream belongs to one member');
  t.strictSame(perStreamOrderProblems(seen.map((entry) => entry.event)), []);
});

t.test('a handler that throws gets the batch again; nothing is committed until it succeeds', async (t) => {
  const { store, db, relay, bus, committed, log, newGroup } = await fixture(t, { partitions: 1 });
  const stored = await appendThings(store, 3, 10, 'e');
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  const group = newGroup();
  const deliveries: string[][] = [];
  const secondAttempt = deferred();
  const letSecondFail = deferred();
  await bus.consume({
    group,
    types: ['ThingHappened'],
    handler: async (batch) => {
      deliveries.push(batch.map((event) => event.eventId));
      if (deliveries.length === 1) throw new Error('projection write failed');
      if (deliveries.length === 2) {
        secondAttempt.resolve();
        await letSecondFail.promise;
        throw new Error('projection write failed again');
      }
    },
  });
  await secondAttempt.promise;
  t.equal(await committed(group), 0, 'no offset committed after a failed batch');
  letSecondFail.resolve();
  await waitUntil(() => deliveries.flat().length >= 3 * stored.length, 20_000, 'the batch to succeed');
  t.equal(await pollUntil(() => committed(group), (value) => value === stored.length), stored.length, 'committed after success');
  t.strictSame(deliveries[1], deliveries[0], 'the same batch came again');
  t.strictSame(deliveries[2], deliveries[0], 'and again until it succeeded');
  t.strictSame(deliveries[0], stored.map((event) => event.eventId), 'the batch is the partition in order');
  t.ok(log.entries.some((entry) => /eachBatch/.test(entry.message)), 'the failure reached the log');
});

t.test('a rebalance during consumption (a second member joins mid-run) loses nothing', async (t) => {
  const { store, db, relay, bus, committed, newGroup } = await fixture(t, { partitions: 4 }, { batchSize: 5 });
  const initial = await appendThings(store, 20, 200, 'before');
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  const group = newGroup();
  const deliveries: Array<{ member: string; event: RecordedEvent }> = [];
  const member = (name: string) =>
    bus.consume({
      group,
      types: ['ThingHappened'],
      handler: async (batch) => {
        await sleep(40); // a slow projection: the run is still going when the second member joins
        for (const event of batch) deliveries.push({ member: name, event });
      },
    });
  await member('first');
  await waitUntil(() => deliveries.length >= 30, 20_000, 'the first member to be under way');
  const second = await member('second');
  const during = await appendThings(store, 20, 60, 'during');
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  const all = [...initial, ...during];
  const ids = new Set(all.map((event) => event.eventId));
  await waitUntil(() => new Set(deliveries.map((entry) => entry.event.eventId)).size === ids.size, 60_000, 'every event delivered');
  t.equal(await pollUntil(() => committed(group), (value) => value === all.length, 20_000), all.length, 'offsets committed to the end');
  const delivered = new Set(deliveries.map((entry) => entry.event.eventId));
  t.equal([...ids].filter((id) => !delivered.has(id)).length, 0, 'no event lost');
  t.ok(partitionsOf(second).length > 0, `the second member took partitions ${partitionsOf(second).join(',')}`);
  t.ok(deliveries.some((entry) => entry.member === 'second'), 'and consumed from them');
  t.strictSame(perStreamOrderProblems(deliveries.map((entry) => entry.event)), [], 'per-stream order kept across the handover');
  t.comment(`${deliveries.length} deliveries for ${all.length} events (${deliveries.length - all.length} redelivered by the rebalance)`);
});

t.test('poison messages go to the dead-letter topic with the reason; later messages are still delivered', async (t) => {
  const { brokers, kafka, store, db, relay, bus, topic, committed, schemas, log, newGroup } = await fixture(t, { partitions: 1 });
  await relay.start();
  const before = (await store.append('thing-1', [thing('a'), thing('b')], 'no_stream')).events;
  await relay.caughtUp({ position: await lastPosition(db.knex) });

  const producer = rawKafka(brokers).producer();
  await producer.connect();
  const template = encodeEvent(schemas, before[0]);
  await producer.send({
    topic,
    messages: [
      { key: 'thing-1', value: Buffer.from([0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff]), headers: template.headers },
      { key: 'thing-1', value: template.value, headers: { ...template.headers, 'event-type': 'NoSuchEvent' } },
      { key: 'thing-1', value: Buffer.from('no headers at all') },
    ],
  });
  await producer.disconnect();
  const after = (await store.append('thing-1', [thing('c'), thing('d')], 1)).events;
  await relay.caughtUp({ position: await lastPosition(db.knex) });

  const group = newGroup();
  const handled: RecordedEvent[] = [];
  const deadLetters: Array<{ reason: string; offset: string }> = [];
  await bus.consume({
    group,
    types: ['ThingHappened'],
    handler: async (batch) => {
      handled.push(...batch);
    },
    onDeadLetter: (reason, raw) => deadLetters.push({ reason, offset: raw.offset }),
  });
  await waitUntil(() => handled.length >= 4, 20_000, 'the good events');
  t.strictSame(handled, [...before, ...after], 'the good events, in order, around the poison');
  t.strictSame(deadLetters.map((entry) => entry.offset), ['2', '3', '4']);
  t.match(deadLetters[0].reason, /^undecodable-value: 7 bytes are not a ThingHappened/);
  t.match(deadLetters[1].reason, /^unknown-type: no schema is registered for event type NoSuchEvent/);
  t.match(deadLetters[2].reason, /^missing-header: header event-type is missing/);
  t.equal(await pollUntil(() => committed(group), (value) => value === 7), 7, 'the group moved past the poison');

  const dead = await readTopic(brokers, deadLetterTopic(kafka.topicPrefix));
  t.equal(dead.length, 3);
  t.strictSame(dead.map((message) => message.headers['dead-letter-offset']), ['2', '3', '4']);
  t.strictSame(dead.map((message) => message.headers['dead-letter-failure']), ['undecodable-value', 'unknown-type', 'missing-header']);
  for (const message of dead) {
    t.equal(message.headers['dead-letter-topic'], topic);
    t.equal(message.headers['dead-letter-partition'], '0');
    t.equal(message.headers['dead-letter-group'], group);
    t.ok(message.headers['dead-letter-reason'].length > 10, 'a reason a person can read');
    t.ok(!Number.isNaN(Date.parse(message.headers['dead-letter-at'])));
    t.equal(message.key, 'thing-1', 'the original key');
  }
  t.strictSame(dead[0].value, Buffer.from([0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff]), 'the original bytes');
  t.equal(dead[0].headers['event-id'], before[0].eventId, 'the original headers');
  t.ok(log.entries.filter((entry) => entry.message === 'kafka message dead-lettered').length === 3);
});

t.test('types filter, and a category topic created after the consumer started is picked up', async (t) => {
  const { store, db, relay, bus, newGroup } = await fixture(t, { partitions: 2 }, { topicRefreshMs: 300 });
  const received: RecordedEvent[] = [];
  const consumer = await bus.consume({
    group: newGroup(),
    types: ['OtherHappened'],
    handler: async (batch) => {
      received.push(...batch);
    },
  });
  t.equal(consumer.topics().length, 1, 'only the things topic exists yet');
  await relay.start();
  await store.append('thing-1', [thing('skipped')], 'no_stream');
  const others = (await store.append('other-1', [{ type: 'OtherHappened', data: { value: 7 }, metadata }], 'no_stream')).events;
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  await waitUntil(() => received.length >= 1, 20_000, 'the event on the new topic');
  t.equal(consumer.topics().length, 2, 'resubscribed with the new topic');
  await sleep(200);
  t.strictSame(received, others, 'only the wanted type, from the new topic');
});

t.test('a handler slower than the session timeout keeps its membership: it heartbeats while the handler runs', async (t) => {
  const { store, db, relay, bus, committed, admin, newGroup } = await fixture(t, { partitions: 1 }, { sessionTimeoutMs: 1_500, heartbeatIntervalMs: 250 });
  const stored = await appendThings(store, 2, 6, 'e');
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  const group = newGroup();
  const deliveries: RecordedEvent[] = [];
  let calls = 0;
  await bus.consume({
    group,
    types: ['ThingHappened'],
    handler: async (batch) => {
      calls += 1;
      if (calls === 1) await sleep(4_000); // well past the 1.5 s session
      deliveries.push(...batch);
    },
  });
  await waitUntil(() => deliveries.length >= stored.length, 20_000, 'the slow batch');
  t.equal(await pollUntil(() => committed(group), (value) => value === stored.length), stored.length, 'its offsets committed');
  await sleep(1_000); // an expired member would get the batch again by now
  t.equal(deliveries.length, stored.length, 'delivered once: the session did not expire');
  t.equal(calls, 1);
  const { groups } = await admin.describeGroups([group]);
  t.equal(groups[0].members.length, 1, 'still one member');
  t.equal(groups[0].state, 'Stable');
});

t.test('bad consumer options are refused', async (t) => {
  const { bus } = await fixture(t, { partitions: 1 });
  const handler = async () => undefined;
  await t.rejects(bus.consume({ group: ' ', types: ['ThingHappened'], handler }), /group must be a non-empty string/);
  await t.rejects(bus.consume({ group: 'g', types: [], handler }), /types must name at least one event type/);
  await bus.close();
  await t.rejects(bus.consume({ group: 'g', types: ['ThingHappened'], handler }), /the bus is closed/);
});

/** Calls `read` until `done(value)` or the timeout, and returns the last value. */
async function pollUntil<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(50);
  }
}

t.test('a group receives and decodes events larger than its fetch limits (1 MB a partition, 10 MB a fetch), in order', async (t) => {
  const { store, db, relay, bus, committed, newGroup } = await fixture(t, { partitions: 1 });
  const big = (label: string, bytes: number) => ({ ...thing(label), data: { name: label, count: 1, note: 'x'.repeat(bytes) } });
  const stored: RecordedEvent[] = [];
  stored.push(...(await store.append('thing-1', [thing('small-1')], 'no_stream')).events);
  stored.push(...(await store.append('thing-2', [big('five-mb', 5 * 1024 * 1024)], 'no_stream')).events);
  stored.push(...(await store.append('thing-1', [thing('small-2')], 0)).events);
  stored.push(...(await store.append('thing-3', [big('twelve-mb', 12 * 1024 * 1024)], 'no_stream')).events);
  stored.push(...(await store.append('thing-1', [thing('small-3')], 1)).events);
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex), timeoutMs: 30_000 });
  const group = newGroup();
  const seen: RecordedEvent[] = [];
  await bus.consume({ group, types: ['ThingHappened'], handler: async (batch) => void seen.push(...batch) });
  await waitUntil(() => seen.length >= stored.length, 30_000, 'every event delivered');
  t.strictSame(seen, stored, 'each event once, in order, decoded as stored');
  t.equal(await pollUntil(() => committed(group), (value) => value === stored.length), stored.length, 'committed to the end');
});
