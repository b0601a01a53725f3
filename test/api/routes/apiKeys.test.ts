import t from 'tap';
import { hashToken } from '../../../src/auth/tokens.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;
let admin: Awaited<ReturnType<typeof registerUser>>;
let alice: Awaited<ReturnType<typeof registerUser>>;
let repoA: string;
let repoB: string;

t.before(async () => {
  service = await startTestService({ workers: false, overrides: { api_keys: { max_per_user: 3, max_ttl: '720h' } } });
  admin = await registerUser(service, 'admin@example.org'); // the first user: sysadmin
  alice = await registerUser(service, 'alice@example.org');
  repoA = (await service.call('POST', '/api/v1/repositories', { token: alice.token, body: { name: 'Alpha' } })).body.id;
  repoB = (await service.call('POST', '/api/v1/repositories', { token: alice.token, body: { name: 'Beta' } })).body.id;
});
t.teardown(() => service.close());

const createKey = (token: string, body: object) => service.call('POST', '/api/v1/users/me/api-keys', { token, body });
const revokeAll = async (token: string) => {
  const listed = await service.call('GET', '/api/v1/users/me/api-keys', { token });
  for (const key of listed.body.api_keys) await service.call('DELETE', `/api/v1/users/me/api-keys/${key.id}`, { token });
};

t.test('a key is shown once, listed without its secret, works on REST and records its last use', async (t) => {
  const created = await createKey(alice.token, { name: ' reader script ', scopes: ['facts:read', 'repositories:read', 'facts:read'] });
  t.equal(created.status, 201);
  t.equal(created.headers['cache-control'], 'no-store', 'the answer with the secret is not cached');
  const { key, id } = created.body;
  t.match(key, /^fl_[A-Za-z0-9_-]{43}$/);
  t.equal(created.body.name, 'reader script');
  t.same(created.body.scopes, ['facts:read', 'repositories:read']);
  t.equal(created.body.repository_id, null);
  t.equal(created.body.hint, `${key.slice(0, 7)}…`);
  t.equal(created.body.expires_at, null, 'default_ttl 0 (the default) is no expiry, although max_ttl caps what a caller asks for');

  const listed = await service.call('GET', '/api/v1/users/me/api-keys', { token: alice.token });
  t.equal(listed.status, 200);
  t.same(listed.body.api_keys.map((k: { id: string }) => k.id), [id]);
  t.notOk('key' in listed.body.api_keys[0], 'the key is never shown again');
  t.equal(listed.body.api_keys[0].created_at, created.body.created_at, 'created_at as the create reply said');
  t.equal(listed.body.api_keys[0].last_used_at, null);

  const read = await service.call('GET', `/api/v1/repositories/${repoA}`, { token: key });
  t.equal(read.status, 200, 'the key authenticates REST calls');
  t.equal(read.body.name, 'Alpha');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: key })).status, 200);
  const write = await service.call('POST', `/api/v1/repositories/${repoA}/sources`, { token: key, body: { url: 'https://example.org/x' } });
  t.equal(write.status, 403, 'outside its scopes, even though the owner may');
  t.match(write.body.message, /permission denied/);
  const used = await service.call('GET', '/api/v1/users/me/api-keys', { token: alice.token });
  t.ok(used.body.api_keys[0].last_used_at, 'last use recorded');

  const permissions = await service.call('GET', '/api/v1/permissions', { token: key });
  const domainA = permissions.body.domains.find((d: { domain: string }) => d.domain === `repository:${repoA}`);
  t.same(domainA.permissions, ['facts:read', 'repositories:read'], 'GET /permissions tells what the key may do');
  t.notOk(permissions.body.domains.some((d: { domain: string }) => d.domain === 'system'), 'no system permission outside its scopes');

  const secret = await service.context.db.knex('api_key_secrets').where({ key_id: id }).first();
  t.equal(secret.token_hash, hashToken(key), 'stored as its SHA-256 hex');
  t.match(secret.token_hash, /^[0-9a-f]{64}$/);
  const events = await service.context.store.readStream(`apikey-${id}`);
  t.same(events.map((event) => event.type), ['ApiKeyCreated']);
  t.notMatch(JSON.stringify(await service.context.store.readAll({ limit: 10_000 })), new RegExp(`${key}|${secret.token_hash}`), 'neither the key nor its hash is in the log');
  await revokeAll(alice.token);
});

t.test('a key bound to one repository works there and nowhere else', async (t) => {
  const created = await createKey(alice.token, { name: 'alpha only', scopes: ['*:read'], repository: 'alpha' });
  t.equal(created.status, 201);
  t.equal(created.body.repository_id, repoA, 'given by slug, stored by id');
  const key = created.body.key;
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: key })).status, 200);
  const elsewhere = await service.call('GET', `/api/v1/repositories/${repoB}/facts`, { token: key });
  t.equal(elsewhere.status, 404, 'another repository of the same owner: the key sees none but its own');
  const listed = await service.call('GET', '/api/v1/repositories', { token: key });
  t.same(listed.body.items.map((r: { id: string }) => r.id), [repoA], 'lists only its repository');
  t.equal((await service.call('POST', '/api/v1/repositories', { token: key, body: { name: 'Gamma' } })).status, 403, 'no system permission');

  const adminKey = (await createKey(admin.token, { name: 'admin on alpha', scopes: ['*:*'], repository: repoA })).body.key;
  t.equal((await service.call('GET', `/api/v1/repositories/${repoB}`, { token: adminKey })).status, 404, "even a sysadmin's bound key stays in its repository");
  t.equal((await service.call('GET', '/api/v1/admin/users', { token: adminKey })).status, 403, 'and loses the system domain');
  await revokeAll(alice.token);
  await revokeAll(admin.token);
});

t.test('a key never outlives its owner’s role: a role change takes effect on the next request, for sessions and keys', async (t) => {
  const bob = await registerUser(service, 'bob@example.org');
  const grant = { user_id: bob.user.id, role: 'editor', domain: `repository:${repoA}` };
  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.token, body: grant })).status, 200);
  const created = await createKey(bob.token, { name: 'editor key', scopes: ['sources:*', 'facts:read'], repository: repoA });
  t.equal(created.status, 201);
  const key = created.body.key;
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: key })).status, 200);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: bob.token })).status, 200);

  t.equal((await service.call('DELETE', '/api/v1/admin/users/roles', { token: admin.token, body: grant })).status, 204);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: key })).status, 404, 'the key lost the role with its owner (and, seeing nothing there, is told of no repository)');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: bob.token })).status, 404, 'so did the session');

  t.equal((await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.token, body: { ...grant, role: 'reader' } })).status, 200);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoA}/facts`, { token: key })).status, 200, 'a new role counts on the next request');
  const write = await service.call('POST', `/api/v1/repositories/${repoA}/sources`, { token: key, body: { url: 'https://example.org/y' } });
  t.equal(write.status, 403, 'the key asked for sources:* but a reader cannot create sources');
});

t.test('revoked, expired and unknown keys answer 401; only the owner revokes, once', async (t) => {
  const created = await createKey(alice.token, { name: 'short-lived', scopes: ['repositories:read'], expires_in_days: 1 });
  const { key, id } = created.body;
  t.equal((await service.call('GET', '/api/v1/repositories', { token: key })).status, 200);

  await service.context.db.knex('api_keys').where({ id }).update({ expires_at: new Date(Date.now() - 1000) });
  const expired = await service.call('GET', '/api/v1/repositories', { token: key });
  t.equal(expired.status, 401);
  t.match(expired.body.message, /expired/);
  await service.context.db.knex('api_keys').where({ id }).update({ expires_at: new Date(Date.now() + 86_400_000) });

  const bob = await registerUser(service, 'bob2@example.org');
  t.equal((await service.call('DELETE', `/api/v1/users/me/api-keys/${id}`, { token: bob.token })).status, 404, "another user's key does not exist for them");
  t.equal((await service.call('GET', '/api/v1/repositories', { token: key })).status, 200, 'and still works');
  t.equal((await service.call('DELETE', `/api/v1/users/me/api-keys/${id}`, { token: key })).status, 403, 'a key cannot revoke keys');
  t.equal((await service.call('DELETE', `/api/v1/users/me/api-keys/${id}`, { token: alice.token })).status, 204);
  const revoked = await service.call('GET', '/api/v1/repositories', { token: key });
  t.equal(revoked.status, 401, 'revocation works at once');
  t.match(revoked.body.message, /revoked/);
  t.equal((await service.call('DELETE', `/api/v1/users/me/api-keys/${id}`, { token: alice.token })).status, 404, 'revoked once');
  t.same((await service.call('GET', '/api/v1/users/me/api-keys', { token: alice.token })).body.api_keys, [], 'gone from the list');
  t.same((await service.context.store.readStream(`apikey-${id}`)).map((event) => event.type), ['ApiKeyCreated', 'ApiKeyRevoked']);

  const unknown = await service.call('GET', '/api/v1/repositories', { token: `fl_${'A'.repeat(43)}` });
  t.equal(unknown.status, 401);
  t.match(unknown.body.message, /invalid API key/);
});

t.test('bad requests are refused clearly and store nothing', async (t) => {
  const keysBefore = await service.context.db.knex('api_key_secrets').count({ count: '*' });
  const refusals: [object, number, RegExp][] = [
    [{ name: 'x', scopes: ['facts:fly'] }, 400, /unknown permission 'facts:fly'/],
    [{ name: 'x', scopes: ['mcp'] }, 400, /unknown permission/],
    [{ name: 'x', scopes: [] }, 400, /scopes/],
    [{ scopes: ['facts:read'] }, 400, /name/],
    [{ name: '   ', scopes: ['facts:read'] }, 400, /name must not be empty/],
    [{ name: 'x', scopes: ['facts:read'], expires_in_days: 31 }, 400, /exceeds api_keys\.max_ttl \(720h, 30 days\)/],
    [{ name: 'x', scopes: ['facts:read'], expires_in_days: 0 }, 400, /never expires is refused/],
    [{ name: 'x', scopes: ['facts:read'], expires_in_days: 1.5 }, 400, /integer/],
    [{ name: 'x', scopes: ['facts:read'], repository: 'no-such-repo' }, 404, /repository not found/],
    [{ name: 'x', scopes: ['facts:read'], colour: 'red' }, 400, /colour|additional/],
    [{ name: 'x', scopes: ['role:manage'] }, 403, /would grant nothing/],
  ];
  for (const [body, status, message] of refusals) {
    const answer = await createKey(alice.token, body);
    t.equal(answer.status, status, JSON.stringify(body));
    t.match(answer.body.message, message, JSON.stringify(body));
    t.match(answer.body.error, /^(bad_request|not_found|forbidden)$/);
  }
  const bob = await registerUser(service, 'bob3@example.org');
  // No role on the repository: answered as for a missing one, so that the key route tells no stranger it exists.
  for (const repository of [repoA, 'no-such-repo']) {
    const unseen = await createKey(bob.token, { name: 'x', scopes: ['facts:read'], repository });
    t.equal(unseen.status, 404, 'no role on the repository: as if there were none');
    t.same(unseen.body, { error: 'not_found', message: 'repository not found' });
  }
  t.equal((await createKey('', { name: 'x', scopes: ['facts:read'] })).status, 401);
  t.same(await service.context.db.knex('api_key_secrets').count({ count: '*' }), keysBefore, 'nothing stored');
});

t.test('api_keys.max_per_user caps the live keys of one user; a revoked key frees its place', async (t) => {
  const carol = await registerUser(service, 'carol@example.org');
  const made = await Promise.all([1, 2, 3, 4].map((n) => createKey(carol.token, { name: `key ${n}`, scopes: ['repositories:create'] })));
  t.same(made.map((answer) => answer.status).sort(), [201, 201, 201, 409], 'four racing requests: three keys, one refusal');
  const refused = made.find((answer) => answer.status === 409);
  t.match(refused?.body.message, /3 live API keys/);
  const firstKey = made.find((answer) => answer.status === 201)?.body;
  t.equal((await createKey(firstKey.key, { name: 'from a key', scopes: ['repositories:create'] })).status, 403, 'a key cannot mint keys');
  t.equal((await service.call('DELETE', `/api/v1/users/me/api-keys/${firstKey.id}`, { token: carol.token })).status, 204);
  t.equal((await createKey(carol.token, { name: 'key 5', scopes: ['repositories:create'] })).status, 201);
  t.equal((await service.call('GET', '/api/v1/users/me/api-keys', { token: carol.token })).body.api_keys.length, 3);
});

t.test('writes sent with a key beside its revocation: each lands before the revocation or is refused, with nothing written', async (t) => {
  const dave = await registerUser(service, 'dave@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: dave.token, body: { name: 'Revoked while used' } })).body.id;
  for (let round = 0; round < 3; round++) {
    const key = (await createKey(dave.token, { name: `racing ${round}`, scopes: ['investigations:create'] })).body;
    const writes = [0, 1, 2, 3].map((n) =>
      service.call('POST', `/api/v1/repositories/${repository}/investigations`, { token: key.key, body: { title: `raced ${round}` }, headers: { 'x-request-id': `raced-${round}-${n}` } }),
    );
    const [revoked, ...answers] = await Promise.all([service.call('DELETE', `/api/v1/users/me/api-keys/${key.id}`, { token: dave.token }), ...writes]);
    t.equal(revoked.status, 204);
    const log = await service.context.store.readAll({ types: ['InvestigationCreated', 'ApiKeyRevoked'], limit: 10_000 });
    const revokedAt = log.find((event) => event.streamId === `apikey-${key.id}`)?.globalPosition ?? 0;
    answers.forEach((answer, n) => {
      const written = log.find((event) => event.correlationId === `raced-${round}-${n}`);
      if (answer.status === 201) t.ok(written !== undefined && written.globalPosition < revokedAt, 'a write answered 201 landed before the revocation');
      else t.same([answer.status === 401 || answer.status === 403, written], [true, undefined], `a write refused (${answer.status} ${answer.body.message}) wrote nothing`);
    });
    t.equal((await service.call('GET', `/api/v1/repositories/${repository}/investigations`, { token: key.key })).status, 401);
  }
});
