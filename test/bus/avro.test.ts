import t from 'tap';
import { decodeEvent, encodeEvent, EventDecodeError, eventHeaders, type WireMessage } from '../../src/bus/avro.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { InvalidEventError } from '../../src/eventstore/port.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { testSchemas } from '../eventstore/contract.js';

function recorded(overrides: Partial<RecordedEvent> = {}): RecordedEvent {
  return {
    eventId: '6f1d2c1e-8a1b-4c55-9a43-0d8f7e3b2a10',
    streamId: 'thing-42',
    streamVersion: 3,
    globalPosition: 17,
    type: 'ThingHappened',
    schemaVersion: 1,
    repositoryId: 'repo-1',
    actor: 'user-1',
    causationId: 'cause-1',
    correlationId: 'corr-1',
    occurredAt: '2025-01-02T03:04:05.678Z',
    data: { name: 'gizmo', count: 2, tags: ['a', 'b'], note: 'hi', detail: { level: 7 } },
    ...overrides,
  };
}

/** kafkajs hands header values to consumers as Buffers. */
function asConsumed(message: { key: string; value: Buffer; headers: Record<string, string> }): WireMessage {
  return {
    key: Buffer.from(message.key),
    value: message.value,
    headers: Object.fromEntries(Object.entries(message.headers).map(([name, value]) => [name, Buffer.from(value)])),
  };
}

function failureOf(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    if (error instanceof EventDecodeError) return error.failure;
    throw error;
  }
  throw new Error('expected an EventDecodeError, nothing was thrown');
}

t.test('round trip: the decoded event equals the recorded one, envelope in headers, key = stream id', async (t) => {
  const registry = testSchemas();
  const event = recorded();
  const message = encodeEvent(registry, event);
  t.equal(message.key, 'thing-42');
  t.ok(Buffer.isBuffer(message.value));
  t.same(registry.typeFor('ThingHappened').fromBuffer(message.value).name, 'gizmo', 'the value is plain Avro of the data');
  t.same(message.headers, {
    'event-id': event.eventId,
    'event-type': 'ThingHappened',
    'stream-id': 'thing-42',
    'stream-version': '3',
    'global-position': '17',
    'schema-version': '1',
    'repository-id': 'repo-1',
    actor: 'user-1',
    'causation-id': 'cause-1',
    'correlation-id': 'corr-1',
    'occurred-at': '2025-01-02T03:04:05.678Z',
    'schema-fingerprint': registry.fingerprint('ThingHappened'),
  });
  const decoded = decodeEvent(registry, asConsumed(message));
  t.strictSame(decoded, event);
  t.equal(Object.getPrototypeOf(decoded.data), Object.prototype, 'data is a plain object, not an avsc record instance');
  t.strictSame(decodeEvent(registry, message), event, 'string headers decode too');
});

t.test('null envelope fields are absent headers and come back as null; defaults are filled in', async (t) => {
  const registry = testSchemas();
  const event = recorded({ repositoryId: null, causationId: null, correlationId: null, data: { name: 'x', count: 1 } });
  const message = encodeEvent(registry, event);
  t.notOk(eventHeaders.repositoryId in message.headers);
  t.notOk(eventHeaders.causationId in message.headers);
  t.notOk(eventHeaders.correlationId in message.headers);
  const decoded = decodeEvent(registry, asConsumed(message));
  t.equal(decoded.repositoryId, null);
  t.equal(decoded.causationId, null);
  t.equal(decoded.correlationId, null);
  t.strictSame(decoded.data, { name: 'x', count: 1, tags: [], note: null, detail: null });
  const empty = decodeEvent(registry, asConsumed(encodeEvent(registry, recorded({ repositoryId: '' }))));
  t.equal(empty.repositoryId, '', 'an empty string stays an empty string');
});

t.test('bytes, fixed, maps, longs and wrapped unions survive the JSON <-> Avro conversion', async (t) => {
  const registry = new EventSchemaRegistry();
  registry.register('VectorStored', {
    type: 'record',
    name: 'VectorStored',
    namespace: 'factlog.events',
    fields: [
      { name: 'vector', type: 'bytes' },
      { name: 'digest', type: { type: 'fixed', name: 'Digest', size: 4 } },
      { name: 'maybe_bytes', type: ['null', 'bytes'], default: null },
      { name: 'weights', type: { type: 'map', values: 'double' } },
      { name: 'big', type: 'long' },
      // int and double are both numbers: avsc wraps this union ({"double": 2.5}) on the wire side.
      { name: 'score', type: ['null', 'int', 'double'], default: null },
      { name: 'chunks', type: { type: 'array', items: 'bytes' }, default: [] },
    ],
  });
  const floats = Buffer.from(new Float32Array([0.5, -1.25, 3]).buffer).toString('base64');
  const data = {
    vector: floats,
    digest: Buffer.from([1, 2, 3, 4]).toString('base64'),
    maybe_bytes: Buffer.from('hello').toString('base64'),
    weights: { a: 0.25, b: 4 },
    big: 2 ** 52 + 3,
    score: 2.5,
    chunks: [Buffer.from('x').toString('base64'), ''],
  };
  t.equal(registry.typeFor('VectorStored').typeName, 'record');
  const event = recorded({ type: 'VectorStored', streamId: 'fact-9', data });
  const decoded = decodeEvent(registry, asConsumed(encodeEvent(registry, event)));
  t.strictSame(decoded.data, data);
  const intScore = decodeEvent(registry, encodeEvent(registry, recorded({ type: 'VectorStored', data: { ...data, score: 3, maybe_bytes: null } })));
  t.equal(intScore.data.score, 3);
  t.equal(intScore.data.maybe_bytes, null);
});

t.test('encode refuses data its schema does not accept, and types without a schema', async (t) => {
  const registry = testSchemas();
  t.throws(() => encodeEvent(registry, recorded({ data: { name: 'x' } })), InvalidEventError, 'missing required field');
  t.throws(() => encodeEvent(registry, recorded({ data: { name: 'x', count: 'two' } })), /count: expected int/);
  t.throws(() => encodeEvent(registry, recorded({ type: 'NoSuchEvent' })), /no schema is registered/);
});

t.test('decode errors say what is wrong', async (t) => {
  const registry = testSchemas();
  const good = encodeEvent(registry, recorded());

  const unknownReader = new EventSchemaRegistry();
  t.equal(failureOf(() => decodeEvent(unknownReader, good)), 'unknown-type');
  t.throws(() => decodeEvent(unknownReader, good), /unknown-type: no schema is registered for event type ThingHappened/);

  const changed = new EventSchemaRegistry();
  changed.register('ThingHappened', {
    type: 'record',
    name: 'ThingHappened',
    namespace: 'factlog.events',
    fields: [{ name: 'name', type: 'string' }],
  });
  t.equal(failureOf(() => decodeEvent(changed, good)), 'fingerprint-mismatch');
  t.throws(() => decodeEvent(changed, good), /ThingHappened was written with schema [0-9a-f]{16}…, this reader has [0-9a-f]{16}…/);

  t.equal(failureOf(() => decodeEvent(registry, { ...good, value: Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]) })), 'undecodable-value');
  t.equal(failureOf(() => decodeEvent(registry, { ...good, value: good.value.subarray(0, good.value.length - 2) })), 'undecodable-value', 'truncated');
  t.equal(failureOf(() => decodeEvent(registry, { ...good, value: Buffer.concat([good.value, Buffer.from([0])]) })), 'undecodable-value', 'trailing bytes');
  t.equal(failureOf(() => decodeEvent(registry, { ...good, value: null })), 'undecodable-value', 'no value');
  t.throws(() => decodeEvent(registry, { ...good, value: Buffer.from('garbage!') }), /undecodable-value: 8 bytes are not a ThingHappened/);

  const without = (name: string): WireMessage => {
    const headers = { ...good.headers };
    delete headers[name];
    return { ...good, headers };
  };
  for (const name of ['event-type', 'event-id', 'stream-id', 'stream-version', 'global-position', 'actor', 'occurred-at', 'schema-fingerprint']) {
    t.equal(failureOf(() => decodeEvent(registry, without(name))), 'missing-header', `without ${name}`);
  }
  t.throws(() => decodeEvent(registry, { value: good.value }), /missing-header: header event-type is missing/, 'no headers at all');

  const withHeader = (name: string, value: string): WireMessage => ({ ...good, headers: { ...good.headers, [name]: value } });
  t.equal(failureOf(() => decodeEvent(registry, withHeader('stream-version', 'three'))), 'bad-header');
  t.equal(failureOf(() => decodeEvent(registry, withHeader('stream-version', '-1'))), 'bad-header');
  t.equal(failureOf(() => decodeEvent(registry, withHeader('global-position', '0'))), 'bad-header', 'positions start at 1');
  t.equal(failureOf(() => decodeEvent(registry, withHeader('global-position', '1e3'))), 'bad-header');
  t.equal(failureOf(() => decodeEvent(registry, withHeader('occurred-at', 'yesterday'))), 'bad-header');
  t.equal(failureOf(() => decodeEvent(registry, { ...good, key: 'thing-43' })), 'bad-header', 'key differs from stream id');
  t.strictSame(decodeEvent(registry, { ...good, key: null }), recorded(), 'a message without key still decodes');
});
