import t from 'tap';
import pino from 'pino';
import { buildConfig } from '../../../src/config/index.js';
import kafkajs from 'kafkajs';
import { kafkaFailure, kafkaOptions, openBus, startRelay } from '../../../src/app/wiring/bus.js';
import { kafkaClientConfig } from '../../../src/bus/kafka.js';
import { EventSchemaRegistry } from '../../../src/eventstore/schemas.js';
import { openStore, waitUntil } from '../../eventstore/contract.js';
import { openTestPglite } from '../../helpers/pglite.js';

t.test('a Kafka that cannot be reached is named with its brokers and the setting that lists them', async (t) => {
  // Port 1: nothing listens there, so every connection is refused at once.
  const config = buildConfig({ bus: { backend: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } });
  // One retry after 10 ms instead of kafkajs's five from 300 ms (about 12 s): the failure is the
  // same one, reported after the client's last retry.
  const bus = await openBus(config, await EventSchemaRegistry.load(), pino({ level: 'silent' }), { retry: { retries: 1, initialRetryTimeMs: 10 } });
  if (bus === null) throw new Error('bus.backend kafka opened no bus');
  t.teardown(() => bus.close());
  await t.rejects(
    bus.consume({ group: 'trial', types: ['SourceRegistered'], handler: async () => undefined }),
    { message: /^cannot use Kafka at 127\.0\.0\.1:1 \(bus\.kafka\.brokers, BUS_KAFKA_BROKERS\): .*ECONNREFUSED/ },
  );
});

t.test("the relay that cannot start says so as a consumer does: Kafka named with its brokers and the setting, in the leader's retries", async (t) => {
  const config = buildConfig({ bus: { backend: 'kafka', kafka: { brokers: ['127.0.0.1:1'] } } });
  const { store, db, schemas, close } = await openStore(() => openTestPglite());
  t.teardown(close);
  const lines: string[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
  const relay = await startRelay(config, { store, schemas, db, log }, { retry: { retries: 1, initialRetryTimeMs: 10 } });
  if (relay === null) throw new Error('bus.kafka.relay true started no relay');
  t.teardown(() => relay.stop());
  const refused = () => lines.find((line) => line.includes('leader election failed'));
  await waitUntil(() => refused() !== undefined, 30_000, 'the relay leader to log its failed start', 20);
  t.match(JSON.parse(refused() ?? '{}'), { role: 'relay', error: /cannot use Kafka at 127\.0\.0\.1:1 \(bus\.kafka\.brokers, BUS_KAFKA_BROKERS\): .*ECONNREFUSED/ });
});

t.test("bus.kafka's TLS and SASL settings reach the options every Kafka client is made with", async (t) => {
  const plain = buildConfig({ bus: { backend: 'kafka', kafka: { brokers: ['kafka:9092'] } } });
  t.same(kafkaClientConfig(kafkaOptions(plain), 'bus'), { clientId: 'factlog-bus', brokers: ['kafka:9092'] }, 'by default: no TLS, no SASL');
  const managed = buildConfig({
    bus: { backend: 'kafka', kafka: { brokers: ['kafka:9093'], tls: true, sasl: { mechanism: 'scram-sha-256', username: 'svc', password: 's3cret' } } },
  });
  t.same(kafkaClientConfig(kafkaOptions(managed), 'relay'), {
    clientId: 'factlog-relay',
    brokers: ['kafka:9093'],
    ssl: true,
    sasl: { mechanism: 'scram-sha-256', username: 'svc', password: 's3cret' },
  });
  const tlsOnly = buildConfig({ bus: { backend: 'kafka', kafka: { brokers: ['kafka:9093'], tls: true } } });
  t.same(kafkaClientConfig(kafkaOptions(tlsOnly), 'bus'), { clientId: 'factlog-bus', brokers: ['kafka:9093'], ssl: true }, 'TLS without SASL (mutual TLS aside, a broker may want none)');
});

// kafkajs's types give this error a constructor of no argument; it takes the message as the others do.
const SaslAuthenticationError: new (message: string) => Error = kafkajs.KafkaJSSASLAuthenticationError;

t.test("a refused SASL login and an untrusted certificate are told apart from an unreachable Kafka, with the settings to fix", async (t) => {
  const config = buildConfig({
    bus: { backend: 'kafka', kafka: { brokers: ['kafka:9093'], tls: true, sasl: { mechanism: 'scram-sha-512', username: 'svc', password: 'do-not-show' } } },
  });
  // As kafkajs throws them: a login refused at once; a connection error, retried, then wrapped.
  const refused = new SaslAuthenticationError('SASL SCRAM SHA512 authentication failed: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512');
  const login = kafkaFailure(config, refused);
  t.equal(
    login.message,
    "Kafka at kafka:9093 refused the service's SASL scram-sha-512 login (KafkaJSSASLAuthenticationError: SASL SCRAM SHA512 authentication failed: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512): " +
      'check bus.kafka.sasl.username, .password and .mechanism (BUS_KAFKA_SASL_USERNAME, BUS_KAFKA_SASL_PASSWORD, BUS_KAFKA_SASL_MECHANISM)',
  );
  t.equal(login.cause, refused, "kafkajs's error kept as the cause");
  t.match(kafkaFailure(config, new kafkajs.KafkaJSNumberOfRetriesExceeded(refused, { retryCount: 5, retryTime: 300 })).message, /^Kafka at kafka:9093 refused the service's SASL scram-sha-512 login/, 'also when retried');

  const untrusted = (code: string, message: string) =>
    new kafkajs.KafkaJSNumberOfRetriesExceeded(new kafkajs.KafkaJSConnectionError(`Connection error: ${message}`, { broker: 'kafka:9093', code }), { retryCount: 5, retryTime: 300 });
  t.equal(
    kafkaFailure(config, untrusted('SELF_SIGNED_CERT_IN_CHAIN', 'self-signed certificate in certificate chain')).message,
    'the TLS certificate of Kafka at kafka:9093 is not trusted (SELF_SIGNED_CERT_IN_CHAIN: Connection error: self-signed certificate in certificate chain): add the CA that signed it to tls.ca_file (TLS_CA_FILE)',
  );
  t.match(kafkaFailure(config, untrusted('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate')).message, /is not trusted \(UNABLE_TO_VERIFY_LEAF_SIGNATURE: .*tls\.ca_file/);
  t.match(
    kafkaFailure(config, untrusted('ERR_TLS_CERT_ALTNAME_INVALID', "Hostname/IP does not match certificate's altnames")).message,
    /is not trusted \(ERR_TLS_CERT_ALTNAME_INVALID: .*\): list the brokers by a name their certificate holds \(bus\.kafka\.brokers, BUS_KAFKA_BROKERS\)$/,
  );
  t.match(
    kafkaFailure(config, untrusted('ECONNREFUSED', 'connect ECONNREFUSED 10.0.0.1:9093')).message,
    /^cannot use Kafka at kafka:9093 \(bus\.kafka\.brokers, BUS_KAFKA_BROKERS\): Connection error: connect ECONNREFUSED/,
    'an address that does not answer is what it was',
  );
  for (const error of [refused, untrusted('SELF_SIGNED_CERT_IN_CHAIN', 'x')]) t.notMatch(kafkaFailure(config, error).message, /do-not-show/, 'the password is never in the message');
});
