import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { InvalidEventError } from '../../src/eventstore/port.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';

const record = (name: string, fields: unknown[], namespace = 'factlog.events') => ({ type: 'record', name, namespace, fields });

t.test('loads every schema of schemas/events', async (t) => {
  const registry = await EventSchemaRegistry.load();
  const files = (await readdir('schemas/events')).filter((file) => file.endsWith('.avsc'));
  t.same(registry.eventTypes(), files.map((file) => path.basename(file, '.avsc')).sort());
  for (const type of registry.eventTypes()) {
    t.equal(registry.typeFor(type).name, `factlog.events.${type}`);
    t.match(registry.fingerprint(type), /^[0-9a-f]{64}$/);
  }
});

t.test('load refuses malformed schema files', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['Good.avsc', '{ not json', /Good.avsc: not JSON/],
    ['Named.avsc', JSON.stringify(record('Other', [])), /must equal the event type Named/],
    ['Spaced.avsc', JSON.stringify(record('Spaced', [], 'elsewhere')), /namespace must be factlog.events/],
    ['Plain.avsc', JSON.stringify({ type: 'string' }), /must be an Avro record/],
    ['Broken.avsc', JSON.stringify(record('Broken', [{ name: 'x', type: 'no-such-type' }])), /no-such-type/],
  ];
  for (const [file, text, message] of cases) {
    const directory = await mkdtemp(path.join(tmpdir(), 'factlog-schemas-'));
    t.teardown(() => rm(directory, { recursive: true, force: true }));
    await writeFile(path.join(directory, file), text);
    await writeFile(path.join(directory, 'README.md'), 'not a schema'); // ignored
    await t.rejects(EventSchemaRegistry.load(directory), message, file);
  }
  const directory = await mkdtemp(path.join(tmpdir(), 'factlog-schemas-'));
  t.teardown(() => rm(directory, { recursive: true, force: true }));
  await writeFile(path.join(directory, 'Full.avsc'), JSON.stringify(record('factlog.events.Full', [{ name: 'a', type: 'int' }], undefined)));
  t.same((await EventSchemaRegistry.load(directory)).eventTypes(), ['Full'], 'a full name carries the namespace');
});

t.test('validate covers the Avro types in their JSON form', async (t) => {
  const registry = new EventSchemaRegistry();
  registry.register(
    'Everything',
    JSON.stringify(
      record('Everything', [
        { name: 'flag', type: 'boolean' },
        { name: 'big', type: 'long' },
        { name: 'ratio', type: 'double' },
        { name: 'vector', type: 'bytes' },
        { name: 'hash', type: { type: 'fixed', name: 'Hash4', size: 4 } },
        { name: 'colour', type: { type: 'enum', name: 'Colour', symbols: ['RED', 'GREEN'] } },
        { name: 'labels', type: { type: 'map', values: 'int' }, default: {} },
        { name: 'either', type: ['null', 'string', 'int'], default: null },
        { name: 'when', type: { type: 'long', logicalType: 'timestamp-millis' } },
      ]),
    ),
  );
  const good = {
    flag: true,
    big: 2 ** 40,
    ratio: 0.5,
    vector: Buffer.from(new Float32Array([1, 2]).buffer).toString('base64'),
    hash: Buffer.from([1, 2, 3, 4]).toString('base64'),
    colour: 'RED',
    when: 1700000000000,
  };
  t.same(registry.validate('Everything', good), { ...good, labels: {}, either: null }, 'defaults filled in');
  t.same(registry.validate('Everything', { ...good, either: 3, labels: { a: 1 } }).either, 3);
  t.equal(registry.validate('Everything', { ...good, either: 'x' }).either, 'x');
  const bad: Array<[Record<string, unknown>, RegExp]> = [
    [{ flag: 'yes' }, /flag: expected boolean/],
    [{ big: 1.5 }, /big: expected long/],
    [{ ratio: Number.NaN }, /ratio: expected double/],
    [{ vector: 'not base64!' }, /vector: expected bytes/],
    [{ hash: Buffer.from([1, 2]).toString('base64') }, /hash: expected fixed of 4 bytes/],
    [{ colour: 'BLUE' }, /colour: expected one of RED\|GREEN/],
    [{ labels: { a: 'one' } }, /labels\["a"\]: expected int/],
    [{ labels: [] }, /labels: expected map/],
    [{ either: true }, /either: expected one of null \| string \| int/],
    [{ when: '2024-01-01' }, /when: expected long/],
  ];
  for (const [change, message] of bad) {
    t.throws(() => registry.validate('Everything', { ...good, ...change }), message, JSON.stringify(change));
  }
  t.throws(() => registry.validate('Everything', { ...good, ratio: undefined }), /ratio: required field is missing/);
  t.same(registry.validate('Everything', { ...good, extra: undefined }), { ...good, labels: {}, either: null }, 'an undefined key counts as absent');
  t.throws(() => registry.validate('Everything', null), /\(root\): expected record/);
  const unknown = t.throws(() => registry.validate('Nothing', {}));
  t.ok(unknown instanceof InvalidEventError && unknown.eventType === 'Nothing', 'unknown type is an InvalidEventError');
  t.throws(() => registry.typeFor('Nothing'), InvalidEventError);
  t.throws(() => registry.fingerprint('Nothing'), InvalidEventError);
});

t.test('fingerprints identify the schema, typeFor encodes Avro', async (t) => {
  const first = new EventSchemaRegistry();
  first.register('Thing', record('Thing', [{ name: 'a', type: 'int' }]));
  const same = new EventSchemaRegistry();
  same.register('Thing', { ...record('Thing', [{ name: 'a', type: 'int' }]), doc: 'docs do not change the fingerprint' });
  const changed = new EventSchemaRegistry();
  changed.register('Thing', record('Thing', [{ name: 'a', type: 'long' }]));
  t.equal(first.fingerprint('Thing'), same.fingerprint('Thing'));
  t.not(first.fingerprint('Thing'), changed.fingerprint('Thing'));
  const type = first.typeFor('Thing');
  t.same(type.fromBuffer(type.toBuffer({ a: 7 })), { a: 7 });
  t.throws(() => first.register('Thing', record('Thing', [], 'other.ns')), /namespace/);
  t.throws(() => first.register('Thing', '[1, 2]'), /must be an Avro record/);
});
