import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Kafka, logLevel, type IHeaders, type KafkaMessage } from 'kafkajs';
import type { BusLogger } from '../../src/bus/port.js';
import type { KafkaOptions } from '../../src/bus/kafka.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { Knex } from 'knex';

const run = promisify(execFile);
const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const kafkaScript = path.join(repositoryRoot, 'scripts', 'kafka.sh');

/** Brokers the suite uses: KAFKA_BROKERS, or the broker of scripts/kafka.sh on KAFKA_PORT (19092). */
export function testBrokers(): string[] {
  const configured = process.env.KAFKA_BROKERS;
  if (configured) return configured.split(',').map((broker) => broker.trim()).filter(Boolean);
  return [`127.0.0.1:${process.env.KAFKA_PORT ?? '19092'}`];
}

let brokerReady: Promise<string[]> | null = null;

/**
 * Makes sure a broker answers: with KAFKA_BROKERS set it is used as is; otherwise
 * `scripts/kafka.sh start` runs (it returns at once when the broker is up, fetches Kafka on a
 * fresh machine, and serialises parallel callers with a lock).
 */
export function ensureBroker(): Promise<string[]> {
  brokerReady ??= (async () => {
    if (!process.env.KAFKA_BROKERS) {
      // The first run downloads Kafka from Maven Central: allow for it.
      await run('bash', [kafkaScript, 'start'], { timeout: 600_000 });
    }
    return testBrokers();
  })();
  return brokerReady;
}

/** The SASL_SSL listener of scripts/kafka.sh's broker, the CA file that signed its certificate, and its test user. */
export interface SaslSslListener {
  brokers: string[];
  caFile: string;
  username: string;
  password: string;
}

/**
 * The SASL_SSL listener of the broker ensureBroker starts (KAFKA_PORT+2, or KAFKA_SASL_SSL_PORT),
 * as scripts/kafka.sh makes it; or why there is none: KAFKA_BROKERS names another broker, or the
 * broker on KAFKA_PORT was started by a scripts/kafka.sh that made no such listener yet.
 */
export async function saslSslListener(): Promise<SaslSslListener | { absent: string }> {
  if (process.env.KAFKA_BROKERS) return { absent: 'KAFKA_BROKERS names a broker of its own; the SASL_SSL listener tested is the one scripts/kafka.sh makes' };
  await ensureBroker();
  const port = process.env.KAFKA_PORT ?? '19092';
  const saslPort = Number(process.env.KAFKA_SASL_SSL_PORT ?? Number(port) + 2);
  const cache = path.resolve(process.env.KAFKA_CACHE_DIR ?? path.join(repositoryRoot, '.cache', 'kafka'));
  const caFile = path.join(cache, `instance-${port}`, 'tls', 'ca.pem');
  const answers = await new Promise<boolean>((resolve) => {
    const socket = connect({ host: '127.0.0.1', port: saslPort }, () => (socket.destroy(), resolve(true)));
    socket.on('error', () => resolve(false));
  });
  if (!answers || !existsSync(caFile)) {
    return {
      absent:
        `the broker on 127.0.0.1:${port} has no SASL_SSL listener on 127.0.0.1:${saslPort} (or no CA file ${caFile}): it was started ` +
        'by a scripts/kafka.sh that made none; `scripts/kafka.sh stop` and `start` make one',
    };
  }
  return { brokers: [`127.0.0.1:${saslPort}`], caFile, username: process.env.KAFKA_SASL_USER ?? 'factlog', password: process.env.KAFKA_SASL_PASSWORD ?? 'factlog-test-password' };
}

/** Options with a topic prefix no other test (or earlier run) uses. */
export function testKafkaOptions(brokers: string[], overrides: Partial<KafkaOptions> = {}): KafkaOptions {
  return {
    brokers,
    clientId: 'factlog-test',
    topicPrefix: `factlog-test-${randomUUID().slice(0, 8)}`,
    partitions: 4,
    replicationFactor: 1,
    ...overrides,
  };
}

/** Deletes a test's topics (and so keeps the shared broker small across runs); errors are ignored. */
export async function deleteTestTopics(brokers: string[], topicPrefix: string): Promise<void> {
  const admin = rawKafka(brokers).admin();
  try {
    await admin.connect();
    const topics = (await admin.listTopics()).filter((topic) => topic.startsWith(`${topicPrefix}.`));
    if (topics.length > 0) await admin.deleteTopics({ topics });
  } catch {
    // Cleanup only: a leftover topic is harmless, `scripts/kafka.sh reset` removes everything.
  } finally {
    await admin.disconnect();
  }
}

/** Consumer settings that make joins and rebalances quick in tests. */
export const quickConsumer = {
  sessionTimeoutMs: 6_000,
  heartbeatIntervalMs: 300,
  rebalanceTimeoutMs: 10_000,
  topicRefreshMs: 0,
};

/** A BusLogger that keeps what it was told. */
export function recordingLogger(): BusLogger & { entries: Array<{ level: string; message: string; details: Record<string, unknown> }> } {
  const entries: Array<{ level: string; message: string; details: Record<string, unknown> }> = [];
  return {
    entries,
    info: (details, message) => entries.push({ level: 'info', message, details }),
    warn: (details, message) => entries.push({ level: 'warn', message, details }),
    error: (details, message) => entries.push({ level: 'error', message, details }),
  };
}

export function rawKafka(brokers: string[]): Kafka {
  return new Kafka({ clientId: 'factlog-test-raw', brokers, logLevel: logLevel.NOTHING });
}

export interface ReadMessage {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  value: Buffer | null;
  headers: Record<string, string>;
  raw: KafkaMessage;
}

/** Every message of `topic` up to its end offsets when called, read by a throwaway group. */
export async function readTopic(brokers: string[], topic: string, timeoutMs = 20_000): Promise<ReadMessage[]> {
  const kafka = rawKafka(brokers);
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  const remaining = new Map(
    ends.filter((end) => Number(end.high) > Number(end.low)).map((end) => [end.partition, Number(end.high)]),
  );
  const messages: ReadMessage[] = [];
  if (remaining.size === 0) {
    await admin.disconnect();
    return messages;
  }
  const groupId = `reader-${randomUUID()}`;
  const consumer = kafka.consumer({ groupId, sessionTimeout: 6_000, heartbeatInterval: 300, maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  let done: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (done = resolve));
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const high = remaining.get(partition);
      if (high === undefined) return;
      messages.push({
        topic,
        partition,
        offset: message.offset,
        key: message.key === null ? null : message.key.toString(),
        value: message.value,
        headers: headerStrings(message.headers),
        raw: message,
      });
      if (Number(message.offset) + 1 >= high) remaining.delete(partition);
      if (remaining.size === 0) done();
    },
  });
  const timer = setTimeout(done, timeoutMs);
  await finished;
  clearTimeout(timer);
  await consumer.disconnect();
  await admin.deleteGroups([groupId]).catch(() => undefined);
  await admin.disconnect();
  if (remaining.size > 0) throw new Error(`reading ${topic}: partitions ${[...remaining.keys()].join(', ')} not read to the end in ${timeoutMs} ms`);
  return messages.sort((a, b) => a.partition - b.partition || Number(a.offset) - Number(b.offset));
}

export function headerStrings(headers: IHeaders | undefined): Record<string, string> {
  const result: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (value === undefined) continue;
    const last = Array.isArray(value) ? value[value.length - 1] : value;
    result[name] = last.toString();
  }
  return result;
}

/**
 * Checks deliveries of a stream in the order they happened: a version may repeat (a redelivery)
 * but never skip ahead of the highest seen + 1. Returns the problems found (empty: order kept).
 */
export function perStreamOrderProblems(deliveries: readonly RecordedEvent[]): string[] {
  const highest = new Map<string, number>();
  const problems: string[] = [];
  for (const event of deliveries) {
    const seen = highest.get(event.streamId) ?? -1;
    if (event.streamVersion > seen + 1) problems.push(`${event.streamId}: version ${event.streamVersion} after ${seen}`);
    highest.set(event.streamId, Math.max(seen, event.streamVersion));
  }
  return problems;
}

/**
 * Position of the last event appended to the Postgres store. Not the store's head: the head hides
 * events behind any transaction in flight on the server, even in another test's database.
 */
export async function lastPosition(knex: Knex): Promise<number> {
  const result = await knex.raw('SELECT max(global_position) AS last FROM events');
  const rows = (result as { rows: Array<{ last: string | number | null }> }).rows;
  return Number(rows[0]?.last ?? 0);
}

export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((settle) => (resolve = settle));
  return { promise, resolve };
}
