import kafkajs, {
  Kafka,
  Partitioners,
  logLevel as KafkaLogLevel,
  type Admin,
  type Consumer,
  type EachBatchPayload,
  type ITopicMetadata,
  type KafkaConfig,
  type KafkaMessage,
  type LogEntry,
  type Message,
  type Producer,
  type SASLOptions,
} from 'kafkajs';
import type { Knex } from 'knex';
// Node's reading of kafkajs' CommonJS exports stops before these two: take them from the module object.
const { ConfigResourceTypes, ConfigSource } = kafkajs;
import { KAFKA_SASL_LOGIN_CHOICES, KAFKA_SASL_LOGIN_MECHANISMS, type KafkaSaslLoginMechanism } from '../config/types.js';
import { type Database, migrateUnderLock } from '../db/database.js';
import { chunkedBySize } from '../util/chunked.js';
import { streamCategories, type RecordedEvent } from '../eventstore/envelope.js';
import type { EventStore, Subscription } from '../eventstore/port.js';
import type { EventSchemaRegistry } from '../eventstore/schemas.js';
import { decodeEvent, encodeEvent, EventDecodeError, eventHeaders, messageEventType } from './avro.js';
import { silentBusLogger, topicCategory, validateConsumerOptions, type Bus, type BusConsumer, type BusConsumerOptions, type BusLogger } from './port.js';
import { errorMessage } from '../util/errorMessage.js';

/** Where the distributed tier's Kafka is and how its topics are made (config `bus.kafka`). */
export interface KafkaOptions {
  /** `host:port` of one or more brokers. */
  brokers: readonly string[];
  clientId: string;
  /** Topics are `<prefix>.<category>` (e.g. `factlog.sources`) and `<prefix>.dead-letter`. */
  topicPrefix: string;
  /** Partitions of each topic the service creates: the most consumers a group can spread over. */
  partitions: number;
  /** Replicas of each partition; at most the number of brokers. */
  replicationFactor: number;
  /**
   * Topic-level configs set at creation (e.g. `{ 'retention.ms': '-1' }`); broker defaults otherwise,
   * but for `max.message.bytes`, TOPIC_MAX_MESSAGE_BYTES unless set here.
   */
  topicConfig?: Readonly<Record<string, string>>;
  /**
   * How the client retries a failed request or connection (kafkajs's `retry`): by default 5 retries
   * from 300 ms, doubling, so an unreachable broker is reported after about 12 s.
   */
  retry?: { retries: number; initialRetryTimeMs: number };
  /**
   * Connect over TLS. The broker's certificate is checked against the CAs every TLS client of the
   * process trusts by default: Node's and those of `tls.ca_file` (trustConfiguredCertificates).
   */
  tls?: boolean;
  /** SASL authentication after the connection is made; needs `tls` (config validation's rule). */
  sasl?: KafkaSasl;
}

export interface KafkaSasl {
  mechanism: KafkaSaslLoginMechanism;
  username: string;
  /** A secret: never logged (kafkajs logs only whether SASL is on). */
  password: string;
}

/**
 * `max.message.bytes` of the topics the service creates, and raises existing ones to. The broker
 * default (about 1 MB) refused a `FactsEmbedded` of 130 facts at 1,536 dimensions, and the relay
 * then stopped at it. A FactsEmbedded now holds at most 512 KiB of vectors
 * (FACTS_EMBEDDED_PART_BYTES, src/pipeline/stages/embedFacts.ts), but a log written before that
 * holds one event per source of any size, and the PostgreSQL event store sets no size of its own,
 * so the bound is what Kafka can carry: a produce request must fit the broker's
 * `socket.request.max.bytes` (100 MiB by default) with its framing; 64 MiB is a FactsEmbedded
 * of about 8,000 facts at 1,536 dimensions (750 at 16,000).
 */
export const TOPIC_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/**
 * Bytes of events one produce request of the relay carries at most (one larger event goes alone).
 * kafkajs puts a partition's messages in one record batch, which `max.message.bytes` bounds as a
 * whole: 500 events of 5 KB were refused on a 1 MB topic. Cutting well below the 100 MiB
 * `socket.request.max.bytes` also keeps a request's memory small.
 */
const PRODUCE_MAX_BYTES = 16 * 1024 * 1024;

/** Record batch framing (61 bytes and the request's own headers), left out of a request's budget. */
const BATCH_OVERHEAD_BYTES = 1024;

/** The `max.message.bytes` the service wants on its topics: the configured one, else TOPIC_MAX_MESSAGE_BYTES. */
function wantedMaxMessageBytes(options: Pick<KafkaOptions, 'topicConfig'>): number {
  const configured = options.topicConfig?.['max.message.bytes'];
  return configured === undefined ? TOPIC_MAX_MESSAGE_BYTES : Number(configured);
}

/** A message's bytes on the wire, near enough: key, value, headers and the record's framing. */
function messageBytes(message: Message): number {
  const length = (value: Buffer | string | null | undefined): number =>
    value === null || value === undefined ? 0 : typeof value === 'string' ? Buffer.byteLength(value) : value.length;
  let bytes = 64 + length(message.key) + length(message.value);
  for (const [name, value] of Object.entries(message.headers ?? {})) {
    for (const item of Array.isArray(value) ? value : [value]) bytes += Buffer.byteLength(name) + length(item as Buffer | string | undefined);
  }
  return bytes;
}

/**
 * `entries` in consecutive batches of at most `maxBytes` by messageBytes (an entry larger than
 * that alone in its batch), as bulkBatches cuts OpenSearch bulk requests.
 */
export function produceBatches<T extends { message: Message }>(entries: readonly T[], maxBytes: number): T[][] {
  return chunkedBySize(entries, { maxBytes, sizeOf: (entry) => messageBytes(entry.message) });
}

/** Whether kafkajs reports the broker's MESSAGE_TOO_LARGE (a record batch past `max.message.bytes`). */
function isTooLarge(error: unknown): boolean {
  for (let cause: unknown = error, depth = 0; typeof cause === 'object' && cause !== null && depth < 5; depth++) {
    const candidate = cause as { type?: unknown; cause?: unknown; originalError?: unknown; errors?: unknown };
    if (candidate.type === 'MESSAGE_TOO_LARGE') return true;
    if (Array.isArray(candidate.errors) && candidate.errors.some((inner) => isTooLarge(inner))) return true;
    cause = candidate.originalError ?? candidate.cause;
  }
  return false;
}

/** Header names a dead letter carries besides the original message's headers. */
const deadLetterHeaders = {
  reason: 'dead-letter-reason',
  failure: 'dead-letter-failure',
  topic: 'dead-letter-topic',
  partition: 'dead-letter-partition',
  offset: 'dead-letter-offset',
  group: 'dead-letter-group',
  at: 'dead-letter-at',
} as const;

const topicPrefixPattern = /^[A-Za-z0-9._-]{1,200}$/;
const categoryPattern = /^[A-Za-z0-9_]+$/;

export function deadLetterTopic(topicPrefix: string): string {
  return `${topicPrefix}.dead-letter`;
}

/** The topic of a stream's events: `<prefix>.<topicCategory(streamId)>`. */
export function streamTopic(topicPrefix: string, streamId: string): string {
  const category = topicCategory(streamId);
  if (!categoryPattern.test(category)) {
    throw new RangeError(`stream ${JSON.stringify(streamId)} has no usable topic category (${JSON.stringify(category)})`);
  }
  return `${topicPrefix}.${category}`;
}

/** Whether `topic` is one of the prefix's category topics (not the dead letters, not a longer prefix's). */
export function isCategoryTopic(topicPrefix: string, topic: string): boolean {
  if (!topic.startsWith(`${topicPrefix}.`)) return false;
  return categoryPattern.test(topic.slice(topicPrefix.length + 1));
}

export function validateKafkaOptions(options: KafkaOptions): void {
  if (!Array.isArray(options.brokers) || options.brokers.length === 0) throw new RangeError('kafka brokers must list at least one host:port');
  for (const broker of options.brokers) {
    if (typeof broker !== 'string' || !/^[^\s:]+:\d{1,5}$/.test(broker)) {
      throw new RangeError(`kafka broker ${JSON.stringify(broker)} is not host:port`);
    }
  }
  if (typeof options.clientId !== 'string' || options.clientId.trim() === '') throw new RangeError('kafka clientId must be non-empty');
  if (typeof options.topicPrefix !== 'string' || !topicPrefixPattern.test(options.topicPrefix)) {
    throw new RangeError(`kafka topicPrefix ${JSON.stringify(options.topicPrefix)} must be 1-200 of [A-Za-z0-9._-]`);
  }
  if (!Number.isInteger(options.partitions) || options.partitions < 1) {
    throw new RangeError(`kafka partitions must be an integer >= 1, is ${String(options.partitions)}`);
  }
  if (!Number.isInteger(options.replicationFactor) || options.replicationFactor < 1) {
    throw new RangeError(`kafka replicationFactor must be an integer >= 1, is ${String(options.replicationFactor)}`);
  }
  if (options.sasl !== undefined) {
    if (!(KAFKA_SASL_LOGIN_MECHANISMS as readonly string[]).includes(options.sasl.mechanism)) {
      throw new RangeError(`kafka sasl mechanism ${JSON.stringify(options.sasl.mechanism)} must be ${KAFKA_SASL_LOGIN_CHOICES}`);
    }
    if (options.sasl.username === '' || options.sasl.password === '') throw new RangeError('kafka sasl needs a username and a password');
  }
  const maxMessageBytes = options.topicConfig?.['max.message.bytes'];
  if (maxMessageBytes !== undefined && !/^[1-9]\d{0,9}$/.test(maxMessageBytes)) {
    throw new RangeError(`kafka topicConfig max.message.bytes must be a positive integer, is ${JSON.stringify(maxMessageBytes)}`);
  }
}

/** kafkajs's notices of a group rebalancing: a heartbeat or fetch answered REBALANCE_IN_PROGRESS, the consumer rejoining. */
export function isRebalanceNotice(message: string, details: Record<string, unknown>): boolean {
  const said = `${message} ${typeof details.error === 'string' ? details.error : ''}`;
  return /\bis rebalancing\b/i.test(said);
}

/**
 * The kafkajs client configuration of `options`, the one every Kafka client of the service is made
 * with (relay, bus consumers and admin, dead letters): brokers, client id, TLS, SASL, retries.
 * `ssl: true` gives kafkajs's tls.connect no CA of its own, so it trusts Node's default CAs, to which
 * `tls.ca_file` is added at start (tls.setDefaultCACertificates): one setting for every TLS client.
 */
export function kafkaClientConfig(options: KafkaOptions, role: string): KafkaConfig {
  return {
    clientId: `${options.clientId}-${role}`,
    brokers: [...options.brokers],
    ...(options.tls === true && { ssl: true }),
    ...(options.sasl && { sasl: saslOptions(options.sasl) }),
    ...(options.retry && { retry: { retries: options.retry.retries, initialRetryTime: options.retry.initialRetryTimeMs } }),
  };
}

/** kafkajs's SASL options, one type per mechanism (a union of mechanisms is not one of them). */
function saslOptions({ mechanism, username, password }: KafkaSasl): SASLOptions {
  switch (mechanism) {
    case 'plain':
      return { mechanism, username, password };
    case 'scram-sha-256':
      return { mechanism, username, password };
    case 'scram-sha-512':
      return { mechanism, username, password };
  }
}

/** A kafkajs client whose own logs go to the service's logger. */
function createKafkaClient(options: KafkaOptions, log: BusLogger, role: string): Kafka {
  return new Kafka({
    ...kafkaClientConfig(options, role),
    logLevel: KafkaLogLevel.WARN,
    logCreator: () => (entry: LogEntry) => {
      const { message, timestamp: _timestamp, logger: _logger, ...details } = entry.log as LogEntry['log'] & { logger?: string };
      const fields = { kafka: entry.namespace, ...details };
      // A group rebalancing is how Kafka hands partitions over when a member joins or leaves: every
      // member's next request is answered "rebalancing" and it rejoins. Routine, and one a group
      // each time (a worker runs a group per projection and stage): a worker joining made hundreds
      // of warnings. The rebalance itself is logged once per member (the GROUP_JOIN line, below).
      if (isRebalanceNotice(message, details)) log.info(fields, message);
      // Connection-level errors (broker restarting) are retried by kafkajs: warnings.
      else if (entry.level === KafkaLogLevel.ERROR && entry.namespace !== 'Connection') log.error(fields, message);
      else log.warn(fields, message);
    },
  });
}

/**
 * Creates the missing topics among `topics` with the configured partitions and replication,
 * and remembers them in `known` with their `max.message.bytes` (null: unknown). A topic that
 * exists with another partition count is left alone (adding partitions would move keys and break
 * per-stream order) and reported; one with a smaller `max.message.bytes` is raised (raiseMaxMessageBytes).
 */
async function ensureTopics(
  admin: Admin,
  options: KafkaOptions,
  topics: readonly string[],
  known: Map<string, number | null>,
  log: BusLogger,
): Promise<void> {
  const wanted = [...new Set(topics)].filter((topic) => !known.has(topic));
  if (wanted.length === 0) return;
  const existing = new Set(await admin.listTopics());
  const missing = wanted.filter((topic) => !existing.has(topic));
  if (missing.length > 0) {
    const configEntries = Object.entries({ 'max.message.bytes': String(wantedMaxMessageBytes(options)), ...options.topicConfig }).map(
      ([name, value]) => ({ name, value }),
    );
    await admin.createTopics({
      // kafkajs' own wait gives up when a broker does not know the new topic yet: wait below instead.
      waitForLeaders: false,
      topics: missing.map((topic) => ({
        topic,
        numPartitions: options.partitions,
        replicationFactor: options.replicationFactor,
        configEntries,
      })),
    });
    await waitForLeaders(admin, missing);
    log.info({ topics: missing, partitions: options.partitions, replicationFactor: options.replicationFactor }, 'kafka topics created');
  }
  const present = wanted.filter((topic) => existing.has(topic));
  if (present.length > 0) {
    // Listed is not ready: another process (a relay beside this consumer) may have just created
    // the topic. A consumer that joins its group before the partitions have leaders is assigned
    // none of them and waits for its next metadata refresh, five minutes by default.
    const metadata = await waitForLeaders(admin, present);
    for (const topic of metadata.topics) {
      if (topic.partitions.length !== options.partitions) {
        log.warn(
          { topic: topic.name, partitions: topic.partitions.length, configured: options.partitions },
          'kafka topic exists with another partition count; left as it is',
        );
      }
    }
  }
  const limits = present.length > 0 ? await raiseMaxMessageBytes(admin, options, present, log) : new Map<string, number | null>();
  for (const topic of wanted) known.set(topic, limits.get(topic) ?? (existing.has(topic) ? null : wantedMaxMessageBytes(options)));
}

/**
 * Raises `max.message.bytes` of existing `topics` below the wanted bound (topics created before
 * the service set it have the broker's 1 MB); returns each topic's limit afterwards (null: unknown).
 * kafkajs has only the legacy AlterConfigs, which replaces all of a topic's own settings: the
 * ones it has are sent again with it. When that is refused (no ALTER_CONFIGS permission), the
 * error says which topic and setting to raise, and events above the limit are logged when refused.
 */
async function raiseMaxMessageBytes(admin: Admin, options: KafkaOptions, topics: readonly string[], log: BusLogger): Promise<Map<string, number | null>> {
  const wanted = wantedMaxMessageBytes(options);
  const limits = new Map<string, number | null>();
  let described;
  try {
    described = await withAdminRetries(() =>
      admin.describeConfigs({ includeSynonyms: false, resources: topics.map((name) => ({ type: ConfigResourceTypes.TOPIC, name })) }),
    );
  } catch (error) {
    log.warn({ topics, error: errorMessage(error) }, 'kafka topic configs could not be read; max.message.bytes left as it is');
    return limits;
  }
  for (const resource of described.resources) {
    const topic = resource.resourceName;
    const current = resource.configEntries.find((entry) => entry.configName === 'max.message.bytes');
    const currentBytes = current ? Number(current.configValue) : null;
    limits.set(topic, currentBytes);
    if (currentBytes === null || currentBytes >= wanted) continue;
    const own = resource.configEntries
      .filter((entry) => entry.configSource === ConfigSource.TOPIC_CONFIG && entry.configName !== 'max.message.bytes' && !entry.isSensitive)
      .map((entry) => ({ name: entry.configName, value: entry.configValue }));
    try {
      await withAdminRetries(() =>
        admin.alterConfigs({
          validateOnly: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [...own, { name: 'max.message.bytes', value: String(wanted) }] }],
        }),
      );
      limits.set(topic, wanted);
      log.info({ topic, from: currentBytes, to: wanted }, 'kafka topic max.message.bytes raised');
    } catch (error) {
      log.error(
        { topic, maxMessageBytes: currentBytes, wanted, error: errorMessage(error) },
        `kafka topic ${topic} has max.message.bytes ${currentBytes} and could not be raised to ${wanted}: events larger than that are refused until an operator raises it`,
      );
    }
  }
  return limits;
}

/** Whether kafkajs marks the error as one a retry may get past (a leader moving, a topic just created). */
function isRetriable(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { retriable?: unknown }).retriable === true;
}

/** Waits until every partition of `topics` has a leader, so producing and joining can start; returns their metadata. */
async function waitForLeaders(admin: Admin, topics: readonly string[], timeoutMs = 30_000): Promise<{ topics: ITopicMetadata[] }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let lastProblem: string;
    try {
      const metadata = await admin.fetchTopicMetadata({ topics: [...topics] });
      const leaderless = metadata.topics.filter((topic) => topic.partitions.some((partition) => partition.leader < 0));
      if (leaderless.length === 0) return metadata;
      lastProblem = `no leader yet for ${leaderless.map((topic) => topic.name).join(', ')}`;
    } catch (error) {
      // Right after creation a broker may still answer UNKNOWN_TOPIC_OR_PARTITION or LEADER_NOT_AVAILABLE.
      if (!isRetriable(error)) throw error;
      lastProblem = errorMessage(error);
    }
    if (Date.now() > deadline) throw new Error(`kafka topics ${topics.join(', ')} not ready after ${timeoutMs} ms: ${lastProblem}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// ---------------------------------------------------------------------------------------------
// Relay: event store -> Kafka
// ---------------------------------------------------------------------------------------------

export interface KafkaRelayOptions {
  store: EventStore;
  kafka: KafkaOptions;
  registry: EventSchemaRegistry;
  /** Holds `bus_relay_positions`; usually the read-model database. */
  db: Database;
  log?: BusLogger;
  /** Row of `bus_relay_positions`; default `kafka:<topicPrefix>`, so each destination has its own position. */
  name?: string;
  /** Events read from the store per produce request; default 500. */
  batchSize?: number;
  /** First delay before retrying after a failure (broker down, store unreachable), doubled per failure; default 500 ms. */
  retryBaseMs?: number;
  /** Longest retry delay; default 30 s. */
  retryMaxMs?: number;
}

export interface KafkaRelay {
  /** Creates the position table and the dead-letter topic, then tails the store from the stored position. */
  start(): Promise<void>;
  /** Finishes the batch in flight (published and stored), then disconnects. */
  stop(): Promise<void>;
  /** Global position of the last event published and stored. */
  position(): number;
  /**
   * Resolves once every event through `position` is published (default: the store's head when
   * called, which hides appends still in flight anywhere on the server); rejects after
   * `timeoutMs` (default 30 s) or when the relay stops.
   */
  caughtUp(options?: { position?: number; timeoutMs?: number }): Promise<void>;
}

/** Creates `bus_relay_positions(name pk, position)` if it is missing. */
async function migrateRelayPositions(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'bus_relay_positions', async (trx) => {
    await trx.raw(`CREATE TABLE IF NOT EXISTS bus_relay_positions (
      name text PRIMARY KEY,
      position bigint NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`);
  });
}

/** The default `bus_relay_positions` row of a relay to these Kafka settings. */
export function relayPositionName(kafka: Pick<KafkaOptions, 'topicPrefix'>): string {
  return `kafka:${kafka.topicPrefix}`;
}

/** The stored relay position (0: nothing published yet). */
export async function readRelayPosition(knex: Knex, name: string): Promise<number> {
  const row: { position: string | number } | undefined = await knex('bus_relay_positions').where({ name }).first('position');
  return row ? Number(row.position) : 0;
}

/**
 * Publishes the event store's log to Kafka, at least once: each batch is produced (idempotent
 * producer, acks from all in-sync replicas) before its position is stored, so a crash between
 * the two re-publishes that batch on restart and consumers absorb the duplicates. Events go to
 * `<prefix>.<category>` keyed by stream id: one stream, one partition, in stream order.
 * Run one relay per destination (config `bus.kafka.relay` on one node): two would only duplicate.
 */
export function createKafkaRelay(options: KafkaRelayOptions): KafkaRelay {
  validateKafkaOptions(options.kafka);
  const { store, registry, db } = options;
  const kafkaOptions = options.kafka;
  const log = options.log ?? silentBusLogger;
  const name = options.name ?? relayPositionName(kafkaOptions);
  const batchSize = options.batchSize ?? 500;
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new RangeError('relay batchSize must be an integer >= 1');
  const retryBaseMs = options.retryBaseMs ?? 500;
  const retryMaxMs = options.retryMaxMs ?? 30_000;
  const kafka = createKafkaClient(kafkaOptions, log, 'relay');
  const knownTopics = new Map<string, number | null>();
  const dlqTopic = deadLetterTopic(kafkaOptions.topicPrefix);

  let producer: Producer | null = null;
  let admin: Admin | null = null;
  let subscription: Subscription | null = null;
  let retryTimer: NodeJS.Timeout | null = null;
  /** A retry's reconnect in progress: stop() waits for it so nothing connects after stopping. */
  let following: Promise<void> = Promise.resolve();
  let running = false;
  let failures = 0;
  let published = 0;

  async function publish(batch: RecordedEvent[]): Promise<void> {
    if (!producer || !admin) throw new Error('relay is not connected');
    const entries: Array<{ event: RecordedEvent; topic: string; message: Message }> = [];
    for (const event of batch) {
      let topic: string;
      let message: Message;
      try {
        topic = streamTopic(kafkaOptions.topicPrefix, event.streamId);
        message = encodeEvent(registry, event);
      } catch (error) {
        // The store validated it, so only a registry or naming change gets here. Holding the
        // whole log back for one event would be worse: park it, readable, with the reason.
        const reason = errorMessage(error);
        log.error({ eventId: event.eventId, type: event.type, streamId: event.streamId, reason }, 'relay cannot encode event; sent to the dead-letter topic');
        topic = dlqTopic;
        message = {
          key: event.streamId,
          value: Buffer.from(JSON.stringify(event)),
          headers: {
            [eventHeaders.eventId]: event.eventId,
            [eventHeaders.eventType]: event.type,
            [eventHeaders.streamId]: event.streamId,
            [eventHeaders.globalPosition]: String(event.globalPosition),
            [deadLetterHeaders.reason]: `relay could not encode: ${reason}`,
            [deadLetterHeaders.failure]: 'unencodable-event',
            [deadLetterHeaders.at]: new Date().toISOString(),
            'content-type': 'application/json',
          },
        };
      }
      entries.push({ event, topic, message });
    }
    const topics = [...new Set(entries.map((entry) => entry.topic))];
    await ensureTopics(admin, kafkaOptions, topics, knownTopics, log);
    // A request below the smallest limit of its topics: a partition's messages are one record batch.
    const limits = topics.map((topic) => knownTopics.get(topic) ?? PRODUCE_MAX_BYTES);
    const maxBytes = Math.max(1, Math.min(PRODUCE_MAX_BYTES, ...limits) - BATCH_OVERHEAD_BYTES);
    for (const chunk of produceBatches(entries, maxBytes)) {
      const messagesByTopic = new Map<string, Message[]>();
      for (const { topic, message } of chunk) {
        const messages = messagesByTopic.get(topic);
        if (messages) messages.push(message);
        else messagesByTopic.set(topic, [message]);
      }
      try {
        await producer.sendBatch({ acks: -1, topicMessages: [...messagesByTopic].map(([topic, messages]) => ({ topic, messages })) });
      } catch (error) {
        if (isTooLarge(error)) reportTooLarge(chunk);
        throw error;
      }
      const last = chunk[chunk.length - 1].event.globalPosition;
      // Only after the brokers acknowledged: a crash before this line re-publishes the chunk.
      await db
        .knex('bus_relay_positions')
        .insert({ name, position: last, updated_at: new Date() })
        .onConflict('name')
        .merge(['position', 'updated_at']);
      published = last;
    }
    failures = 0;
  }

  /**
   * The broker refused a request as too large: says which event, how large, on which topic and
   * what to raise. The relay still retries (skipping would lose the event for every consumer);
   * the topics are checked again first, so a limit raised meanwhile is seen.
   */
  function reportTooLarge(chunk: ReadonlyArray<{ event: RecordedEvent; topic: string; message: Message }>): void {
    const sized = chunk.map((entry) => ({ ...entry, bytes: messageBytes(entry.message) }));
    const largest = sized.reduce((a, b) => (b.bytes > a.bytes ? b : a));
    const maxMessageBytes = knownTopics.get(largest.topic) ?? null;
    log.error(
      {
        relay: name,
        topic: largest.topic,
        eventId: largest.event.eventId,
        type: largest.event.type,
        streamId: largest.event.streamId,
        globalPosition: largest.event.globalPosition,
        bytes: largest.bytes,
        maxMessageBytes,
        events: chunk.length,
        requestBytes: sized.reduce((sum, entry) => sum + entry.bytes, 0),
      },
      `kafka refused an event as too large (${largest.bytes} bytes on ${largest.topic}, max.message.bytes ${maxMessageBytes ?? 'unknown'}): ` +
        "raise the topic's max.message.bytes (and the broker's socket.request.max.bytes past 100 MiB); the relay retries it and publishes nothing after it meanwhile",
    );
    for (const entry of chunk) knownTopics.delete(entry.topic);
  }

  async function connect(): Promise<void> {
    await migrateRelayPositions(db.knex);
    admin ??= kafka.admin();
    await admin.connect();
    producer ??= kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: false,
      // murmur2, as the Java client: keys land on the same partitions from any client.
      createPartitioner: Partitioners.DefaultPartitioner,
    });
    await producer.connect();
    await ensureTopics(admin, kafkaOptions, [dlqTopic], knownTopics, log);
  }

  async function follow(): Promise<void> {
    await connect();
    const after = await readRelayPosition(db.knex, name);
    if (!running) return;
    published = after;
    log.info({ relay: name, after }, 'kafka relay following the event store');
    subscription = store.subscribe({ after, batchSize, handler: publish, onError: (error) => retry(error) });
  }

  function retry(error: unknown): void {
    subscription = null;
    if (!running) return;
    failures += 1;
    const delayMs = Math.min(retryMaxMs, retryBaseMs * 2 ** (failures - 1));
    log.warn(
      { relay: name, error: errorMessage(error), failures, retryInMs: delayMs },
      'kafka relay failed; resuming from its stored position',
    );
    retryTimer = setTimeout(() => {
      retryTimer = null;
      following = follow().catch((followError: unknown) => retry(followError));
    }, delayMs);
  }

  return {
    async start() {
      if (running) return;
      running = true;
      try {
        await follow();
      } catch (error) {
        running = false;
        await Promise.allSettled([producer?.disconnect(), admin?.disconnect()]);
        throw error;
      }
    },

    async stop() {
      if (!running) return;
      running = false;
      if (retryTimer) clearTimeout(retryTimer);
      retryTimer = null;
      await following;
      await subscription?.stop();
      subscription = null;
      await Promise.allSettled([producer?.disconnect(), admin?.disconnect()]);
    },

    position: () => published,

    async caughtUp({ position, timeoutMs = 30_000 }: { position?: number; timeoutMs?: number } = {}) {
      const head = position ?? (await store.headPosition());
      const deadline = Date.now() + timeoutMs;
      while (published < head) {
        if (!running) throw new Error(`kafka relay ${name} is stopped at position ${published}, head is ${head}`);
        if (Date.now() > deadline) throw new Error(`kafka relay ${name} at position ${published} after ${timeoutMs} ms, head is ${head}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Bus: Kafka -> consumer groups
// ---------------------------------------------------------------------------------------------

export interface KafkaConsumerSettings {
  /** The broker drops a member silent this long; default 30 s (the broker's minimum is 6 s). */
  sessionTimeoutMs?: number;
  /** Heartbeat period, also while a handler runs; default 3 s. */
  heartbeatIntervalMs?: number;
  /** How long a rebalance waits for members to finish their batch and rejoin; default 60 s. */
  rebalanceTimeoutMs?: number;
  /** Events per handler call at most (a fetched batch is split); default 500. */
  batchSize?: number;
  /** Partitions handled at the same time by one consumer; default 1 (handler calls never overlap). */
  partitionsConsumedConcurrently?: number;
  /** How often a consumer looks for new category topics and subscribes to them; default 30 s, 0 = never. */
  topicRefreshMs?: number;
  /**
   * Longest wait of an idle fetch; default 500 ms (as the Java client). kafkajs heartbeats between
   * fetches, so this also bounds how late a member notices a rebalance or a stop.
   */
  maxWaitTimeMs?: number;
}

export interface KafkaBusOptions {
  kafka: KafkaOptions;
  registry: EventSchemaRegistry;
  log?: BusLogger;
  /**
   * Stream categories whose topics exist before any consumer starts, so a group subscribed
   * before the relay saw a category still reads it from its first event. Default: every
   * category of DESIGN.md (`streamCategories`).
   */
  categories?: readonly string[];
  consumer?: KafkaConsumerSettings;
}

/** A Kafka consumer of a group; what it is assigned is visible for tests and status pages. */
export interface KafkaBusConsumer extends BusConsumer {
  /** Partitions assigned to this member by the group's last rebalance. */
  assignment(): Array<{ topic: string; partitions: number[] }>;
  /** Topics the member subscribes to. */
  topics(): string[];
}

/** The distributed tier's Bus. `close()` stops every consumer and disconnects. */
export interface KafkaBus extends Bus {
  consume(options: BusConsumerOptions): Promise<KafkaBusConsumer>;
}

/**
 * Consumer groups over `<prefix>.<category>` topics. Each fetched batch (one partition, in
 * offset order) is decoded; events of other types are skipped without decoding; the rest go to
 * the handler, and only after it resolves are the offsets resolved and committed. A handler
 * that throws leaves the offsets where they were, so the batch comes again (kafkajs retries,
 * then restarts the consumer). A message that cannot be decoded goes to `<prefix>.dead-letter`
 * with the reason and its origin, and the partition moves on.
 */
export function createKafkaBus(options: KafkaBusOptions): KafkaBus {
  validateKafkaOptions(options.kafka);
  const kafkaOptions = options.kafka;
  const { registry } = options;
  const log = options.log ?? silentBusLogger;
  const categories = options.categories ?? streamCategories;
  const categoryTopics = categories.map((category) => streamTopic(kafkaOptions.topicPrefix, `${category}-x`));
  const settings = resolveConsumerSettings(options.consumer ?? {});
  const kafka = createKafkaClient(kafkaOptions, log, 'bus');
  const dlqTopic = deadLetterTopic(kafkaOptions.topicPrefix);
  const knownTopics = new Map<string, number | null>();
  const consumers = new Set<KafkaGroupConsumer>();
  // Promises, so concurrent consume() calls share one connection; a failed connect is retried next time.
  let admin: Promise<Admin> | null = null;
  let deadLetterProducer: Promise<Producer> | null = null;
  let closed = false;

  function connectedAdmin(): Promise<Admin> {
    admin ??= (async () => {
      const created = kafka.admin();
      await created.connect();
      return created;
    })();
    admin.catch(() => (admin = null));
    return admin;
  }

  const shared: ConsumerShared = {
    kafka,
    registry,
    log,
    settings,
    dlqTopic,
    async subscribableTopics() {
      const client = await connectedAdmin();
      return (await client.listTopics()).filter((topic) => isCategoryTopic(kafkaOptions.topicPrefix, topic)).sort();
    },
    async sendDeadLetter(message) {
      deadLetterProducer ??= (async () => {
        const producer = kafka.producer({
          idempotent: true,
          maxInFlightRequests: 1,
          allowAutoTopicCreation: false,
          createPartitioner: Partitioners.DefaultPartitioner,
        });
        await producer.connect();
        return producer;
      })();
      deadLetterProducer.catch(() => (deadLetterProducer = null));
      const producer = await deadLetterProducer;
      await producer.send({ topic: dlqTopic, acks: -1, messages: [message] });
    },
  };

  return {
    async consume(consumerOptions: BusConsumerOptions): Promise<KafkaBusConsumer> {
      validateConsumerOptions(consumerOptions);
      if (closed) throw new Error('the bus is closed');
      await ensureTopics(await connectedAdmin(), kafkaOptions, [...categoryTopics, dlqTopic], knownTopics, log);
      const consumer = new KafkaGroupConsumer(consumerOptions, shared, () => consumers.delete(consumer));
      consumers.add(consumer);
      try {
        await consumer.start();
      } catch (error) {
        await consumer.stop();
        throw error;
      }
      return consumer;
    },

    async backlog(groups: readonly string[]): Promise<Map<string, number>> {
      return withAdminRetries(async () => unacknowledged(await connectedAdmin(), await shared.subscribableTopics(), groups));
    },

    async consumingGroups(groups: readonly string[]): Promise<Set<string>> {
      if (groups.length === 0) return new Set();
      const { groups: described } = await withAdminRetries(async () => (await connectedAdmin()).describeGroups([...groups]));
      return new Set(described.filter((group) => group.members.length > 0).map((group) => group.groupId));
    },

    async close() {
      closed = true;
      await Promise.allSettled([...consumers].map((consumer) => consumer.stop()));
      const producer = deadLetterProducer;
      const adminClient = admin;
      deadLetterProducer = null;
      admin = null;
      await Promise.allSettled([
        producer?.then((connected) => connected.disconnect()),
        adminClient?.then((connected) => connected.disconnect()),
      ]);
    },
  };
}

/**
 * An admin request, tried up to five times while kafkajs calls its failure retriable: a partition
 * that just moved or a topic just created answers "not the leader" until the client refreshes its
 * metadata, which kafkajs does on the retry.
 */
async function withAdminRetries<T>(request: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await request();
    } catch (error) {
      if (attempt >= 5 || !isRetriable(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
    }
  }
}

/** Per group: messages on `topics` that it has not committed (a group that committed nothing on a partition owes it all). */
async function unacknowledged(admin: Admin, topics: readonly string[], groups: readonly string[]): Promise<Map<string, number>> {
  const ends = new Map<string, { low: bigint; high: bigint }>();
  for (const topic of topics) {
    for (const entry of await admin.fetchTopicOffsets(topic)) ends.set(`${topic}/${entry.partition}`, { low: BigInt(entry.low), high: BigInt(entry.high) });
  }
  const owedByGroup = new Map<string, number>();
  for (const groupId of groups) {
    let owed = 0n;
    for (const { topic, partitions } of await admin.fetchOffsets({ groupId, topics: [...topics] })) {
      for (const { partition, offset } of partitions) {
        const end = ends.get(`${topic}/${partition}`);
        if (!end) continue;
        const from = offset === '-1' ? end.low : BigInt(offset);
        if (end.high > from) owed += end.high - from;
      }
    }
    owedByGroup.set(groupId, Number(owed));
  }
  return owedByGroup;
}

type ResolvedConsumerSettings = Required<KafkaConsumerSettings>;

function resolveConsumerSettings(settings: KafkaConsumerSettings): ResolvedConsumerSettings {
  const resolved: ResolvedConsumerSettings = {
    sessionTimeoutMs: settings.sessionTimeoutMs ?? 30_000,
    heartbeatIntervalMs: settings.heartbeatIntervalMs ?? 3_000,
    rebalanceTimeoutMs: settings.rebalanceTimeoutMs ?? 60_000,
    batchSize: settings.batchSize ?? 500,
    partitionsConsumedConcurrently: settings.partitionsConsumedConcurrently ?? 1,
    topicRefreshMs: settings.topicRefreshMs ?? 30_000,
    maxWaitTimeMs: settings.maxWaitTimeMs ?? 500,
  };
  for (const [key, value] of Object.entries(resolved)) {
    const minimum = key === 'topicRefreshMs' ? 0 : 1;
    if (!Number.isInteger(value) || value < minimum) throw new RangeError(`kafka consumer ${key} must be an integer >= ${minimum}, is ${String(value)}`);
  }
  if (resolved.heartbeatIntervalMs >= resolved.sessionTimeoutMs) {
    throw new RangeError('kafka consumer heartbeatIntervalMs must be below sessionTimeoutMs');
  }
  return resolved;
}

interface ConsumerShared {
  kafka: Kafka;
  registry: EventSchemaRegistry;
  log: BusLogger;
  settings: ResolvedConsumerSettings;
  dlqTopic: string;
  subscribableTopics(): Promise<string[]>;
  sendDeadLetter(message: Message): Promise<void>;
}

class KafkaGroupConsumer implements KafkaBusConsumer {
  private consumer: Consumer | null = null;
  private subscribed: string[] = [];
  private assigned: Array<{ topic: string; partitions: number[] }> = [];
  private refreshTimer: NodeJS.Timeout | null = null;
  /** Serialises start, topic refresh and stop. */
  private lifecycle: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly types: ReadonlySet<string>;

  constructor(
    private readonly options: BusConsumerOptions,
    private readonly shared: ConsumerShared,
    private readonly onStopped: () => void,
  ) {
    this.types = new Set(options.types);
  }

  assignment(): Array<{ topic: string; partitions: number[] }> {
    return this.assigned.map((entry) => ({ topic: entry.topic, partitions: [...entry.partitions] }));
  }

  topics(): string[] {
    return [...this.subscribed];
  }

  async start(): Promise<void> {
    await this.serially(async () => {
      const topics = await this.shared.subscribableTopics();
      await this.run(topics);
    });
    const refreshMs = this.shared.settings.topicRefreshMs;
    if (refreshMs > 0 && !this.stopped) {
      this.refreshTimer = setInterval(() => {
        this.serially(() => this.refreshTopics()).catch((error: unknown) => {
          this.shared.log.warn({ group: this.options.group, error: errorMessage(error) }, 'kafka topic refresh failed; will try again');
        });
      }, refreshMs);
      this.refreshTimer.unref();
    }
  }

  async stop(): Promise<void> {
    if (this.stopped) return this.lifecycle;
    this.stopped = true;
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    this.refreshTimer = null;
    await this.serially(async () => {
      const consumer = this.consumer;
      this.consumer = null;
      // disconnect() waits for the batch in flight, commits what was resolved and leaves the group.
      await consumer?.disconnect();
    });
    this.onStopped();
  }

  private serially(step: () => Promise<void>): Promise<void> {
    const next = this.lifecycle.then(step);
    this.lifecycle = next.catch(() => undefined);
    return next;
  }

  /** A category topic created after this member subscribed (a new stream category): resubscribe. */
  private async refreshTopics(): Promise<void> {
    if (this.stopped) return;
    const topics = await this.shared.subscribableTopics();
    if (topics.every((topic) => this.subscribed.includes(topic))) return;
    this.shared.log.info({ group: this.options.group, topics }, 'kafka consumer subscribing to new topics');
    const previous = this.consumer;
    this.consumer = null;
    await previous?.disconnect();
    if (!this.stopped) await this.run(topics);
  }

  private async run(topics: string[]): Promise<void> {
    if (this.stopped) return;
    if (topics.length === 0) throw new Error(`group ${this.options.group}: no category topics exist to consume`);
    const { settings, log } = this.shared;
    const consumer = this.shared.kafka.consumer({
      groupId: this.options.group,
      sessionTimeout: settings.sessionTimeoutMs,
      heartbeatInterval: settings.heartbeatIntervalMs,
      rebalanceTimeout: settings.rebalanceTimeoutMs,
      maxWaitTimeInMs: settings.maxWaitTimeMs,
      allowAutoTopicCreation: false,
    });
    consumer.on(consumer.events.GROUP_JOIN, (event) => {
      this.assigned = Object.entries(event.payload.memberAssignment)
        .map(([topic, partitions]) => ({ topic, partitions: [...partitions].sort((a, b) => a - b) }))
        .sort((a, b) => a.topic.localeCompare(b.topic));
      // A rebalance is rare and worth a line: which partitions this member got (none, if it joined before they had leaders).
      log.info({ group: this.options.group, assigned: this.assigned }, 'kafka consumer joined its group');
    });
    consumer.on(consumer.events.CRASH, (event) => {
      const { error, restart } = event.payload;
      log.warn({ group: this.options.group, error: errorMessage(error), restart }, 'kafka consumer crashed');
      if (!restart) log.error({ group: this.options.group }, 'kafka consumer will not restart; stop and consume again');
    });
    this.consumer = consumer;
    this.subscribed = topics;
    await consumer.connect();
    // fromBeginning: a new group (a new projection or stage) reads each topic from its first event.
    await consumer.subscribe({ topics, fromBeginning: true });
    await consumer.run({
      autoCommit: true,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: settings.partitionsConsumedConcurrently,
      eachBatch: (payload) => this.eachBatch(payload),
    });
  }

  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, isRunning, isStale, commitOffsetsIfNecessary } = payload;
    let pending: RecordedEvent[] = [];
    let pendingOffset: string | null = null;

    const flush = async (): Promise<boolean> => {
      if (pending.length > 0) {
        // Do not start work the group may already have handed to another member.
        if (!isRunning() || isStale()) return false;
        await this.callHandler(pending, payload);
      }
      if (pendingOffset !== null) resolveOffset(pendingOffset);
      pending = [];
      pendingOffset = null;
      return true;
    };

    for (const message of batch.messages) {
      const event = await this.decodeOrDeadLetter(batch.topic, batch.partition, message);
      if (event && this.types.has(event.type)) pending.push(event);
      pendingOffset = message.offset;
      if (pending.length >= this.shared.settings.batchSize) {
        if (!(await flush())) return;
        await commitOffsetsIfNecessary();
      }
    }
    await flush();
    // After this kafkajs commits the resolved offsets (autoCommit) before fetching again.
  }

  /** Null for a message skipped (another type) or dead-lettered. */
  private async decodeOrDeadLetter(topic: string, partition: number, message: KafkaMessage): Promise<RecordedEvent | null> {
    const type = messageEventType(message);
    // Types this group does not read are skipped undecoded; a type nobody can decode is a dead letter.
    if (type !== null && this.shared.registry.has(type) && !this.types.has(type)) return null;
    try {
      return decodeEvent(this.shared.registry, message);
    } catch (error) {
      if (!(error instanceof EventDecodeError)) throw error;
      await this.deadLetter(topic, partition, message, error);
      return null;
    }
  }

  private async deadLetter(topic: string, partition: number, message: KafkaMessage, error: EventDecodeError): Promise<void> {
    const { group, onDeadLetter } = this.options;
    const headers: Record<string, Buffer | string> = {};
    for (const [name, value] of Object.entries(message.headers ?? {})) {
      if (value === undefined) continue;
      headers[name] = Array.isArray(value) ? value[value.length - 1] : value;
    }
    Object.assign(headers, {
      [deadLetterHeaders.reason]: error.message,
      [deadLetterHeaders.failure]: error.failure,
      [deadLetterHeaders.topic]: topic,
      [deadLetterHeaders.partition]: String(partition),
      [deadLetterHeaders.offset]: message.offset,
      [deadLetterHeaders.group]: group,
      [deadLetterHeaders.at]: new Date().toISOString(),
    });
    // Sent before the offset moves past the message: a crash here dead-letters it again, never loses it.
    await this.shared.sendDeadLetter({ key: message.key, value: message.value, headers });
    this.shared.log.warn(
      { group, topic, partition, offset: message.offset, reason: error.message, deadLetterTopic: this.shared.dlqTopic },
      'kafka message dead-lettered',
    );
    onDeadLetter?.(error.message, { topic, partition, offset: message.offset });
  }

  /**
   * Runs the handler while heartbeating, so a long handler does not let the session expire. A
   * heartbeat that reports a rebalance is ignored here: the handler finishes, kafkajs commits
   * what was resolved and rejoins; if the partition moved, its new owner gets the batch again.
   */
  private async callHandler(events: RecordedEvent[], payload: EachBatchPayload): Promise<void> {
    const timer = setInterval(() => {
      payload.heartbeat().catch(() => undefined);
    }, this.shared.settings.heartbeatIntervalMs);
    try {
      await this.options.handler(events);
    } finally {
      clearInterval(timer);
    }
  }
}
