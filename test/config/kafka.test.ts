import { readFileSync } from 'node:fs';
import t from 'tap';
import { configSchemaPath } from '../../src/config/index.js';
import { KAFKA_SASL_LOGIN_CHOICES, KAFKA_SASL_LOGIN_MECHANISMS, KAFKA_SASL_MECHANISMS } from '../../src/config/types.js';
import { configErrorOf, load } from './helpers.js';

// A password no message may echo: it is a secret.
const password = 'pa55-w0rd with blanks ';
const sasl = { BUS_KAFKA_TLS: 'true', BUS_KAFKA_SASL_MECHANISM: 'scram-sha-512', BUS_KAFKA_SASL_USERNAME: 'factlog', BUS_KAFKA_SASL_PASSWORD: password };

t.test('bus.kafka.tls is off and bus.kafka.sasl has no mechanism by default', async (t) => {
  const { tls, sasl: defaults } = load().bus.kafka;
  t.equal(tls, false);
  t.same(defaults, { mechanism: 'none', username: '', password: '' });
});

t.test('bus.kafka.tls and bus.kafka.sasl are set by their generic environment variables', async (t) => {
  const kafka = load({ env: { ...sasl, BUS_KAFKA_SASL_MECHANISM: ' scram-sha-512\n' } }).bus.kafka;
  t.equal(kafka.tls, true);
  t.same(kafka.sasl, { mechanism: 'scram-sha-512', username: 'factlog', password }, 'the mechanism trimmed as a one-of value; the password taken exactly');
  for (const mechanism of ['plain', 'scram-sha-256'] as const) {
    t.equal(load({ env: { ...sasl, BUS_KAFKA_SASL_MECHANISM: mechanism } }).bus.kafka.sasl.mechanism, mechanism);
  }
  const cwd = t.testdir({
    'config.yaml': 'bus:\n  kafka:\n    tls: true\n    sasl:\n      mechanism: plain\n      username: svc\n',
  });
  t.same(
    load({ cwd, configPath: 'config.yaml', env: { BUS_KAFKA_SASL_PASSWORD: password } }).bus.kafka.sasl,
    { mechanism: 'plain', username: 'svc', password },
    'a file names the user, the environment gives the password',
  );
});

t.test('bus.kafka.sasl that cannot authenticate, or would authenticate in clear, is refused at load, naming key and variable', async (t) => {
  const problems: Array<[string, Record<string, string>, RegExp]> = [
    ['an unknown mechanism', { ...sasl, BUS_KAFKA_SASL_MECHANISM: 'gssapi' }, /bus\.kafka\.sasl\.mechanism: must be one of none, plain, scram-sha-256, scram-sha-512 \(set by environment variable BUS_KAFKA_SASL_MECHANISM\)/],
    ['no user name', { ...sasl, BUS_KAFKA_SASL_USERNAME: '' }, /bus\.kafka\.sasl\.username: is required when bus\.kafka\.sasl\.mechanism is scram-sha-512 \(BUS_KAFKA_SASL_USERNAME\)/],
    ['a blank password', { ...sasl, BUS_KAFKA_SASL_PASSWORD: '  ' }, /bus\.kafka\.sasl\.password: is required when bus\.kafka\.sasl\.mechanism is scram-sha-512 \(BUS_KAFKA_SASL_PASSWORD\)/],
    ['SCRAM without TLS', { ...sasl, BUS_KAFKA_TLS: 'false' }, /bus\.kafka\.sasl\.mechanism: scram-sha-512 needs bus\.kafka\.tls: true \(BUS_KAFKA_TLS\): SASL without TLS would send the user name and every event unencrypted/],
    ['PLAIN without TLS', { ...sasl, BUS_KAFKA_TLS: '0', BUS_KAFKA_SASL_MECHANISM: 'plain' }, /bus\.kafka\.sasl\.mechanism: plain needs bus\.kafka\.tls: true \(BUS_KAFKA_TLS\): SASL without TLS would send the password in clear/],
    ['credentials with no mechanism', { ...sasl, BUS_KAFKA_SASL_MECHANISM: 'none' }, /bus\.kafka\.sasl\.mechanism: is none, but sasl\.username or sasl\.password is set: choose plain, scram-sha-256 or scram-sha-512/],
    ['a TLS setting that is no boolean', { BUS_KAFKA_TLS: 'yes' }, /bus\.kafka\.tls: environment variable BUS_KAFKA_TLS="yes" is not a boolean/],
  ];
  for (const [what, env, expected] of problems) {
    const message = configErrorOf(() => load({ env }));
    t.match(message, expected, what);
    t.notOk(message.includes(password.trim()), `${what}: the password is not in the message`);
  }
  const both = configErrorOf(() => load({ env: { BUS_KAFKA_SASL_MECHANISM: 'plain' } }));
  t.match(both, /bus\.kafka\.sasl\.username: is required/, 'every problem at once: the user name,');
  t.match(both, /bus\.kafka\.sasl\.password: is required/, 'the password');
  t.match(both, /plain needs bus\.kafka\.tls: true/, 'and TLS');
});

t.test("the SASL mechanisms are one list: the schema's enum is KAFKA_SASL_MECHANISMS, and the logins are the rest of none", async (t) => {
  type Node = { properties: Record<string, Node>; enum?: string[] };
  const schema = JSON.parse(readFileSync(configSchemaPath(), 'utf8')) as Node;
  const mechanism = schema.properties.bus.properties.kafka.properties.sasl.properties.mechanism;
  t.same(mechanism.enum, [...KAFKA_SASL_MECHANISMS], 'schemas/config.schema.json lists the mechanisms of src/config/types.ts, in its order');
  t.same([...KAFKA_SASL_LOGIN_MECHANISMS], ['plain', 'scram-sha-256', 'scram-sha-512']);
  t.equal(KAFKA_SASL_LOGIN_CHOICES, 'plain, scram-sha-256 or scram-sha-512');
});
