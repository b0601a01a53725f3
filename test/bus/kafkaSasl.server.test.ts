// The service's Kafka clients over TLS with SASL, against the SASL_SSL listener of scripts/kafka.sh's
// broker (a CA of its own, PLAIN and SCRAM users): what a managed Kafka asks of a client.
import { randomUUID } from 'node:crypto';
import tls from 'node:tls';
import pino from 'pino';
import t, { type Test } from 'tap';
import { kafkaOptions, openBus } from '../../src/app/wiring/bus.js';
import { createKafkaRelay } from '../../src/bus/kafka.js';
import { buildConfig, trustConfiguredCertificates } from '../../src/config/index.js';
import type { Config, KafkaSaslMechanism } from '../../src/config/types.js';
import { openScratchPostgres } from '../../src/db/database.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { openStore, testSchemas, thing, waitUntil } from '../eventstore/contract.js';
import { deleteTestTopics, lastPosition, recordingLogger, saslSslListener, testBrokers } from './helpers.js';

const listener = await saslSslListener();
const skip = 'absent' in listener ? listener.absent : false;

/** Node's default CAs before any test trusts the broker's: what a service without tls.ca_file trusts. */
const nodeDefaultCertificates = tls.getCACertificates('default');

/** One retry after 50 ms rather than kafkajs's five from 300 ms: a refusal is the same one, said sooner. */
const quickFailure = { retry: { retries: 1, initialRetryTimeMs: 50 } };

/** A pino logger whose lines are kept, to look for what must never be logged. */
function keptLog(): { log: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: pino({ level: 'debug' }, { write: (line: string) => void lines.push(line) }), lines };
}

/** The configuration of a service on the SASL_SSL listener, its topics under a prefix of its own (deleted after `t`). */
function serviceConfig(t: Test, sasl: { mechanism: KafkaSaslMechanism; password?: string }, caFile: string): Config {
  if ('absent' in listener) throw new Error(listener.absent);
  const topicPrefix = `factlog-test-sasl-${randomUUID().slice(0, 8)}`;
  t.teardown(() => deleteTestTopics(testBrokers(), topicPrefix));
  return buildConfig({
    tls: { ca_file: caFile },
    bus: {
      backend: 'kafka',
      kafka: {
        brokers: listener.brokers,
        topic_prefix: topicPrefix,
        partitions: 2,
        session_timeout: '6s',
        tls: true,
        sasl: { mechanism: sasl.mechanism, username: listener.username, password: sasl.password ?? listener.password },
      },
    },
  });
}

t.test("without tls.ca_file naming the broker's CA, its certificate is refused, and the failure says so", { skip }, async (t) => {
  if ('absent' in listener) return;
  tls.setDefaultCACertificates(nodeDefaultCertificates);
  const config = serviceConfig(t, { mechanism: 'scram-sha-256' }, '');
  trustConfiguredCertificates(config, process.cwd());
  const { log } = keptLog();
  const bus = await openBus(config, testSchemas(), log, quickFailure);
  if (bus === null) throw new Error('bus.backend kafka opened no bus');
  t.teardown(() => bus.close());
  await t.rejects(bus.consume({ group: 'untrusted', types: ['ThingHappened'], handler: async () => undefined }), {
    message: new RegExp(
      `^the TLS certificate of Kafka at ${listener.brokers[0].replace(/\./g, '\\.')} is not trusted \\(SELF_SIGNED_CERT_IN_CHAIN: .*\\): add the CA that signed it to tls\\.ca_file \\(TLS_CA_FILE\\)$`,
    ),
  });
});

t.test("over TLS (tls.ca_file's CA) with each SASL mechanism: the relay publishes and the service's bus delivers every event", { skip }, async (t) => {
  if ('absent' in listener) return;
  t.teardown(() => tls.setDefaultCACertificates(nodeDefaultCertificates));
  const fixture = await openStore(() => openScratchPostgres(), { pollIntervalMs: 10 });
  t.teardown(() => fixture.close());
  const { store, db, schemas } = fixture;
  for (const mechanism of ['plain', 'scram-sha-256', 'scram-sha-512'] as const) {
    await t.test(mechanism, async (t) => {
      const config = serviceConfig(t, { mechanism }, listener.caFile);
      trustConfiguredCertificates(config, process.cwd());
      const appended: RecordedEvent[] = [];
      for (let index = 0; index < 6; index++) appended.push(...(await store.append(`thing-${mechanism}-${index % 3}`, [thing(`${mechanism}-${index}`)], 'any')).events);
      const relay = createKafkaRelay({ store, db, registry: schemas, kafka: kafkaOptions(config), log: recordingLogger() });
      t.teardown(() => relay.stop());
      await relay.start();
      await relay.caughtUp({ position: await lastPosition(db.knex) });

      const { log, lines } = keptLog();
      const bus = await openBus(config, schemas, log);
      if (bus === null) throw new Error('bus.backend kafka opened no bus');
      t.teardown(() => bus.close());
      const ours = new Set(appended.map((event) => event.eventId));
      const delivered = new Set<string>();
      await bus.consume({
        group: `sasl-${mechanism}`,
        types: ['ThingHappened'],
        handler: async (batch) => {
          for (const event of batch) if (ours.has(event.eventId)) delivered.add(event.eventId);
        },
      });
      await waitUntil(() => delivered.size === ours.size, 30_000, `the ${ours.size} events delivered over SASL_SSL with ${mechanism}`, 50);
      t.equal(delivered.size, 6, `every event published and delivered with ${mechanism}`);
      t.notOk(lines.some((line) => line.includes(listener.password)), 'the password is in no log line');
    });
  }
});

t.test("a wrong password: the start fails with kafkajs's SASL authentication error, named, and the password is never logged", { skip }, async (t) => {
  if ('absent' in listener) return;
  t.teardown(() => tls.setDefaultCACertificates(nodeDefaultCertificates));
  const wrong = `wrong-${randomUUID()}`;
  for (const mechanism of ['plain', 'scram-sha-512'] as const) {
    const config = serviceConfig(t, { mechanism, password: wrong }, listener.caFile);
    trustConfiguredCertificates(config, process.cwd());
    const { log, lines } = keptLog();
    const bus = await openBus(config, testSchemas(), log, quickFailure);
    if (bus === null) throw new Error('bus.backend kafka opened no bus');
    t.teardown(() => bus.close());
    await t.rejects(
      bus.consume({ group: 'refused', types: ['ThingHappened'], handler: async () => undefined }),
      {
        message: new RegExp(
          `^Kafka at ${listener.brokers[0].replace(/\./g, '\\.')} refused the service's SASL ${mechanism} login \\(KafkaJSSASLAuthenticationError: SASL .*authentication failed: .*\\): ` +
            'check bus\\.kafka\\.sasl\\.username, \\.password and \\.mechanism \\(BUS_KAFKA_SASL_USERNAME, BUS_KAFKA_SASL_PASSWORD, BUS_KAFKA_SASL_MECHANISM\\)$',
        ),
      },
      mechanism,
    );
    t.notOk(lines.some((line) => line.includes(wrong)), `${mechanism}: the password is in no log line`);
  }
});
