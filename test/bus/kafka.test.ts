import t from 'tap';
import { isRebalanceNotice, kafkaClientConfig, validateKafkaOptions, type KafkaOptions } from '../../src/bus/kafka.js';

t.test("kafkajs's notices of a group rebalancing are told from its other warnings and errors", async (t) => {
  // What kafkajs 2 logs when a member joins: the consumer runner's warning, and the connection's error for the heartbeat.
  t.ok(isRebalanceNotice('The group is rebalancing, re-joining', { groupId: 'g', error: 'The group is rebalancing, so a rejoin is needed' }));
  t.ok(isRebalanceNotice('Response Heartbeat(key: 12, version: 3)', { error: 'The group is rebalancing, so a rejoin is needed', correlationId: 7 }));
  t.notOk(isRebalanceNotice('Response Metadata(key: 3, version: 6)', { error: 'There is no leader for this topic-partition as we are in the middle of a leadership election' }));
  t.notOk(isRebalanceNotice('Connection error: connect ECONNREFUSED 127.0.0.1:19092', {}));
  t.notOk(isRebalanceNotice('Crash: KafkaJSNumberOfRetriesExceeded', { error: 'rebalance timed out' }), 'a failed rebalance is not routine');
});

const plainOptions: KafkaOptions = { brokers: ['kafka-1:9093', 'kafka-2:9093'], clientId: 'factlog', topicPrefix: 'factlog', partitions: 6, replicationFactor: 3 };

t.test("every Kafka client's options: brokers and a client id per role; TLS, SASL and retries only when asked for", async (t) => {
  t.same(kafkaClientConfig(plainOptions, 'relay'), { clientId: 'factlog-relay', brokers: ['kafka-1:9093', 'kafka-2:9093'] }, 'plaintext, no SASL, kafkajs\'s retries');
  t.same(kafkaClientConfig({ ...plainOptions, tls: false }, 'bus'), { clientId: 'factlog-bus', brokers: ['kafka-1:9093', 'kafka-2:9093'] });
  for (const mechanism of ['plain', 'scram-sha-256', 'scram-sha-512'] as const) {
    const options = { ...plainOptions, tls: true, sasl: { mechanism, username: 'svc', password: 's3cret' }, retry: { retries: 2, initialRetryTimeMs: 50 } };
    t.same(
      kafkaClientConfig(options, 'bus'),
      {
        clientId: 'factlog-bus',
        brokers: ['kafka-1:9093', 'kafka-2:9093'],
        // No CA of its own: tls.connect then trusts Node's default CAs, which tls.ca_file extends.
        ssl: true,
        sasl: { mechanism, username: 'svc', password: 's3cret' },
        retry: { retries: 2, initialRetryTime: 50 },
      },
      mechanism,
    );
  }
  t.not(kafkaClientConfig(plainOptions, 'bus').brokers, plainOptions.brokers, 'kafkajs gets a copy of the brokers');
});

t.test('Kafka options with SASL that cannot authenticate are refused before a client is made', async (t) => {
  t.throws(() => validateKafkaOptions({ ...plainOptions, tls: true, sasl: { mechanism: 'gssapi' as 'plain', username: 'svc', password: 'p' } }), {
    message: 'kafka sasl mechanism "gssapi" must be plain, scram-sha-256 or scram-sha-512',
  });
  // The configuration lower-cases the mechanism at load: the adapter takes only that spelling, and never `none` (no SASL is no `sasl`).
  for (const mechanism of ['PLAIN', 'SCRAM-SHA-512', 'none', '']) {
    t.throws(() => validateKafkaOptions({ ...plainOptions, tls: true, sasl: { mechanism: mechanism as 'plain', username: 'svc', password: 'p' } }), {
      message: `kafka sasl mechanism ${JSON.stringify(mechanism)} must be plain, scram-sha-256 or scram-sha-512`,
    }, JSON.stringify(mechanism));
  }
  t.throws(() => validateKafkaOptions({ ...plainOptions, tls: true, sasl: { mechanism: 'plain', username: '', password: 'p' } }), { message: 'kafka sasl needs a username and a password' });
  t.throws(() => validateKafkaOptions({ ...plainOptions, tls: true, sasl: { mechanism: 'plain', username: 'svc', password: '' } }), { message: 'kafka sasl needs a username and a password' });
  t.doesNotThrow(() => validateKafkaOptions({ ...plainOptions, tls: true, sasl: { mechanism: 'scram-sha-256', username: 'svc', password: 'p' } }));
});
