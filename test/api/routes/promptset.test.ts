import t from 'tap';
import { BUILT_IN_PROMPTSET_HASH, builtInPromptset, effectivePromptset } from '../../../src/providers/llm/promptsets.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;

t.before(async () => {
  service = await startTestService();
});
t.teardown(() => service.close());

const call = (method: 'GET' | 'PUT', url: string, token?: string, body?: unknown) => service.call(method, url, { token, body });

t.test('promptset: read the built-in, override, reset; permissions', async (t) => {
  const owner = await registerUser(service, 'prompt-owner@example.org');
  const reader = await registerUser(service, 'prompt-reader@example.org');
  const stranger = await registerUser(service, 'prompt-stranger@example.org');
  const repo = await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Prompted' } });
  t.equal(repo.status, 201);
  const url = `/api/v1/repositories/${repo.body.id}/promptset`;
  const grant = await service.call('PUT', '/api/v1/admin/users/roles', {
    token: owner.token,
    body: { user_id: reader.user.id, role: 'reader', domain: `repository:${repo.body.id}` },
  });
  t.equal(grant.status, 200, 'reader granted');

  const initial = await call('GET', url, owner.token);
  t.equal(initial.status, 200);
  t.same(initial.body, { phases: builtInPromptset().phases, promptset_hash: BUILT_IN_PROMPTSET_HASH, overridden: [], built_in_hash: BUILT_IN_PROMPTSET_HASH });
  t.equal((await call('GET', `/api/v1/repositories/${repo.body.slug}/promptset`, reader.token)).status, 200, 'a reader reads, by slug too');

  const shared = await call('PUT', url, owner.token, { prompts: { fact_extraction: 'Custom facts prompt. Reply {"facts": []}.' } });
  t.equal(shared.status, 200);
  t.same(shared.body.overridden, ['fact_extraction']);
  t.equal(shared.body.phases.fact_extraction, 'Custom facts prompt. Reply {"facts": []}.');
  const expectedHash = effectivePromptset({ fact_extraction: 'Custom facts prompt. Reply {"facts": []}.' }).hash;
  t.equal(shared.body.promptset_hash, expectedHash);
  t.not(shared.body.promptset_hash, BUILT_IN_PROMPTSET_HASH, 'a shared phase changes the hash');
  t.equal(shared.body.built_in_hash, BUILT_IN_PROMPTSET_HASH);

  const local = await call('PUT', url, owner.token, { prompts: { posture: 'Posture, my way.' } });
  t.same(local.body.overridden, ['fact_extraction', 'posture'], 'other phases keep their overrides');
  t.equal(local.body.promptset_hash, expectedHash, 'a local-only phase leaves the hash alone');

  const read = await call('GET', url, reader.token);
  t.same(read.body, local.body, 'GET reads the stored overrides back');

  const reset = await call('PUT', url, owner.token, { prompts: { fact_extraction: null, posture: null } });
  t.equal(reset.status, 200);
  t.same(reset.body.overridden, []);
  t.equal(reset.body.promptset_hash, BUILT_IN_PROMPTSET_HASH);
  t.same((await call('GET', url, owner.token)).body.overridden, []);

  const events = await service.context.store.readStream(`repository-${repo.body.id}`);
  const changes = events.filter((event) => event.type === 'RepositoryPromptsChanged').map((event) => event.data);
  t.same(changes, [
    { prompts: { fact_extraction: 'Custom facts prompt. Reply {"facts": []}.' } },
    { prompts: { fact_extraction: 'Custom facts prompt. Reply {"facts": []}.', posture: 'Posture, my way.' } },
    { prompts: {} },
  ]);

  t.equal((await call('PUT', url, reader.token, { prompts: { posture: 'x' } })).status, 403, 'a reader cannot write');
  t.equal((await call('GET', url, stranger.token)).status, 404, 'a stranger cannot read, nor learn that the repository exists');
  t.equal((await call('GET', url)).status, 401);
  t.equal((await call('GET', '/api/v1/repositories/nope/promptset', owner.token)).status, 404);
  for (const body of [{}, { prompts: {} }, { prompts: { unknown_phase: 'x' } }, { prompts: { posture: 3 } }, { prompts: { posture: '   ' } }, { prompts: { posture: 'x'.repeat(20_001) } }]) {
    const response = await call('PUT', url, owner.token, body);
    t.equal(response.status, 400, `400 for ${JSON.stringify(body).slice(0, 60)}`);
    t.type(response.body.message, 'string');
  }
});
