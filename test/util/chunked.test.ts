import t from 'tap';
import { chunked } from '../../src/util/chunked.js';

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
