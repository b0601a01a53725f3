import t from 'tap';
import { parseRetryAfter } from '../../src/util/retryAfter.js';

t.test('parseRetryAfter: delta-seconds or an HTTP date, as milliseconds', async (t) => {
  t.equal(parseRetryAfter('3'), 3000);
  t.equal(parseRetryAfter(' 0 '), 0);
  t.equal(parseRetryAfter('1.5'), 1500, 'fractional seconds as written');
  t.equal(parseRetryAfter(null), undefined);
  t.equal(parseRetryAfter(undefined), undefined);
  t.equal(parseRetryAfter('soon'), undefined);
  const now = Date.parse('2026-01-01T00:00:00Z');
  t.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:10 GMT', now), 10_000);
  t.equal(parseRetryAfter('Wed, 31 Dec 2025 23:59:00 GMT', now), 0, 'a past date is no wait');
});
