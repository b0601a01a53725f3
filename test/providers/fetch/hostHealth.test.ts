import t from 'tap';

import { openTestPglite } from '../../helpers/pglite.js';
import {
  autoSkipDecision,
  createHostHealthReader,
  hostOfUrl,
  isAutoSkipReason,
  type HostHealthRecord,
} from '../../../src/providers/fetch/hostHealth.js';
import { migrateReadModels } from '../../../projections/migrations/index.js';

const settings = { enabled: true, minSample: 100, failureThreshold: 0.85, cooldownMs: 24 * 3_600_000 };
const lastFailureAt = '2026-11-21T10:00:00.000Z';
const at = (iso: string) => Date.parse(iso);
const record = (attempts: number, failures: number, last: string | null = lastFailureAt): HostHealthRecord => ({
  host: 'example.org',
  attempts,
  failures,
  lastFailureAt: last,
  lastError: 'http 500',
});

t.test('auto-skip decision: sample, threshold, cooldown, switch', async (t) => {
  const now = at('2026-11-21T12:00:00Z');
  const decision = autoSkipDecision(record(100, 95), settings, now);
  t.same(decision, {
    host: 'example.org',
    attempts: 100,
    failures: 95,
    until: '2026-11-22T10:00:00Z',
    reason: 'auto-skipped: host example.org failed 95 of 100 fetches (≥ 85%); skipping until 2026-11-22T10:00:00Z',
  });
  t.ok(isAutoSkipReason(decision?.reason));
  t.ok(autoSkipDecision(record(100, 85), settings, now), 'exactly at the threshold skips');
  t.equal(autoSkipDecision(record(100, 84), settings, now), null, 'below the threshold');
  t.equal(autoSkipDecision(record(99, 99), settings, now), null, 'below min_sample');
  t.equal(autoSkipDecision(record(100, 100), { ...settings, enabled: false }, now), null, 'disabled');
  t.equal(autoSkipDecision(record(100, 100), settings, at('2026-11-22T10:00:00Z')), null, 'the cooldown is over');
  t.ok(autoSkipDecision(record(100, 100), settings, at('2026-11-22T09:59:59Z')), 'a second before it ends');
  t.equal(autoSkipDecision(record(100, 100, null), settings, now), null, 'no failure time, no skip');
  t.equal(autoSkipDecision(null, settings, now), null, 'an unknown host');
  t.match(autoSkipDecision(record(3, 3), { ...settings, minSample: 3, failureThreshold: 0.9 }, now)?.reason, /failed 3 of 3 fetches \(≥ 90%\)/);
});

t.test('hostOfUrl and isAutoSkipReason', async (t) => {
  t.equal(hostOfUrl('https://Example.ORG:8443/a?b'), 'example.org:8443');
  t.equal(hostOfUrl('http://127.0.0.1:9/x'), '127.0.0.1:9');
  t.equal(hostOfUrl('ftp://example.org/'), null);
  t.equal(hostOfUrl('not a url'), null);
  t.equal(hostOfUrl(null), null);
  t.notOk(isAutoSkipReason('fetching http://x failed'));
  t.notOk(isAutoSkipReason(null));
});

t.test('the reader maps host_health rows', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await migrateReadModels(db.knex);
  await db.knex('host_health').insert({
    host: 'example.org',
    attempts: 7,
    failures: 6,
    last_failure_at: lastFailureAt,
    last_error: 'http 503',
    updated_at: lastFailureAt,
  });
  const reader = createHostHealthReader(db.knex);
  t.same(await reader.get('EXAMPLE.org'), { host: 'example.org', attempts: 7, failures: 6, lastFailureAt, lastError: 'http 503' });
  t.equal(await reader.get('other.org'), null);
});
