import t from 'tap';
import { createIdentity } from '../../../src/app/wiring/identity.js';
import { verifyPassword } from '../../../src/auth/passwords.js';
import type { RecordedEvent } from '../../../src/eventstore/envelope.js';
import { checkWritesBesideTheirEnd, restWriteAnswers } from '../../helpers/racedWrites.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;
t.before(async () => {
  service = await startTestService();
});
t.teardown(() => service.close());

t.test('register, login, me, refresh, logout', async (t) => {
  const first = await registerUser(service, 'Ada@Example.org', 'correct horse battery', 'Ada');
  t.equal(first.user.email, 'ada@example.org', 'email is normalised');
  t.equal(first.user.name, 'Ada');
  t.match(first.token, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'token is a JWT');
  t.match(first.refresh_token, /^flr_/);

  const registered = await service.call('POST', '/api/v1/auth/register', { body: { email: 'nocache@example.org', password: 'correct horse battery' } });
  t.equal(registered.headers['cache-control'], 'no-store', 'an answer with tokens is not cached');
  const me = await service.call('GET', '/api/v1/users/me', { token: first.token });
  t.equal(me.status, 200);
  t.same(me.body, first.user);

  const permissions = await service.call('GET', '/api/v1/permissions', { token: first.token });
  t.equal(permissions.status, 200);
  const system = permissions.body.domains.find((d: { domain: string }) => d.domain === 'system');
  t.ok(system.roles.includes('sysadmin'), 'the first user is promoted to sysadmin');

  const login = await service.call('POST', '/api/v1/auth/login', { body: { email: 'ada@example.org', password: 'correct horse battery' } });
  t.equal(login.status, 200);
  t.equal(login.headers['cache-control'], 'no-store');
  t.equal(login.body.user.id, first.user.id);

  const refreshed = await service.call('POST', '/api/v1/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.equal(refreshed.status, 200);
  t.not(refreshed.body.refresh_token, login.body.refresh_token, 'refresh token rotates');
  const stillOkBeforeReuse = await service.call('GET', '/api/v1/users/me', { token: refreshed.body.token });
  t.equal(stillOkBeforeReuse.status, 200);
  const reused = await service.call('POST', '/api/v1/auth/refresh', { body: { refresh_token: login.body.refresh_token } });
  t.equal(reused.status, 401, 'a used refresh token no longer works');
  t.equal(reused.body.error, 'unauthorized');
  t.match(reused.body.message, /already used: the session is revoked/);
  // Reuse means the token leaked: the whole session ends, the holder of the current tokens included.
  t.equal((await service.call('GET', '/api/v1/users/me', { token: refreshed.body.token })).status, 401, 'the current access token stops working');
  const current = await service.call('POST', '/api/v1/auth/refresh', { body: { refresh_token: refreshed.body.refresh_token } });
  t.equal(current.status, 401, 'the current refresh token stops working');

  const again = await service.call('POST', '/api/v1/auth/login', { body: { email: 'ada@example.org', password: 'correct horse battery' } });
  const logout = await service.call('POST', '/api/v1/auth/logout', { token: again.body.token });
  t.equal(logout.status, 204);
  const after = await service.call('GET', '/api/v1/users/me', { token: again.body.token });
  t.equal(after.status, 401, 'logout ends the session');
  const stillOk = await service.call('GET', '/api/v1/users/me', { token: first.token });
  t.equal(stillOk.status, 200, 'other sessions live on');

  // A client that sends a JSON content-type on every request, with no body: still a logout.
  const withHeader = await service.call('POST', '/api/v1/auth/login', { body: { email: 'ada@example.org', password: 'correct horse battery' } });
  const headerOnly = await service.app.inject({
    method: 'POST',
    url: '/api/v1/auth/logout',
    headers: { authorization: `Bearer ${withHeader.body.token}`, 'content-type': 'application/json' },
  });
  t.equal(headerOnly.statusCode, 204);
  t.equal((await service.call('GET', '/api/v1/users/me', { token: withHeader.body.token })).status, 401, 'that session ended too');
  // The same empty body where a route needs one is refused by its schema, as no body is.
  const empty = await service.app.inject({ method: 'POST', url: '/api/v1/auth/login', headers: { 'content-type': 'application/json' } });
  t.equal(empty.statusCode, 400);
  t.equal(empty.json().error, 'bad_request');
});

t.test('bad registrations and logins', async (t) => {
  await registerUser(service, 'bob@example.org');
  const duplicate = await service.call('POST', '/api/v1/auth/register', { body: { email: 'BOB@example.org', password: 'another password' } });
  t.equal(duplicate.status, 409);
  // NFKC then lower case: fullwidth letters are the same address.
  const lookalike = await service.call('POST', '/api/v1/auth/register', { body: { email: 'ＢＯＢ@example.org', password: 'another password' } });
  t.equal(lookalike.status, 409, 'a fullwidth look-alike of a taken address is refused');
  const lookalikeLogin = await service.call('POST', '/api/v1/auth/login', { body: { email: 'ｂｏｂ@example.org', password: 'correct horse battery' } });
  t.equal(lookalikeLogin.status, 200, 'and signs in to the same account');
  t.same(Object.keys(duplicate.body).sort(), ['error', 'message']);
  for (const body of [
    { email: 'x@example.org' },
    { password: 'long enough password' },
    { email: 'not-an-email', password: 'long enough password' },
    { email: 'short@example.org', password: 'short' },
    { email: 'extra@example.org', password: 'long enough password', admin: true },
  ]) {
    const response = await service.call('POST', '/api/v1/auth/register', { body });
    t.equal(response.status, 400, `400 for ${JSON.stringify(body)}`);
    t.equal(response.body.error, 'bad_request');
  }
  const wrong = await service.call('POST', '/api/v1/auth/login', { body: { email: 'bob@example.org', password: 'wrong password' } });
  t.equal(wrong.status, 401);
  const unknown = await service.call('POST', '/api/v1/auth/login', { body: { email: 'nobody@example.org', password: 'whatever it is' } });
  t.equal(unknown.status, 401);
  t.equal(wrong.body.message, unknown.body.message, 'no hint whether the account exists');
});

t.test('tokens: missing, malformed, foreign', async (t) => {
  t.equal((await service.call('GET', '/api/v1/users/me')).status, 401);
  t.equal((await service.call('GET', '/api/v1/users/me', { headers: { authorization: 'Basic abc' } })).status, 401);
  t.equal((await service.call('GET', '/api/v1/users/me', { token: 'not.a.jwt' })).status, 401);
  // A token signed with another secret.
  const { createTokenService } = await import('../../../src/auth/tokens.js');
  const foreign = await createTokenService({ secret: 'another-secret-another-secret-another!!', issuer: 'http://localhost:0', sessionTtlMs: 60_000 }).signSession({ userId: 'u', sessionId: 's' });
  t.equal((await service.call('GET', '/api/v1/users/me', { token: foreign.token })).status, 401);
});

t.test('a 401 carries a Bearer challenge (RFC 6750 3): invalid_token when a token was refused', async (t) => {
  const none = await service.call('GET', '/api/v1/users/me');
  t.equal(none.headers['www-authenticate'], 'Bearer realm="factlog"');
  const refused = await service.call('GET', '/api/v1/users/me', { token: 'not.a.jwt' });
  t.match(refused.headers['www-authenticate'], /^Bearer realm="factlog", error="invalid_token", error_description="[^"]+"$/);

  // RFC 7515: base64url without padding; the JWT library alone reads a padded signature as the same one.
  const user = await registerUser(service, 'padded@example.org', 'correct horse battery');
  t.equal((await service.call('GET', '/api/v1/users/me', { token: user.token })).status, 200);
  const padded = await service.call('GET', '/api/v1/users/me', { token: `${user.token}=` });
  t.equal(padded.status, 401, 'a session token with a padded signature');
  t.equal(padded.headers['www-authenticate'], refused.headers['www-authenticate'], 'refused as any malformed token');
  t.same(padded.body, refused.body);
});

t.test('routes that serve anyone ignore a stale token a client sends along', async (t) => {
  const user = await registerUser(service, 'stale@example.org', 'correct horse battery');
  const stale = { token: 'expired.or.foreign' };
  const health = await service.call('GET', '/healthz', stale);
  t.equal(health.status, 200, 'a probe forwarding an old header still sees the service live');
  const login = await service.call('POST', '/api/v1/auth/login', { ...stale, body: { email: 'stale@example.org', password: 'correct horse battery' } });
  t.equal(login.status, 200, 'signing in again is what a stale token calls for');
  const refreshed = await service.call('POST', '/api/v1/auth/refresh', { ...stale, body: { refresh_token: user.refresh_token } });
  t.equal(refreshed.status, 200);
  t.equal((await service.call('GET', '/api/v1/users/me', stale)).status, 401, 'a route that needs a caller still refuses it');
});

t.test('profiles and admin', async (t) => {
  const admin = await service.call('POST', '/api/v1/auth/login', { body: { email: 'ada@example.org', password: 'correct horse battery' } });
  const carol = await registerUser(service, 'carol@example.org', 'correct horse battery', 'Carol');
  const dave = await registerUser(service, 'dave@example.org');

  t.equal((await service.call('GET', `/api/v1/users/${carol.user.id}`, { token: dave.token })).status, 403, 'no reading other profiles');
  t.equal((await service.call('GET', `/api/v1/users/${carol.user.id}`, { token: admin.body.token })).status, 200, 'sysadmin reads any');
  t.equal((await service.call('GET', `/api/v1/users/does-not-exist`, { token: admin.body.token })).status, 404);

  const renamed = await service.call('PUT', `/api/v1/users/${carol.user.id}`, { token: carol.token, body: { name: 'Caroline' } });
  t.equal(renamed.status, 200);
  t.equal(renamed.body.name, 'Caroline');
  const self = await service.call('PUT', '/api/v1/users/me', { token: dave.token, body: { name: 'David' } });
  t.equal(self.status, 200, 'me names the caller');
  t.match(self.body, { id: dave.user.id, name: 'David' });
  t.equal((await service.call('PUT', `/api/v1/users/${carol.user.id}`, { token: dave.token, body: { name: 'X' } })).status, 403);
  t.equal((await service.call('PUT', `/api/v1/users/${carol.user.id}`, { token: carol.token, body: {} })).status, 400);
  t.equal((await service.call('PUT', `/api/v1/users/${carol.user.id}`, { token: carol.token, body: { email: 'dave@example.org' } })).status, 409, 'email taken');
  const moved = await service.call('PUT', `/api/v1/users/${carol.user.id}`, { token: carol.token, body: { email: 'caroline@example.org' } });
  t.equal(moved.status, 200);
  t.equal((await service.call('POST', '/api/v1/auth/login', { body: { email: 'caroline@example.org', password: 'correct horse battery' } })).status, 200, 'login follows the new email');

  t.equal((await service.call('GET', '/api/v1/admin/users', { token: dave.token })).status, 403);
  const users = await service.call('GET', '/api/v1/admin/users', { token: admin.body.token });
  t.equal(users.status, 200);
  t.ok(users.body.users.length >= 4);

  const catalog = await service.call('GET', '/api/v1/admin/permissions', { token: admin.body.token });
  t.equal(catalog.status, 200);
  t.ok(catalog.body.permissions.some((p: { permission: string; roles: string[] }) => p.permission === 'role:manage' && p.roles.includes('sysadmin')));
  t.equal((await service.call('GET', '/api/v1/admin/permissions', { token: dave.token })).status, 403);

  const grant = { user_id: dave.user.id, role: 'sysadmin', domain: 'system' };
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: dave.token, body: grant })).status, 403);
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.body.token, body: { ...grant, role: 'emperor' } })).status, 400);
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.body.token, body: { ...grant, domain: 'galaxy' } })).status, 400);
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.body.token, body: { ...grant, user_id: 'nobody' } })).status, 404);
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.body.token, body: grant })).status, 200);
  t.equal((await service.call('GET', '/api/v1/admin/users', { token: dave.token })).status, 200, 'the new role works at once');
  t.equal((await service.call('DELETE', '/api/v1/admin/users/roles', { token: admin.body.token, body: grant })).status, 204);
  t.equal((await service.call('GET', '/api/v1/admin/users', { token: dave.token })).status, 403, 'and is gone once revoked');
  t.equal((await service.call('DELETE', '/api/v1/admin/users/roles', { token: admin.body.token, body: grant })).status, 404, 'revoking a role not held');
  const badBodies: [string, unknown][] = [
    ['no body', undefined],
    ['a missing field', { user_id: dave.user.id, role: 'reader' }],
    ['an extra field', { ...grant, until: 'tomorrow' }],
    ['an empty role', { ...grant, role: '' }],
    ['a number for the user', { ...grant, user_id: 42 }],
    ['a repository that does not exist', { ...grant, role: 'reader', domain: 'repository:no-such-repo' }],
    ['a repository role on the system domain', { ...grant, role: 'owner' }],
  ];
  for (const [what, body] of badBodies) {
    for (const method of ['PUT', 'DELETE']) {
      const answer = await service.call(method, '/api/v1/admin/users/roles', { token: admin.body.token, body });
      t.ok([400, 404].includes(answer.status), `${method} with ${what}: ${answer.status}`);
      t.match(answer.body, { error: /^(bad_request|not_found)$/, message: /\S/ }, `${method} with ${what}: a message`);
    }
  }
  const after = await service.call('GET', '/api/v1/admin/users', { token: admin.body.token });
  const daveRoles = after.body.users.find((user: { id: string }) => user.id === dave.user.id).roles;
  t.same(daveRoles, [{ role: 'user', domain: 'system' }], 'nothing was granted or revoked by a bad request');
});

t.test('a password hash made at another cost is made again at the next login, and only then', async (t) => {
  const user = await registerUser(service, 'grace@example.org', 'correct horse battery');
  const storedHash = async () => (await service.context.db.knex('credentials').where({ user_id: user.user.id }).first('password_hash')).password_hash as string;
  const before = await storedHash();
  t.match(before, /^scrypt\$1024\$/, "the test service's cost, 10");
  // The same data with auth.password_hash_cost raised to 11.
  const { db, store, commands, log, tokens } = service.context;
  const raised = createIdentity({ ...service.config, auth: { ...service.config.auth, password_hash_cost: 11 } }, { db, store, commands, log, tokens });
  await t.rejects(raised.verifyCredentials({ email: 'grace@example.org', password: 'wrong horse battery' }), { name: 'AuthenticationError' });
  t.equal(await storedHash(), before, 'a failed login changes nothing');
  t.equal((await raised.verifyCredentials({ email: 'grace@example.org', password: 'correct horse battery' })).id, user.user.id);
  const after = await storedHash();
  t.match(after, /^scrypt\$2048\$8\$1\$/, 'made again at cost 11');
  t.equal(await verifyPassword('correct horse battery', after), true);
  t.equal((await raised.verifyCredentials({ email: 'grace@example.org', password: 'correct horse battery' })).id, user.user.id);
  t.equal(await storedHash(), after, 'a hash at the current cost stays');
  const login = await service.call('POST', '/api/v1/auth/login', { body: { email: 'grace@example.org', password: 'correct horse battery' } });
  t.equal(login.status, 200, 'the cost-10 service still verifies it');
  t.match(await storedHash(), /^scrypt\$1024\$/, 'and makes it again at its own cost');
});

t.test('no secret enters the event log', async (t) => {
  const events = await service.context.store.readAll({ limit: 10_000 });
  const log = JSON.stringify(events);
  t.notMatch(log, /correct horse battery/);
  t.notMatch(log, /scrypt\$/);
  t.notMatch(log, /flr_/);
  t.notMatch(log, /eyJ/, 'no JWT');
  t.ok(events.every((event) => event.actor.length > 0), 'every event has an actor');
});

t.test('writes sent with a session beside its logout: each lands before the logout is answered or is refused, with nothing written', async (t) => {
  const erin = await registerUser(service, 'erin@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: erin.token, body: { name: 'Signed out while used' } })).body.id;
  for (let round = 0; round < 3; round++) {
    const session = (await service.call('POST', '/api/v1/auth/login', { body: { email: 'erin@example.org', password: 'correct horse battery' } })).body;
    const ids = [0, 1, 2, 3, 4, 5].map((n) => `logout-raced-${round}-${n}`);
    await checkWritesBesideTheirEnd(t, {
      end: () => service.call('POST', '/api/v1/auth/logout', { token: session.token }).then((loggedOut) => t.equal(loggedOut.status, 204)),
      readLog: () => service.context.store.readAll({ types: ['InvestigationCreated'], limit: 100_000 }),
      writes: ids.map((id) => ({
        name: id,
        answer: service.call('POST', `/api/v1/repositories/${repository}/investigations`, { token: session.token, body: { title: `raced ${id}` }, headers: { 'x-request-id': id } }),
        wrote: (event: RecordedEvent) => event.correlationId === id,
      })),
      ...restWriteAnswers,
    });
    t.equal((await service.call('GET', `/api/v1/repositories/${repository}/investigations`, { token: session.token })).status, 401, 'after the logout the session is refused');
  }
});

t.test('commands in no repository sent with a session beside its logout: each lands before the logout is answered or is refused, with nothing written', async (t) => {
  // An API key minted, one's profile changed, a system role granted by an administrator: none of them is in a repository.
  const frank = (await registerUser(service, 'frank@example.org')).user;
  await service.context.identity.promoteToSysadmin('frank@example.org', 'system:cli');
  const targets = await Promise.all([0, 1].map((n) => registerUser(service, `frank-grants-${n}@example.org`)));
  const login = async () => (await service.call('POST', '/api/v1/auth/login', { body: { email: 'frank@example.org', password: 'correct horse battery' } })).body as { token: string };
  const types = ['ApiKeyCreated', 'UserProfileUpdated', 'RoleGranted'];
  /** Two writes of each kind, and what each appends: found by its request id or, for a profile (its events carry a correlation id of their own), by the name it sets. */
  const writesWith = (token: string, label: string) =>
    [0, 1].flatMap((n) => {
      const id = (kind: string) => `outside-${label}-${kind}-${n}`;
      return [
        {
          name: id('api-key'),
          answer: service.call('POST', '/api/v1/users/me/api-keys', { token, body: { name: id('api-key'), scopes: ['repositories:read'] }, headers: { 'x-request-id': id('api-key') } }),
          wrote: (event: RecordedEvent) => event.type === 'ApiKeyCreated' && event.correlationId === id('api-key'),
        },
        {
          name: id('profile'),
          answer: service.call('PUT', '/api/v1/users/me', { token, body: { name: id('profile') } }),
          wrote: (event: RecordedEvent) => event.type === 'UserProfileUpdated' && (event.data as { name: string | null }).name === id('profile'),
        },
        {
          name: id('role'),
          answer: service.call('PUT', '/api/v1/admin/users/roles', { token, body: { user_id: targets[n].user.id, role: 'sysadmin', domain: 'system' }, headers: { 'x-request-id': id('role') } }),
          wrote: (event: RecordedEvent) => event.type === 'RoleGranted' && event.correlationId === id('role'),
        },
      ];
    });
  /** Takes the grants back, so that the next ones append again. */
  const revokeGrants = async (token: string) => {
    for (const target of targets) await service.call('DELETE', '/api/v1/admin/users/roles', { token, body: { user_id: target.user.id, role: 'sysadmin', domain: 'system' } });
  };
  for (let round = 0; round < 4; round++) {
    const session = await login();
    await checkWritesBesideTheirEnd(t, {
      end: () => service.call('POST', '/api/v1/auth/logout', { token: session.token }).then((loggedOut) => t.equal(loggedOut.status, 204)),
      readLog: () => service.context.store.readAll({ types, limit: 100_000 }),
      writes: writesWith(session.token, `raced-${round}`),
      ...restWriteAnswers,
    });
    t.equal((await service.call('GET', '/api/v1/users/me/api-keys', { token: session.token })).status, 401, 'after the logout the session is refused');
    await revokeGrants((await login()).token);
  }
  // The same writes with a live session all land, and are found as above: a refusal above is not a write looked for in the wrong place.
  const live = writesWith((await login()).token, 'live');
  const answers = await Promise.all(live.map((write) => write.answer));
  const after = await service.context.store.readAll({ types, limit: 100_000 });
  live.forEach(({ name, wrote }, n) => t.same([answers[n].status < 300, after.some(wrote)], [true, true], `${name} landed with a live session`));
  // A refused key's secret is deleted again: every secret kept is of a key in the log.
  const secrets: Array<{ key_id: string }> = await service.context.db.knex('api_key_secrets').where({ user_id: frank.id }).select('key_id');
  const created = after.filter((event) => event.type === 'ApiKeyCreated' && event.correlationId?.startsWith('outside-')).map((event) => event.streamId.replace(/^apikey-/, ''));
  t.same(new Set(secrets.map((secret) => secret.key_id)), new Set(created), 'the secrets kept are those of the keys created');
});
