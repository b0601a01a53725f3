import t from 'tap';
import { apiKeyExpiry } from '../../src/app/apiKeys.js';

/** A key's lifetime under `api_keys` (spec, Authentication 4: `default_ttl` "default 0 = no expiry", `max_ttl` "0 disables the cap"). */
const DAY = 86_400_000;
const now = Date.UTC(2026, 0, 1);
const settings = (default_ttl: number, max_ttl: string) => ({ max_per_user: 20, default_ttl, max_ttl });

t.test('no lifetime asked for: default_ttl days, and 0 (the default) is no expiry, whatever the cap', async (t) => {
  t.equal(apiKeyExpiry(settings(0, '2160h'), undefined, now), null, 'the spec defaults: 0 days (no expiry) with the 2160h cap');
  t.equal(apiKeyExpiry(settings(0, '0s'), undefined, now), null);
  t.equal(apiKeyExpiry(settings(7, '2160h'), undefined, now)?.getTime(), now + 7 * DAY);
  t.equal(apiKeyExpiry(settings(7, '0s'), undefined, now)?.getTime(), now + 7 * DAY);
});

t.test('a lifetime asked for is held to max_ttl', async (t) => {
  t.equal(apiKeyExpiry(settings(0, '2160h'), 90, now)?.getTime(), now + 90 * DAY);
  t.throws(() => apiKeyExpiry(settings(0, '2160h'), 91, now), /exceeds api_keys\.max_ttl \(2160h, 90 days\)/);
  t.throws(() => apiKeyExpiry(settings(0, '2160h'), 0, now), /never expires is refused/);
  t.equal(apiKeyExpiry(settings(0, '0s'), 0, now), null, 'no cap: a key may be asked never to expire');
  t.equal(apiKeyExpiry(settings(0, '0s'), 36500, now)?.getTime(), now + 36500 * DAY);
});
