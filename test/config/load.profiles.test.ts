import t from 'tap';
import { loadConfig } from '../../src/config/load.js';

const load = (env: Record<string, string>, files: Record<string, string> = {}) =>
  loadConfig({ cwd: t.testdir({ configs: files }), env, writeDefaults: false });

t.test('profile distributed selects EventStoreDB, Kafka and OpenSearch; each role can be overridden', async (t) => {
  const embedded = load({});
  t.same([embedded.eventstore.backend, embedded.bus.backend, embedded.search.backend], ['postgres', 'log', 'postgres']);

  const distributed = load({ PROFILE: 'distributed' });
  t.same([distributed.eventstore.backend, distributed.bus.backend, distributed.search.backend], ['eventstoredb', 'kafka', 'opensearch']);
  t.same(distributed.bus.kafka.brokers, ['localhost:9092']);
  t.equal(distributed.bus.kafka.partitions, 6, 'defaults under the profile stay');

  const mixed = load({ PROFILE: 'distributed', EVENTSTORE_BACKEND: 'postgres', BUS_KAFKA_BROKERS: 'k1:9092,k2:9092' });
  t.equal(mixed.eventstore.backend, 'postgres', 'the environment beats the profile');
  t.same(mixed.bus.kafka.brokers, ['k1:9092', 'k2:9092']);

  const fromFile = load({}, { 'config.local.yaml': 'profile: distributed\nsearch:\n  backend: postgres\n' });
  t.equal(fromFile.bus.backend, 'kafka', 'profile set in a file applies its layer');
  t.equal(fromFile.search.backend, 'postgres', 'and the file beats the profile');
});

t.test('role settings are validated', async (t) => {
  t.throws(() => load({ BUS_BACKEND: 'kafka' }), /bus\.kafka\.brokers: needs at least one/);
  t.throws(() => load({ SEARCH_BACKEND: 'opensearch' }), /search\.opensearch\.url: is required/);
  t.throws(() => load({ BUS_BACKEND: 'rabbit' }), /bus\.backend/);
  t.throws(() => load({ BUS_BACKEND: 'kafka', BUS_KAFKA_BROKERS: 'no-port' }), /bus\.kafka\.brokers/);
  t.throws(() => load({ BUS_KAFKA_SESSION_TIMEOUT: '2s' }), /bus\.kafka\.session_timeout: must be between 6s and 5m/);
  t.throws(() => load({ BUS_KAFKA_SESSION_TIMEOUT: '10m' }), /bus\.kafka\.session_timeout: must be between 6s and 5m/);
  t.equal(load({ BUS_KAFKA_SESSION_TIMEOUT: '6s' }).bus.kafka.session_timeout, '6s', 'the broker minimum is accepted');
  t.equal(load({}).bus.kafka.session_timeout, '30s');
});
