import { randomUUID } from 'node:crypto';
import t from 'tap';
import { createGrantStore } from '../../../src/auth/oauth/grants.js';
import { hashToken } from '../../../src/auth/tokens.js';
import { migrateReadModels } from '../../../projections/migrations/index.js';
import { openTestPglite } from '../../helpers/pglite.js';

const HOUR = 3_600_000;

t.test('grant families: codes, rotation, reuse, purge', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await migrateReadModels(db.knex);
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const store = createGrantStore(db.knex, { codeTtlMs: 10 * 60_000, refreshTtlMs: 720 * HOUR }, () => clock);
  const input = { client_id: 'c', user_id: 'u', scope: 'mcp', resource: 'https://kg.example/api/v1/mcp', redirect_uri: 'https://app.example/cb', codeChallenge: 'x'.repeat(43) };
  const newGrant = async () => {
    const created = await store.createGrant(input, { id: randomUUID(), openUntil: new Date(clock + 30 * 60_000) });
    if (!created) throw new Error('a fresh request was answered already');
    return created;
  };

  const { grantId, code } = await newGrant();
  t.notOk(await db.knex('oauth_codes').where({ code_hash: code }).first(), 'the raw code is not stored');
  t.ok(await db.knex('oauth_codes').where({ code_hash: hashToken(code) }).first(), 'its hash is');
  t.match(await store.redeemCode(code), { status: 'ok', grant: { id: grantId } });
  const refresh = await store.issueRefreshToken(grantId);
  t.match(await store.redeemCode(code), { status: 'reused' });
  t.equal((await store.grantById(grantId))?.revoked, true, 'a reused code revokes its grant');
  t.equal(await store.grantById('no-such-grant'), null, 'an unknown grant is null');
  t.match(await store.rotateRefreshToken(refresh, 'c'), { status: 'revoked' });

  const second = await newGrant();
  clock += 10 * 60_000;
  t.match(await store.redeemCode(second.code), { status: 'expired' }, 'exactly at expiry');
  t.match(await store.redeemCode('flc_unknown'), { status: 'unknown' });

  const third = await newGrant();
  await store.redeemCode(third.code);
  const first = await store.issueRefreshToken(third.grantId);
  const rotated = await store.rotateRefreshToken(first, 'c');
  t.equal(rotated.status, 'ok');
  t.match(await store.rotateRefreshToken(first, 'other'), { status: 'wrong_client' }, 'another client touches nothing');
  t.equal((await store.grantById(third.grantId))?.revoked, false);
  t.match(await store.rotateRefreshToken(first, 'c'), { status: 'reused' });
  t.equal((await store.grantById(third.grantId))?.revoked, true, 'reuse revokes the family');

  clock += 721 * HOUR;
  const live = await newGrant();
  await store.purgeExpired();
  t.same((await db.knex('oauth_codes').select('grant_id')).map((row: { grant_id: string }) => row.grant_id), [live.grantId], 'old codes gone, the fresh one kept');
  t.same(await db.knex('oauth_refresh_tokens').select(), [], 'expired refresh tokens gone');
  t.same((await db.knex('oauth_grants').select('id')).map((row: { id: string }) => row.id), [live.grantId], 'grants with nothing left gone');
});

t.test('an authorization request is answered once, whoever answers, until a day after its forms expire', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await migrateReadModels(db.knex);
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const settings = { codeTtlMs: 10 * 60_000, refreshTtlMs: 720 * HOUR };
  const store = createGrantStore(db.knex, settings, () => clock);
  // Another process (or this one restarted) on the same database.
  const other = createGrantStore(db.knex, settings, () => clock);
  const input = { client_id: 'c', user_id: 'u', scope: 'mcp', resource: 'https://kg.example/api/v1/mcp', redirect_uri: 'https://app.example/cb', codeChallenge: 'x'.repeat(43) };
  const request = { id: randomUUID(), openUntil: new Date(clock + 30 * 60_000) };

  t.equal(await store.isAnswered(request.id), false);
  t.ok(await store.createGrant(input, request), 'the first approval issues a code');
  t.equal(await other.isAnswered(request.id), true);
  t.equal(await other.createGrant(input, request), null, 'a second approval issues nothing');
  t.equal(await other.answerRequest(request), false, 'nor can it be denied after');
  t.equal((await db.knex('oauth_grants').select('id')).length, 1, 'one grant');

  const denied = { id: randomUUID(), openUntil: new Date(clock + 30 * 60_000) };
  t.equal(await store.answerRequest(denied), true);
  t.equal(await other.createGrant(input, denied), null, 'a denied request is not approved after');
  t.equal((await db.knex('oauth_codes').select('code_hash')).length, 1, 'one code');

  const both = { id: randomUUID(), openUntil: new Date(clock + 30 * 60_000) };
  const results = await Promise.all([store.createGrant(input, both), other.createGrant(input, both)]);
  t.equal(results.filter((result) => result !== null).length, 1, 'two approvals at once: one code');

  clock += 30 * 60_000 + 24 * HOUR;
  await store.purgeExpired();
  t.equal(await store.isAnswered(request.id), true, 'kept until a day after its forms expired');
  clock += 1;
  await store.purgeExpired();
  t.same(await db.knex('oauth_answered_requests').select(), [], 'then gone');
});
