import t from 'tap';
import { DumpBlob } from '../../src/db/pgliteDump.js';

t.test('a DumpBlob hands over the bytes it holds, as a Blob of their size', async (t) => {
  const bytes = new Uint8Array([1, 2, 3, 4, 5]);
  const blob = new DumpBlob(bytes);
  t.ok(blob instanceof Blob, 'PGlite takes it where it takes a Blob');
  t.equal(blob.size, 5);
  const whole = await blob.arrayBuffer();
  t.equal(whole, bytes.buffer, 'the very buffer, not a copy');
  t.same([...new Uint8Array(whole)], [1, 2, 3, 4, 5]);
  t.equal(await blob.bytes(), bytes);
});

t.test('a DumpBlob over part of a buffer gives that part alone', async (t) => {
  const backing = new Uint8Array([9, 1, 2, 3, 9]);
  const blob = new DumpBlob(backing.subarray(1, 4));
  t.equal(blob.size, 3);
  t.same([...new Uint8Array(await blob.arrayBuffer())], [1, 2, 3]);
});

t.test('a DumpBlob is read whole: the partial reads of a Blob are refused, not answered empty', async (t) => {
  const blob = new DumpBlob(new Uint8Array([1, 2, 3]));
  t.throws(() => blob.slice(), /read whole/);
  t.throws(() => blob.stream(), /read whole/);
  t.throws(() => blob.text(), /read whole/);
});
