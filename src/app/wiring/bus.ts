import type { Logger } from 'pino';
import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import type { EventSchemaRegistry } from '../../eventstore/schemas.js';
import type { KafkaOptions } from '../../bus/kafka.js';
import { runAsLeader, type Leadership } from '../../bus/leader.js';
import type { Bus } from '../../bus/port.js';

export function kafkaOptions(config: Config): KafkaOptions {
  const { brokers, client_id, topic_prefix, partitions, replication_factor } = config.bus.kafka;
  return { brokers, clientId: client_id, topicPrefix: topic_prefix, partitions, replicationFactor: replication_factor };
}

/**
 * The Bus of `bus.backend`: Kafka consumer groups on the distributed tier, none on the embedded
 * tier, where the projection runner reads the event store's log itself (docs/architecture.md).
 * `kafka` sets client options the configuration does not (its retries).
 */
export async function openBus(config: Config, schemas: EventSchemaRegistry, log: Logger, kafka: Pick<KafkaOptions, 'retry'> = {}): Promise<Bus | null> {
  if (config.bus.backend !== 'kafka') return null;
  // Kafka's client is loaded only when it is configured.
  const { createKafkaBus } = await import('../../bus/kafka.js');
  const bus = createKafkaBus({
    kafka: { ...kafkaOptions(config), ...kafka },
    registry: schemas,
    log: log.child({ component: 'bus' }),
    consumer: { sessionTimeoutMs: parseDuration(config.bus.kafka.session_timeout) },
  });
  return {
    // A worker's start ends on its first consumer's failure: say it is Kafka's, and where it is set.
    consume: (options) =>
      bus.consume(options).catch((error: unknown) => {
        throw isKafkaClientError(error) ? kafkaFailure(config, error) : error;
      }),
    backlog: (groups) => bus.backlog(groups),
    consumingGroups: (groups) => bus.consumingGroups(groups),
    close: () => bus.close(),
  };
}

/** kafkajs names its errors `KafkaJS…` (KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, …). */
function isKafkaClientError(error: unknown): error is Error {
  return error instanceof Error && error.name.startsWith('KafkaJS');
}

/**
 * A Kafka client's failure with the brokers it tried and the setting that names them: kafkajs
 * says only `Connection error: connect ECONNREFUSED 127.0.0.1:9092`, which names neither Kafka
 * nor where the address came from.
 */
function kafkaFailure(config: Config, error: Error): Error {
  return new Error(`cannot use Kafka at ${config.bus.kafka.brokers.join(', ')} (bus.kafka.brokers, BUS_KAFKA_BROKERS): ${error.message}`, { cause: error });
}

/**
 * Starts the relay (event store → Kafka) under leadership, so one process of the deployment
 * publishes the log; null when the bus is not Kafka or `bus.kafka.relay` is off.
 */
export async function startRelay(config: Config, deps: { store: EventStore; schemas: EventSchemaRegistry; db: Database; log: Logger }): Promise<Leadership | null> {
  if (config.bus.backend !== 'kafka' || !config.bus.kafka.relay) return null;
  const { createKafkaRelay } = await import('../../bus/kafka.js');
  const relay = createKafkaRelay({
    store: deps.store,
    kafka: kafkaOptions(config),
    registry: deps.schemas,
    db: deps.db,
    log: deps.log.child({ component: 'relay' }),
  });
  return runAsLeader(deps.db, 'relay', relay, { log: deps.log });
}

/**
 * Reads where the relay to this Kafka has published the log through, from `bus_relay_positions`
 * in the shared read-model database, whichever node relays; 0 until some relay has stored one.
 */
export function relayedPosition(config: Config, db: Database): () => Promise<number> {
  return async () => {
    const { readRelayPosition, relayPositionName } = await import('../../bus/kafka.js');
    try {
      return await readRelayPosition(db.knex, relayPositionName(kafkaOptions(config)));
    } catch (error) {
      // No relay has started yet: its table does not exist, and nothing is published.
      if ((error as { code?: string }).code === '42P01') return 0;
      throw error;
    }
  };
}
