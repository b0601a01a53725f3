import t from 'tap';
import { createIdempotencyStore, IDEMPOTENCY_ABANDONED_MS, IDEMPOTENCY_WINDOW_MS } from '../../src/app/idempotency.js';
import { startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
t.before(async () => {
  harness = await startTestApplication({ name: 'Keys', slug: 'keys' });
});
t.teardown(() => harness.close());

const answer = { status: 201, contentType: 'application/json; charset=utf-8', body: '{"id":"r1"}' };

t.test('a key answers again within its window, and is a new key after it', async (t) => {
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const store = createIdempotencyStore(harness.service.context.db.knex, () => clock);
  t.same(await store.claim('u1', 'k', 'f1'), { kind: 'claimed' });
  t.same(await store.claim('u1', 'k', 'f1'), { kind: 'in_flight' }, 'its request still runs');
  t.same(await store.claim('u1', 'k', 'f2'), { kind: 'mismatch' }, 'another request with the key');
  await store.complete('u1', 'k', 'f1', answer);
  clock += IDEMPOTENCY_WINDOW_MS - 1;
  t.same(await store.claim('u1', 'k', 'f1'), { kind: 'answered', answer });
  t.same(await store.claim('u1', 'k', 'f2'), { kind: 'mismatch' });
  clock += 2;
  t.same(await store.claim('u1', 'k', 'f2'), { kind: 'claimed' }, 'past the window: a new key, for any request');
});

t.test('a key whose request never answered is claimed again once abandoned; a released one at once', async (t) => {
  let clock = Date.parse('2026-02-01T00:00:00Z');
  const store = createIdempotencyStore(harness.service.context.db.knex, () => clock);
  t.same(await store.claim('u2', 'k', 'f'), { kind: 'claimed' });
  clock += IDEMPOTENCY_ABANDONED_MS - 1;
  t.same(await store.claim('u2', 'k', 'f'), { kind: 'in_flight' });
  clock += 2;
  t.same(await store.claim('u2', 'k', 'f'), { kind: 'claimed' }, 'its process died: the key is free');
  await store.release('u2', 'k', 'f');
  t.same(await store.claim('u2', 'k', 'f'), { kind: 'claimed' }, 'released: the retry runs anew');
  t.same(await store.claim('u3', 'k', 'f'), { kind: 'claimed' }, "another user's key");
});

t.test('keys past their window are deleted by the next claim (at most once an hour per process); keys within it stay', async (t) => {
  let clock = Date.parse('2026-03-01T00:00:00Z');
  const store = createIdempotencyStore(harness.service.context.db.knex, () => clock);
  const keysOf = async (userId: string) => (await harness.service.context.db.knex('idempotency_keys').where({ user_id: userId }).orderBy('key')).map((row: { key: string }) => row.key);
  t.same(await store.claim('u5', 'old', 'f'), { kind: 'claimed' });
  await store.complete('u5', 'old', 'f', answer);
  clock += IDEMPOTENCY_WINDOW_MS - 3_600_000;
  t.same(await store.claim('u5', 'recent', 'f'), { kind: 'claimed' });
  clock += 3_600_000 + 1;
  t.same(await keysOf('u5'), ['old', 'recent'], 'nothing deletes a key until a claim');
  t.same(await store.claim('u6', 'k', 'f'), { kind: 'claimed' });
  t.same(await keysOf('u5'), ['recent'], "a claim (any user's) deleted the key past its window");
});
