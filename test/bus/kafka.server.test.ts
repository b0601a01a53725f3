import { openScratchPostgres } from '../../src/db/database.js';
import t, { type Test } from 'tap';
import { decodeEvent } from '../../src/bus/avro.js';
import {
  createKafkaBus,
  createKafkaRelay,
  deadLetterTopic,
  isCategoryTopic,
  produceBatches,
  readRelayPosition,
  streamTopic,
  TOPIC_MAX_MESSAGE_BYTES,
  validateKafkaOptions,
  type KafkaOptions,
} from '../../src/bus/kafka.js';
import type { NewEvent, RecordedEvent } from '../../src/eventstore/envelope.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { metadata, openStore, testSchemas, thing, waitUntil } from '../eventstore/contract.js';
import kafkajs from 'kafkajs';
import { deleteTestTopics, ensureBroker, lastPosition, perStreamOrderProblems, rawKafka, readTopic, recordingLogger, testKafkaOptions } from './helpers.js';

const other = (value: number, repositoryId: string | null = 'repo-1'): NewEvent => ({
  type: 'OtherHappened',
  data: { value },
  metadata: { ...metadata, repositoryId },
});

async function fixture(t: Test) {
  const brokers = await ensureBroker();
  const store = await openStore(() => openScratchPostgres(), { pollIntervalMs: 10 });
  const prefixes: string[] = [];
  t.teardown(async () => {
    await store.close();
    for (const prefix of prefixes) await deleteTestTopics(brokers, prefix);
  });
  /** Options with a fresh topic prefix whose topics are deleted after the test. */
  const kafkaOptions = (overrides: Partial<KafkaOptions>): KafkaOptions => {
    const options = testKafkaOptions(brokers, overrides);
    prefixes.push(options.topicPrefix);
    return options;
  };
  return { brokers, kafkaOptions, ...store };
}

/** Appends `count` events spread round-robin over `streams` thing streams; returns the stored events. */
async function appendThings(store: Awaited<ReturnType<typeof fixture>>['store'], streams: number, count: number, label = 'e'): Promise<RecordedEvent[]> {
  const stored: RecordedEvent[] = [];
  for (let index = 0; index < count; index += 1) {
    const result = await store.append(`thing-${index % streams}`, [thing(`${label}${index}`, { count: index })], 'any');
    stored.push(...result.events);
  }
  return stored;
}

t.test('relay: every event, keyed by stream id, per-stream order, envelope headers, topics with the configured partitions', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 3 });
  const things = await appendThings(store, 6, 24);
  const others = [
    ...(await store.append('other-1', [other(1), other(2)], 'no_stream')).events,
    ...(await store.append('other-2', [other(3, null)], 'no_stream')).events,
  ];
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log });
  t.teardown(() => relay.stop());
  const started = Date.now();
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  t.comment(`relayed ${things.length + others.length} events in ${Date.now() - started} ms`);
  t.equal(relay.position(), await lastPosition(db.knex));
  t.equal(await readRelayPosition(db.knex, `kafka:${kafka.topicPrefix}`), await lastPosition(db.knex), 'position stored');

  const admin = rawKafka(brokers).admin();
  await admin.connect();
  t.teardown(() => admin.disconnect());
  const thingsTopic = `${kafka.topicPrefix}.things`;
  const othersTopic = `${kafka.topicPrefix}.others`;
  const metadataOf = await admin.fetchTopicMetadata({ topics: [thingsTopic, othersTopic, deadLetterTopic(kafka.topicPrefix)] });
  for (const topic of metadataOf.topics) {
    t.equal(topic.partitions.length, 3, `${topic.name} has 3 partitions`);
    t.ok(topic.partitions.every((partition) => partition.replicas.length === 1), `${topic.name} has replication factor 1`);
  }

  const messages = await readTopic(brokers, thingsTopic);
  t.equal(messages.length, things.length, 'every thing event once');
  const storedById = new Map(things.map((event) => [event.eventId, event]));
  const partitionOfStream = new Map<string, number>();
  for (const message of messages) {
    const decoded = decodeEvent(schemas, message.raw);
    t.strictSame(decoded, storedById.get(decoded.eventId), `event ${decoded.streamId}@${decoded.streamVersion} as stored`);
    t.equal(message.key, decoded.streamId, 'keyed by stream id');
    t.equal(message.headers['schema-fingerprint'], schemas.fingerprint('ThingHappened'));
    const partition = partitionOfStream.get(decoded.streamId) ?? message.partition;
    t.equal(message.partition, partition, `${decoded.streamId} stays on one partition`);
    partitionOfStream.set(decoded.streamId, partition);
  }
  t.ok(new Set(partitionOfStream.values()).size > 1, 'streams spread over partitions');
  const inOffsetOrder = messages.map((message) => decodeEvent(schemas, message.raw));
  t.strictSame(perStreamOrderProblems(inOffsetOrder), [], 'stream versions ascend within each partition');
  t.equal(new Set(inOffsetOrder.map((event) => `${event.streamId}@${event.streamVersion}`)).size, inOffsetOrder.length);

  const otherMessages = await readTopic(brokers, othersTopic);
  t.strictSame(
    otherMessages.map((message) => decodeEvent(schemas, message.raw)).sort((a, b) => a.globalPosition - b.globalPosition),
    others,
  );
  const systemEvent = otherMessages.find((message) => message.key === 'other-2');
  t.notOk(systemEvent && 'repository-id' in systemEvent.headers, 'a null repository id is an absent header');
  t.ok(log.entries.some((entry) => entry.message === 'kafka topics created'), 'topic creation is logged');
});

t.test('relay restart resumes from the stored position: duplicates at most, nothing lost, order kept', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 2 });
  const first = await appendThings(store, 5, 30, 'first');
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, batchSize: 7 });
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  await relay.stop();
  t.equal(relay.position(), 30);

  // A crash after producing a batch and before storing its position leaves the position behind.
  const name = `kafka:${kafka.topicPrefix}`;
  await db.knex('bus_relay_positions').where({ name }).update({ position: 10 });
  const second = await appendThings(store, 5, 20, 'second');

  const restarted = createKafkaRelay({ store, db, registry: schemas, kafka, batchSize: 7 });
  t.teardown(() => restarted.stop());
  await restarted.start();
  const live = await appendThings(store, 5, 5, 'live');
  await restarted.caughtUp({ position: await lastPosition(db.knex) });
  t.equal(await readRelayPosition(db.knex, name), 55);

  const messages = await readTopic(brokers, `${kafka.topicPrefix}.things`);
  const delivered = messages.map((message) => decodeEvent(schemas, message.raw));
  const counts = new Map<string, number>();
  for (const event of delivered) counts.set(event.eventId, (counts.get(event.eventId) ?? 0) + 1);
  const all = [...first, ...second, ...live];
  t.equal(all.filter((event) => !counts.has(event.eventId)).length, 0, 'every event id is on the topic');
  t.strictSame(
    first.slice(0, 10).map((event) => counts.get(event.eventId)),
    Array(10).fill(1),
    'events before the stored position are published once',
  );
  t.strictSame(
    first.slice(10).map((event) => counts.get(event.eventId)),
    Array(20).fill(2),
    'events after the stored position are published again (duplicates consumers absorb)',
  );
  t.ok([...second, ...live].every((event) => counts.get(event.eventId) === 1), 'new events once');
  t.strictSame(perStreamOrderProblems(delivered), [], 'per-stream order kept (a replay repeats, never skips)');
});

t.test('relay retries after a failure and resumes from its stored position', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 1 });
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log, retryBaseMs: 50 });
  t.teardown(() => relay.stop());
  const before = await appendThings(store, 2, 4, 'before');
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  // Storing the position fails from now on: each batch is published but not acknowledged.
  await db.knex.raw(`CREATE FUNCTION refuse_position() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'position store unavailable'; END $$`);
  await db.knex.raw('CREATE TRIGGER refuse_position BEFORE INSERT OR UPDATE ON bus_relay_positions FOR EACH ROW EXECUTE FUNCTION refuse_position()');
  const after = await appendThings(store, 2, 3, 'after');
  const failed = () => log.entries.filter((entry) => entry.level === 'warn' && entry.message.startsWith('kafka relay failed')).length;
  const deadline = Date.now() + 10_000;
  while (failed() < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  t.ok(failed() >= 2, 'the failure is logged and retried');
  t.equal(await readRelayPosition(db.knex, `kafka:${kafka.topicPrefix}`), 4, 'the position stays at the last acknowledged batch');
  await db.knex.raw('DROP TRIGGER refuse_position ON bus_relay_positions');
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  t.equal(await readRelayPosition(db.knex, `kafka:${kafka.topicPrefix}`), 7, 'position stored once it could be');
  const delivered = (await readTopic(brokers, `${kafka.topicPrefix}.things`)).map((message) => decodeEvent(schemas, message.raw));
  const ids = new Set(delivered.map((event) => event.eventId));
  t.ok([...before, ...after].every((event) => ids.has(event.eventId)), 'every event published');
  t.ok(delivered.length > 7, `${delivered.length} messages for 7 events: each retry published the unacknowledged batch again`);
  t.strictSame(perStreamOrderProblems(delivered), []);
});

t.test('an event the relay cannot encode goes to the dead-letter topic and the relay goes on', async (t) => {
  const { brokers, kafkaOptions, store, db } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 1 });
  // The relay's registry lacks OtherHappened (as after a schema was removed by mistake).
  const relayRegistry = new EventSchemaRegistry();
  relayRegistry.register('ThingHappened', testSchemas().typeFor('ThingHappened').schema());
  await store.append('thing-1', [thing('a')], 'no_stream');
  await store.append('other-1', [other(5)], 'no_stream');
  await store.append('thing-1', [thing('b')], 0);
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: relayRegistry, kafka, log });
  t.teardown(() => relay.stop());
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex) });
  const dead = await readTopic(brokers, deadLetterTopic(kafka.topicPrefix));
  t.equal(dead.length, 1);
  t.equal(dead[0].headers['dead-letter-failure'], 'unencodable-event');
  t.match(dead[0].headers['dead-letter-reason'], /relay could not encode: .*no schema is registered/);
  t.equal(dead[0].headers['event-type'], 'OtherHappened');
  t.match(JSON.parse(String(dead[0].value)), { streamId: 'other-1', data: { value: 5 } }, 'the event is kept as JSON');
  const things = await readTopic(brokers, `${kafka.topicPrefix}.things`);
  t.same(things.map((message) => message.key), ['thing-1', 'thing-1'], 'the events around it are published');
  t.ok(log.entries.some((entry) => entry.level === 'error' && /cannot encode/.test(entry.message)));
});

t.test('bad options are refused before anything connects', async (t) => {
  const good: KafkaOptions = { brokers: ['127.0.0.1:19092'], clientId: 'c', topicPrefix: 'p', partitions: 1, replicationFactor: 1 };
  t.doesNotThrow(() => validateKafkaOptions(good));
  t.throws(() => validateKafkaOptions({ ...good, brokers: [] }), /at least one host:port/);
  t.throws(() => validateKafkaOptions({ ...good, brokers: ['localhost'] }), /is not host:port/);
  t.throws(() => validateKafkaOptions({ ...good, clientId: ' ' }), /clientId/);
  t.throws(() => validateKafkaOptions({ ...good, topicPrefix: 'has space' }), /topicPrefix/);
  t.throws(() => validateKafkaOptions({ ...good, topicPrefix: '' }), /topicPrefix/);
  t.throws(() => validateKafkaOptions({ ...good, partitions: 0 }), /partitions must be an integer >= 1/);
  t.throws(() => validateKafkaOptions({ ...good, replicationFactor: 1.5 }), /replicationFactor/);
  t.throws(() => validateKafkaOptions({ ...good, topicConfig: { 'max.message.bytes': '64MB' } }), /max.message.bytes must be a positive integer/);
  const registry = new EventSchemaRegistry();
  // Options are checked before the store or database is touched, so empty stand-ins do.
  const fakeDeps = { store: {} as never, db: {} as never, registry };
  t.throws(() => createKafkaRelay({ ...fakeDeps, kafka: { ...good, partitions: -1 } }), /partitions/);
  t.throws(() => createKafkaRelay({ ...fakeDeps, kafka: good, batchSize: 0 }), /batchSize/);
  t.throws(() => createKafkaBus({ registry, kafka: good, consumer: { heartbeatIntervalMs: 10_000, sessionTimeoutMs: 6_000 } }), /below sessionTimeoutMs/);
  t.throws(() => createKafkaBus({ registry, kafka: good, consumer: { batchSize: 0 } }), /batchSize/);
  t.throws(() => createKafkaBus({ registry, kafka: good, categories: ['bad!'] }), /no usable topic category/);

  t.equal(streamTopic('factlog', 'source-123'), 'factlog.sources');
  t.throws(() => streamTopic('factlog', 'weird.name-1'), /no usable topic category/);
  t.ok(isCategoryTopic('factlog', 'factlog.facts'));
  t.notOk(isCategoryTopic('factlog', 'factlog.dead-letter'), 'dead letters are not a category');
  t.notOk(isCategoryTopic('factlog', 'factlog.staging.facts'), "a longer prefix's topics are not ours");
  t.notOk(isCategoryTopic('factlog', 'other.facts'));
});

/** A ThingHappened whose note holds `bytes` characters: an event as large as a FactsEmbedded of a large model. */
const large = (label: string, bytes: number) => thing(label, { note: 'x'.repeat(bytes) });

async function topicConfig(brokers: string[], topic: string): Promise<Map<string, string>> {
  const admin = rawKafka(brokers).admin();
  await admin.connect();
  try {
    const described = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: kafkajs.ConfigResourceTypes.TOPIC, name: topic }] });
    return new Map(described.resources[0].configEntries.map((entry) => [entry.configName, entry.configValue]));
  } finally {
    await admin.disconnect();
  }
}

/**
 * What a relay run logged that says it failed: anything the relay itself warned of (a failure, a
 * refusal), and kafkajs's warnings that name a size. kafkajs's own transient warnings (a new
 * topic's leader not elected yet, a connection retried under a loaded CI) are retried and say
 * nothing of the relay; compared with [] so that a failure shows the entries.
 */
function relayFailures(log: ReturnType<typeof recordingLogger>) {
  return log.entries.filter(
    (entry) => (entry.level === 'warn' || entry.level === 'error') && (entry.details.kafka === undefined || /too large|larger than|MESSAGE_TOO_LARGE/i.test(JSON.stringify(entry))),
  );
}

t.test('relay: an event of several MB is published on the topics it creates, whose max.message.bytes it sets', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 2 });
  const before = (await store.append('thing-1', [thing('small-before')], 'no_stream')).events;
  const big = (await store.append('thing-2', [large('big', 5 * 1024 * 1024)], 'no_stream')).events;
  const after = (await store.append('thing-1', [thing('small-after')], 0)).events;
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log });
  t.teardown(() => relay.stop());
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex), timeoutMs: 20_000 });
  const topic = `${kafka.topicPrefix}.things`;
  t.equal((await topicConfig(brokers, topic)).get('max.message.bytes'), String(TOPIC_MAX_MESSAGE_BYTES), 'created with the bound');
  t.equal((await topicConfig(brokers, deadLetterTopic(kafka.topicPrefix))).get('max.message.bytes'), String(TOPIC_MAX_MESSAGE_BYTES));
  const delivered = (await readTopic(brokers, topic)).map((message) => decodeEvent(schemas, message.raw));
  t.strictSame(
    delivered.sort((a, b) => a.globalPosition - b.globalPosition),
    [...before, ...big, ...after],
    'the large event and the ones after it are published, decoded as stored',
  );
  t.same(relayFailures(log), [], 'no failure logged');
});

t.test('relay: a topic created before with the broker default is raised to the bound, keeping its other settings', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  const kafka = kafkaOptions({ partitions: 1 });
  const topic = `${kafka.topicPrefix}.things`;
  const admin = rawKafka(brokers).admin();
  await admin.connect();
  t.teardown(() => admin.disconnect());
  // As an earlier version of the service made it (and an operator then set its retention).
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 1, replicationFactor: 1, configEntries: [{ name: 'retention.ms', value: '86400000' }] }] });
  t.equal((await topicConfig(brokers, topic)).get('max.message.bytes'), '1048588', 'the broker default before');
  const big = (await store.append('thing-1', [large('big', 3 * 1024 * 1024)], 'no_stream')).events;
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log });
  t.teardown(() => relay.stop());
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex), timeoutMs: 20_000 });
  const config = await topicConfig(brokers, topic);
  t.equal(config.get('max.message.bytes'), String(TOPIC_MAX_MESSAGE_BYTES), 'raised');
  t.equal(config.get('retention.ms'), '86400000', "the topic's other setting is kept");
  t.ok(log.entries.some((entry) => entry.message === 'kafka topic max.message.bytes raised' && entry.details.topic === topic));
  const delivered = (await readTopic(brokers, topic)).map((message) => decodeEvent(schemas, message.raw));
  t.strictSame(delivered, big);
});

t.test('relay: an event still refused as too large is logged with its size and topic, retried, never skipped', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  // The operator chose a bound below the event: the broker refuses it.
  const kafka = kafkaOptions({ partitions: 1, topicConfig: { 'max.message.bytes': String(1024 * 1024) } });
  const big = (await store.append('thing-1', [large('big', 2 * 1024 * 1024)], 'no_stream')).events;
  await store.append('thing-1', [thing('after')], 0);
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log, retryBaseMs: 50, retryMaxMs: 100 });
  t.teardown(() => relay.stop());
  await relay.start();
  const refusals = () => log.entries.filter((entry) => entry.level === 'error' && entry.message.startsWith('kafka refused an event as too large'));
  await waitUntil(() => refusals().length >= 2, 20_000, 'two refusals logged');
  const [refusal] = refusals();
  t.equal(refusal.details.topic, `${kafka.topicPrefix}.things`);
  t.equal(refusal.details.eventId, big[0].eventId);
  t.ok(Number(refusal.details.bytes) > 2 * 1024 * 1024, `the size is logged (${String(refusal.details.bytes)})`);
  t.equal(refusal.details.maxMessageBytes, 1024 * 1024, "the topic's limit is logged");
  t.equal(await readRelayPosition(db.knex, `kafka:${kafka.topicPrefix}`), 0, 'not skipped: the position stays before it');
  t.equal((await readTopic(brokers, `${kafka.topicPrefix}.things`)).length, 0, 'nothing after it is published');
});

t.test('relay: small events past 1 MB together on one partition of a 1 MB topic are sent in several requests', async (t) => {
  const { brokers, kafkaOptions, store, db, schemas } = await fixture(t);
  // kafkajs makes a partition's messages one record batch, which max.message.bytes bounds whole.
  const kafka = kafkaOptions({ partitions: 1, topicConfig: { 'max.message.bytes': String(1024 * 1024) } });
  const stored: RecordedEvent[] = [];
  for (let index = 0; index < 300; index += 1) stored.push(...(await store.append(`thing-${index % 5}`, [large(`e${index}`, 8 * 1024)], 'any')).events);
  const log = recordingLogger();
  const relay = createKafkaRelay({ store, db, registry: schemas, kafka, log, batchSize: 500 });
  t.teardown(() => relay.stop());
  await relay.start();
  await relay.caughtUp({ position: await lastPosition(db.knex), timeoutMs: 20_000 });
  const delivered = (await readTopic(brokers, `${kafka.topicPrefix}.things`)).map((message) => decodeEvent(schemas, message.raw));
  t.strictSame(delivered.map((event) => event.eventId), stored.map((event) => event.eventId), 'all 300 (2.4 MB) once, in order');
  t.same(relayFailures(log), [], 'nothing refused');
});

t.test('relay batches are cut by bytes: each produce request stays under the bound', (t) => {
  const message = (bytes: number) => ({ topic: 't', message: { key: 'k', value: Buffer.alloc(bytes) } });
  const sizes = (batches: ReturnType<typeof produceBatches>) => batches.map((batch) => batch.length);
  t.strictSame(sizes(produceBatches([message(10), message(10), message(10)], 1_000)), [3], 'small ones together');
  t.strictSame(sizes(produceBatches([message(400), message(400), message(400)], 1_000)), [2, 1], 'cut before passing the bound');
  t.strictSame(sizes(produceBatches([message(10), message(5_000), message(10)], 1_000)), [1, 1, 1], 'a larger one alone');
  t.strictSame(produceBatches([], 1_000), []);
  t.end();
});
