import t from 'tap';
import { chunked, chunkedBySize } from '../../src/util/chunked.js';

t.test('chunked: consecutive slices of at most the size, the last one shorter', async (t) => {
  t.same(chunked([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]);
  t.same(chunked([1, 2, 3, 4], 2), [[1, 2], [3, 4]]);
  t.same(chunked(['a'], 10), [['a']]);
  t.same(chunked([], 3), [], 'no items, no chunks');
  const items = [1, 2, 3];
  chunked(items, 1)[0].push(9);
  t.same(items, [1, 2, 3], 'the chunks are copies');
});

t.test('chunked refuses a size that is not a positive integer', async (t) => {
  for (const size of [0, -1, 1.5, Number.NaN]) t.throws(() => chunked([1], size), RangeError, String(size));
});

t.test('chunkedBySize: cut before a batch would pass the bytes or the count; a larger item alone', async (t) => {
  const sizeOf = (size: number) => size;
  t.same(chunkedBySize([10, 10, 10], { maxBytes: 100, sizeOf }), [[10, 10, 10]], 'small ones together');
  t.same(chunkedBySize([40, 40, 40], { maxBytes: 100, sizeOf }), [[40, 40], [40]], 'cut before passing the bound');
  t.same(chunkedBySize([40, 60, 1], { maxBytes: 100, sizeOf }), [[40, 60], [1]], 'a batch may reach the bound exactly');
  t.same(chunkedBySize([10, 500, 10], { maxBytes: 100, sizeOf }), [[10], [500], [10]], 'one over the bound goes alone');
  t.same(chunkedBySize([1, 1, 1, 1, 1], { maxBytes: 100, maxItems: 2, sizeOf }), [[1, 1], [1, 1], [1]], 'and at most maxItems');
  t.same(chunkedBySize([], { maxBytes: 100, sizeOf }), [], 'no items, no batches');
});
