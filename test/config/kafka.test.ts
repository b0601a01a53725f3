import { readFileSync } from 'node:fs';
import path from 'node:path';
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

t.test('bus.kafka.sasl.mechanism is taken in any case, from the environment and from a file, and lower-cased at load', async (t) => {
  // Kafka's documentation and the managed providers (Confluent, MSK, Aiven) write the mechanisms upper-case.
  // One subtest each: a refused spelling throws, and would hide the ones after it.
  const spellings: Array<[string, string]> = [
    ['SCRAM-SHA-512', 'scram-sha-512'],
    ['Scram-Sha-256', 'scram-sha-256'],
    ['PLAIN', 'plain'],
    [' SCRAM-sha-512\n', 'scram-sha-512'],
  ];
  for (const [given, expected] of spellings) {
    t.test(`BUS_KAFKA_SASL_MECHANISM=${JSON.stringify(given)}`, async (t) => {
      t.same(load({ env: { ...sasl, BUS_KAFKA_SASL_MECHANISM: given } }).bus.kafka.sasl, { mechanism: expected, username: 'factlog', password });
    });
  }
  t.test('BUS_KAFKA_SASL_MECHANISM=NONE', async (t) => {
    t.equal(load({ env: { BUS_KAFKA_SASL_MECHANISM: 'NONE' } }).bus.kafka.sasl.mechanism, 'none');
  });
  const cwd = t.testdir({
    'upper.yaml': 'bus:\n  kafka:\n    tls: true\n    sasl:\n      mechanism: SCRAM-SHA-256\n      username: svc\n',
    'mixed.yaml': 'bus:\n  kafka:\n    tls: true\n    sasl:\n      mechanism: "Plain"\n      username: svc\n',
  });
  const fromFile = (file: string, env: Record<string, string> = {}) =>
    load({ cwd, configPath: file, env: { BUS_KAFKA_SASL_PASSWORD: password, ...env } }).bus.kafka.sasl;
  t.test('upper case in a file', async (t) => {
    t.same(fromFile('upper.yaml'), { mechanism: 'scram-sha-256', username: 'svc', password });
  });
  t.test('mixed case in a file', async (t) => {
    t.same(fromFile('mixed.yaml'), { mechanism: 'plain', username: 'svc', password });
  });
  t.test('the environment over a file, both upper-case', async (t) => {
    t.equal(fromFile('upper.yaml', { BUS_KAFKA_SASL_MECHANISM: 'SCRAM-SHA-512' }).mechanism, 'scram-sha-512');
  });
  t.test('everything after the load sees the one spelling: the rules between keys name it lower-case', async (t) => {
    t.match(
      configErrorOf(() => load({ env: { ...sasl, BUS_KAFKA_TLS: 'false', BUS_KAFKA_SASL_MECHANISM: 'PLAIN' } })),
      /^invalid configuration: bus\.kafka\.sasl\.mechanism: plain needs bus\.kafka\.tls: true \(BUS_KAFKA_TLS\)/,
    );
  });
});

t.test('bus.kafka.sasl.mechanism naming no mechanism in any case is still refused at load, listing the mechanisms, without the password', async (t) => {
  for (const given of ['GSSAPI', 'OAUTHBEARER', 'scram-sha-1', 'SCRAM_SHA_512', 'P LAIN']) {
    const message = configErrorOf(() => load({ env: { ...sasl, BUS_KAFKA_SASL_MECHANISM: given } }));
    t.match(message, /bus\.kafka\.sasl\.mechanism: must be one of none, plain, scram-sha-256, scram-sha-512 \(set by environment variable BUS_KAFKA_SASL_MECHANISM\)/, given);
    t.notOk(message.includes(password.trim()), `${given}: the password is not in the message`);
  }
  const cwd = t.testdir({ 'config.yaml': 'bus:\n  kafka:\n    tls: true\n    sasl:\n      mechanism: " PLAIN"\n      username: svc\n' });
  const message = configErrorOf(() => load({ cwd, configPath: 'config.yaml', env: { BUS_KAFKA_SASL_PASSWORD: password } }));
  t.match(message, /bus\.kafka\.sasl\.mechanism: must be one of none, plain, scram-sha-256, scram-sha-512 \(set by .*config\.yaml\)/, 'a quoted value with a blank, from a file');
  t.notOk(message.includes(password.trim()), 'the password is not in the message');
});

t.test('bus.kafka.sasl.mechanism of the wrong type in a file is one problem: its type, not also the list of mechanisms', async (t) => {
  const cwd = t.testdir({ 'config.yaml': 'bus:\n  kafka:\n    tls: true\n    sasl:\n      mechanism: 5\n      username: svc\n' });
  const message = configErrorOf(() => load({ cwd, configPath: 'config.yaml', env: { BUS_KAFKA_SASL_PASSWORD: password } }));
  t.equal(message, `invalid configuration: bus.kafka.sasl.mechanism: must be a string, got a number (set by ${path.join(cwd, 'config.yaml')})`);
});

t.test('a SASL setting set by its variable names the variable once', async (t) => {
  const problems: Array<[string, Record<string, string>, string]> = [
    ['no user name', { ...sasl, BUS_KAFKA_SASL_USERNAME: '' }, 'bus.kafka.sasl.username: is required when bus.kafka.sasl.mechanism is scram-sha-512 (set by environment variable BUS_KAFKA_SASL_USERNAME)'],
    ['a blank password', { ...sasl, BUS_KAFKA_SASL_PASSWORD: '  ' }, 'bus.kafka.sasl.password: is required when bus.kafka.sasl.mechanism is scram-sha-512 (set by environment variable BUS_KAFKA_SASL_PASSWORD)'],
    ['credentials with no mechanism', { ...sasl, BUS_KAFKA_SASL_MECHANISM: 'none' }, 'bus.kafka.sasl.mechanism: is none, but sasl.username or sasl.password is set: choose plain, scram-sha-256 or scram-sha-512 (set by environment variable BUS_KAFKA_SASL_MECHANISM)'],
    ['an unknown mechanism', { ...sasl, BUS_KAFKA_SASL_MECHANISM: 'bogus' }, 'bus.kafka.sasl.mechanism: must be one of none, plain, scram-sha-256, scram-sha-512 (set by environment variable BUS_KAFKA_SASL_MECHANISM)'],
    // Another key's variable, as where to fix it, stays.
    ['SCRAM without TLS', { ...sasl, BUS_KAFKA_TLS: 'false' }, 'bus.kafka.sasl.mechanism: scram-sha-512 needs bus.kafka.tls: true (BUS_KAFKA_TLS): SASL without TLS would send the user name and every event unencrypted (set by environment variable BUS_KAFKA_SASL_MECHANISM)'],
  ];
  for (const [what, env, expected] of problems) t.equal(configErrorOf(() => load({ env })), `invalid configuration: ${expected}`, what);
  const unset = configErrorOf(() => load({ env: { BUS_KAFKA_TLS: 'true', BUS_KAFKA_SASL_USERNAME: 'u' } }));
  t.match(unset, /bus\.kafka\.sasl\.mechanism: is none, but .* \(BUS_KAFKA_SASL_MECHANISM\)$/, 'a mechanism left unset: the variable that would set it, as the hint');
});

t.test('bus.kafka.sasl that cannot authenticate, or would authenticate in clear, is refused at load, naming key and variable', async (t) => {
  const problems: Array<[string, Record<string, string>, RegExp]> = [
    ['an unknown mechanism', { ...sasl, BUS_KAFKA_SASL_MECHANISM: 'gssapi' }, /bus\.kafka\.sasl\.mechanism: must be one of none, plain, scram-sha-256, scram-sha-512 \(set by environment variable BUS_KAFKA_SASL_MECHANISM\)/],
    ['no user name', { ...sasl, BUS_KAFKA_SASL_USERNAME: '' }, /bus\.kafka\.sasl\.username: is required when bus\.kafka\.sasl\.mechanism is scram-sha-512 \(set by environment variable BUS_KAFKA_SASL_USERNAME\)/],
    ['a blank password', { ...sasl, BUS_KAFKA_SASL_PASSWORD: '  ' }, /bus\.kafka\.sasl\.password: is required when bus\.kafka\.sasl\.mechanism is scram-sha-512 \(set by environment variable BUS_KAFKA_SASL_PASSWORD\)/],
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
