import t from 'tap';
import { idListColumn } from '../../src/read/present.js';

t.test('idListColumn: the ids of a jsonb list, parsed or as text', async (t) => {
  t.same(idListColumn(['a', 'b']), ['a', 'b'], 'parsed by the driver');
  t.same(idListColumn('["a","b"]'), ['a', 'b'], 'text from a driver that does not parse jsonb');
  t.same(idListColumn(['a', 1, null, 'b']), ['a', 'b'], 'only the strings');
  t.same(idListColumn(null), [], 'no list, no ids');
  t.same(idListColumn('{"a":1}'), []);
});
