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
  const { brokers, client_id, topic_prefix, partitions, replication_factor, tls, sasl } = config.bus.kafka;
  const { mechanism, username, password } = sasl;
  return {
    brokers,
    clientId: client_id,
    topicPrefix: topic_prefix,
    partitions,
    replicationFactor: replication_factor,
    tls,
    ...(mechanism !== 'none' && { sasl: { mechanism, username, password } }),
  };
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
        throw explained(config, error);
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
 * Node's codes for a server certificate that does not verify: signed by no trusted CA, for another
 * host, or out of its dates. kafkajs keeps the code on its KafkaJSConnectionError.
 */
const UNTRUSTED_CERTIFICATE_CODES = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The first error in `error`'s chain (kafkajs's retry wraps the last failure as `cause`) that `test` accepts. */
function findInChain(error: unknown, test: (candidate: Error & { code?: unknown }) => boolean): (Error & { code?: unknown }) | undefined {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 5; depth++) {
    if (test(cause)) return cause;
    cause = cause.cause;
  }
  return undefined;
}

/**
 * A Kafka client's failure with the brokers it tried and the setting to look at: kafkajs says only
 * `Connection error: connect ECONNREFUSED 127.0.0.1:9092`, which names neither Kafka nor where the
 * address came from; a refused login or an untrusted certificate is told apart from an address
 * that does not answer, since each has its own settings to fix.
 */
export function kafkaFailure(config: Config, error: Error): Error {
  const brokers = config.bus.kafka.brokers.join(', ');
  const authentication = findInChain(error, (cause) => cause.name === 'KafkaJSSASLAuthenticationError');
  if (authentication) {
    return new Error(
      `Kafka at ${brokers} refused the service's SASL ${config.bus.kafka.sasl.mechanism} login (KafkaJSSASLAuthenticationError: ${authentication.message}): ` +
        'check bus.kafka.sasl.username, .password and .mechanism (BUS_KAFKA_SASL_USERNAME, BUS_KAFKA_SASL_PASSWORD, BUS_KAFKA_SASL_MECHANISM)',
      { cause: error },
    );
  }
  const certificate = findInChain(error, (cause) => typeof cause.code === 'string' && UNTRUSTED_CERTIFICATE_CODES.has(cause.code));
  if (certificate) {
    const fix =
      certificate.code === 'ERR_TLS_CERT_ALTNAME_INVALID'
        ? "list the brokers by a name their certificate holds (bus.kafka.brokers, BUS_KAFKA_BROKERS)"
        : 'add the CA that signed it to tls.ca_file (TLS_CA_FILE)';
    return new Error(`the TLS certificate of Kafka at ${brokers} is not trusted (${String(certificate.code)}: ${certificate.message}): ${fix}`, { cause: error });
  }
  return new Error(`cannot use Kafka at ${brokers} (bus.kafka.brokers, BUS_KAFKA_BROKERS): ${error.message}`, { cause: error });
}

/** `error` as kafkaFailure tells it when it is a Kafka client's; as it is otherwise. */
function explained(config: Config, error: unknown): unknown {
  return isKafkaClientError(error) ? kafkaFailure(config, error) : error;
}

/**
 * Starts the relay (event store → Kafka) under leadership, so one process of the deployment
 * publishes the log; null when the bus is not Kafka or `bus.kafka.relay` is off. `kafka` sets
 * client options the configuration does not (its retries), as openBus's does.
 */
export async function startRelay(
  config: Config,
  deps: { store: EventStore; schemas: EventSchemaRegistry; db: Database; log: Logger },
  kafka: Pick<KafkaOptions, 'retry'> = {},
): Promise<Leadership | null> {
  if (config.bus.backend !== 'kafka' || !config.bus.kafka.relay) return null;
  const { createKafkaRelay } = await import('../../bus/kafka.js');
  const relay = createKafkaRelay({
    store: deps.store,
    kafka: { ...kafkaOptions(config), ...kafka },
    registry: deps.schemas,
    db: deps.db,
    log: deps.log.child({ component: 'relay' }),
  });
  // The leader's retries log why the relay could not start: say it as a consumer's start would.
  const explainedRelay = {
    start: () => relay.start().catch((error: unknown) => {
      throw explained(config, error);
    }),
    stop: () => relay.stop(),
  };
  return runAsLeader(deps.db, 'relay', explainedRelay, { log: deps.log });
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
