import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createTokenService } from '../../../src/auth/tokens.js';
import { oauthIssuer } from '../../../src/config/derived.js';
import { JWT_SECRET_PLACEHOLDER } from '../../../src/config/types.js';
import { registerUser, startTestService } from '../../helpers/service.js';

t.test('the placeholder secret never signs: the installation makes its own and keeps it across restarts', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-signing-secret-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const start = () => startTestService({ dataDir, persistent: true, workers: false, overrides: { auth: { jwt_secret: JWT_SECRET_PLACEHOLDER } } });

  const first = await start();
  const secret = first.context.config.auth.jwt_secret;
  t.not(secret, JWT_SECRET_PLACEHOLDER, 'not the placeholder');
  t.ok(Buffer.byteLength(secret) >= 32, 'at least 32 bytes, as HS256 wants');
  const { user, token } = await registerUser(first, 'ada@example.org');
  const me = (as: string) => first.call('GET', '/api/v1/users/me', { token: as });
  t.equal((await me(token)).status, 200);

  // A session token forged with the public placeholder, naming the real session: what anyone could sign before.
  const { sid } = JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString()) as { sid: string };
  const forger = createTokenService({ secret: JWT_SECRET_PLACEHOLDER, issuer: oauthIssuer(first.context.config), sessionTtlMs: 60_000 });
  const forged = await forger.signSession({ userId: user.id, sessionId: sid });
  const refused = await me(forged.token);
  t.equal(refused.status, 401, 'a token signed with the placeholder is refused');
  t.equal(refused.body.error, 'unauthorized');
  await first.close({ keepData: true });

  const second = await start();
  t.teardown(() => second.close());
  t.equal(second.context.config.auth.jwt_secret, secret, 'the same secret after a restart');
  t.equal((await second.call('GET', '/api/v1/users/me', { token })).status, 200, 'so sessions outlive the restart');
});

t.test('a configured secret is used as it is', async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  t.equal(service.context.config.auth.jwt_secret, 'test-secret-that-is-long-enough-for-hs256-signing!');
  t.equal(await service.context.db.knex('installation_secrets').count({ count: '*' }).first().then((row) => Number(row?.count)), 0, 'nothing made');
});

t.test('upgrading from a release that signed with the placeholder (before 47aa4b9): sessions and access tokens are signed out, refresh tokens and API keys keep working', async (t) => {
  // docs/operations.md, "Upgrading", says so; this is the claim, checked.
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-upgrade-secret-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // The older release: its tokens signed with one fixed secret (the placeholder, there), none kept in the database.
  const older = await startTestService({ dataDir, persistent: true, workers: false, overrides: { auth: { jwt_secret: 'the-secret-an-older-release-signed-with-0123456789' } } });
  const { token, refresh_token } = await registerUser(older, 'ada@example.org');
  const created = await older.call('POST', '/api/v1/users/me/api-keys', { token, body: { name: 'script', scopes: ['*:read'] } });
  t.equal(created.status, 201);
  const apiKey = (created.body as { key: string }).key;
  await older.close({ keepData: true });

  // This release without AUTH_JWTSECRET: a secret of the installation's own, made at the first start.
  const upgraded = await startTestService({ dataDir, persistent: true, workers: false, overrides: { auth: { jwt_secret: JWT_SECRET_PLACEHOLDER } } });
  t.teardown(() => upgraded.close());
  const me = (as: string) => upgraded.call('GET', '/api/v1/users/me', { token: as });
  t.equal((await me(token)).status, 401, 'the session token signed by the older release is refused');
  t.equal((await me(apiKey)).status, 200, 'the API key keeps working');
  const refreshed = await upgraded.call('POST', '/api/v1/auth/refresh', { body: { refresh_token } });
  t.equal(refreshed.status, 200, 'the refresh token keeps working');
  t.equal((await me((refreshed.body as { token: string }).token)).status, 200, 'and gives a session of the new secret');
});
