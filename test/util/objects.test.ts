import t from 'tap';
import { isPlainObject } from '../../src/util/objects.js';

t.test('isPlainObject: objects of JSON and YAML, with or without a prototype', async (t) => {
  t.ok(isPlainObject({}));
  t.ok(isPlainObject(JSON.parse('{"a": {"b": 1}}')));
  t.ok(isPlainObject(Object.create(null)), 'a dictionary without a prototype');
});

t.test('isPlainObject: not null, arrays, scalars or class instances', async (t) => {
  for (const value of [null, undefined, [], [1], 'text', 3, true, new Uint8Array(2), new Date(0), new Map(), new (class Point {})()]) {
    t.notOk(isPlainObject(value), `${Object.prototype.toString.call(value)} is not a plain object`);
  }
});
