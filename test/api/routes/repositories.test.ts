import t from 'tap';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;
t.before(async () => {
  service = await startTestService();
});
t.teardown(() => service.close());

t.test('repositories: create, read by id or slug, list, update, delete, permissions', async (t) => {
  const owner = await registerUser(service, 'owner@example.org');
  const stranger = await registerUser(service, 'stranger@example.org');

  const presets = await service.call('GET', '/api/v1/repositories/presets', { token: stranger.token });
  t.equal(presets.status, 200);
  t.same(presets.body.presets.map((p: { id: string }) => p.id), ['general', 'scientific', 'enterprise']);
  t.equal(presets.body.default, 'general');
  t.equal((await service.call('GET', '/api/v1/repositories/presets')).status, 401);

  const created = await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Physics History', description: 'who found what' } });
  t.equal(created.status, 201);
  t.equal(created.body.slug, 'physics-history');
  t.equal(created.body.preset, 'general');
  t.equal(created.body.tier, 'shared');
  t.same(created.body.roles, ['owner']);
  const id = created.body.id;

  t.equal((await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Other', slug: 'physics-history' } })).status, 409, 'explicit slug taken');
  const derived = await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Physics history' } });
  t.equal(derived.status, 201, 'a derived slug gets a suffix instead');
  t.match(derived.body.slug, /^physics-history-[0-9a-f]{6}$/);
  for (const body of [{}, { name: '' }, { name: 'x', preset: 'nope' }, { name: 'x', slug: 'Bad Slug' }, { name: 'x', colour: 'red' }]) {
    t.equal((await service.call('POST', '/api/v1/repositories', { token: owner.token, body })).status, 400, `400 for ${JSON.stringify(body)}`);
  }
  t.equal((await service.call('POST', '/api/v1/repositories', { body: { name: 'anon' } })).status, 401);

  t.equal((await service.call('GET', `/api/v1/repositories/${id}`, { token: owner.token })).body.name, 'Physics History');
  t.equal((await service.call('GET', '/api/v1/repositories/physics-history', { token: owner.token })).body.id, id, 'by slug');
  t.equal((await service.call('GET', '/api/v1/repositories/nope', { token: owner.token })).status, 404);

  // No role there: the answer of a repository that does not exist, by id or slug, so a stranger learns neither.
  const missing = await service.call('GET', '/api/v1/repositories/nope', { token: stranger.token });
  for (const idOrSlug of [id, 'physics-history']) {
    const denied = await service.call('GET', `/api/v1/repositories/${idOrSlug}`, { token: stranger.token });
    t.equal(denied.status, 404, idOrSlug);
    t.same(denied.body, missing.body, 'the same body as for a missing repository');
  }
  t.same(missing.body, { error: 'not_found', message: 'repository not found' });
  const strangerList = await service.call('GET', '/api/v1/repositories', { token: stranger.token });
  t.same(strangerList.body, { items: [], total: 0 });
  const ownerList = await service.call('GET', '/api/v1/repositories', { token: owner.token });
  t.equal(ownerList.body.total, 2);

  const updated = await service.call('PUT', `/api/v1/repositories/${id}`, { token: owner.token, body: { name: 'History of Physics', slug: 'hop' } });
  t.equal(updated.status, 200);
  t.equal(updated.body.slug, 'hop');
  t.equal((await service.call('GET', '/api/v1/repositories/hop', { token: owner.token })).status, 200);
  t.equal((await service.call('GET', '/api/v1/repositories/physics-history', { token: owner.token })).status, 404, 'old slug released');
  t.equal((await service.call('PUT', `/api/v1/repositories/${id}`, { token: stranger.token, body: { name: 'mine' } })).status, 404);
  t.equal((await service.call('PUT', `/api/v1/repositories/${id}`, { token: owner.token, body: { slug: derived.body.slug } })).status, 409);
  t.equal((await service.call('PUT', `/api/v1/repositories/${id}`, { token: owner.token, body: { accepted_promptset_hashes: ['nothex'] } })).status, 400);

  t.equal((await service.call('DELETE', `/api/v1/repositories/${id}`, { token: stranger.token })).status, 404);
  t.equal((await service.call('DELETE', `/api/v1/repositories/${id}`, { token: owner.token })).status, 204);
  t.equal((await service.call('GET', `/api/v1/repositories/${id}`, { token: owner.token })).status, 404, 'deleted');
  const permissions = await service.call('GET', '/api/v1/permissions', { token: owner.token });
  t.notOk(
    permissions.body.domains.some((entry: { domain: string }) => entry.domain === `repository:${id}`),
    'the roles on a deleted repository end with it: no permission list names it',
  );
  const recreated = await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'again', slug: 'hop' } });
  t.equal(recreated.status, 201, 'a deleted repository frees its slug');

  const events = await service.context.store.readStream(`repository-${id}`);
  t.same(events.map((e) => e.type), ['RepositoryCreated', 'RepositoryUpdated', 'RepositoryDeleted']);
  t.ok(events.every((e) => e.actor === owner.user.id && e.repositoryId === id));
});

t.test('the promptset whitelist is a set: a hash listed twice is a 400 and the stored list stays', async (t) => {
  const owner = await registerUser(service, 'whitelist@example.org');
  const { id } = (await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Whitelist' } })).body;
  const whitelisted = await service.call('PUT', `/api/v1/repositories/${id}`, { token: owner.token, body: { accepted_promptset_hashes: ['a'.repeat(64)] } });
  t.same(whitelisted.body.accepted_promptset_hashes, ['a'.repeat(64)]);
  const repeated = await service.call('PUT', `/api/v1/repositories/${id}`, { token: owner.token, body: { accepted_promptset_hashes: ['b'.repeat(64), 'b'.repeat(64)] } });
  t.equal(repeated.status, 400);
  t.match(repeated.body, { error: 'bad_request', message: /accepted_promptset_hashes must NOT have duplicate items/ });
  t.same((await service.call('GET', `/api/v1/repositories/${id}`, { token: owner.token })).body.accepted_promptset_hashes, ['a'.repeat(64)], 'the stored whitelist is unchanged');
  const createdRepeated = await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'twice', accepted_promptset_hashes: ['c'.repeat(64), 'c'.repeat(64)] } });
  t.equal(createdRepeated.status, 400, 'nor can a repository be created with one');
});

t.test('reader role: reads but cannot write', async (t) => {
  const admin = await service.call('POST', '/api/v1/auth/login', { body: { email: 'owner@example.org', password: 'correct horse battery' } });
  const reader = await registerUser(service, 'reader@example.org');
  const repo = await service.call('POST', '/api/v1/repositories', { token: admin.body.token, body: { name: 'Shared notes' } });
  const grant = await service.call('PUT', '/api/v1/admin/users/roles', {
    token: admin.body.token,
    body: { user_id: reader.user.id, role: 'reader', domain: `repository:${repo.body.id}` },
  });
  t.equal(grant.status, 200);
  const read = await service.call('GET', `/api/v1/repositories/${repo.body.id}`, { token: reader.token });
  t.equal(read.status, 200);
  t.same(read.body.roles, ['reader']);
  t.equal((await service.call('PUT', `/api/v1/repositories/${repo.body.id}`, { token: reader.token, body: { name: 'x' } })).status, 403);
  t.equal((await service.call('POST', `/api/v1/repositories/${repo.body.id}/sources`, { token: reader.token, body: { url: 'http://127.0.0.1:1/x' } })).status, 403);
  t.equal((await service.call('GET', `/api/v1/repositories/${repo.body.id}/events`, { token: reader.token })).status, 200);
});
