import t from 'tap';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;
let token: string;
let repoId: string;

t.before(async () => {
  service = await startTestService({ workers: false });
  token = (await registerUser(service, 'contexts@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Lab notes', preset: 'scientific' } })).body.id;
});
t.teardown(() => service.close());

t.test('a repository lists the contexts of its preset', async (t) => {
  const reply = await service.call('GET', `/api/v1/repositories/${repoId}/contexts`, { token });
  t.equal(reply.status, 200);
  t.equal(reply.body.preset, 'scientific');
  const names = reply.body.contexts.map((c: { name: string }) => c.name);
  t.ok(names.includes('chemical') && names.includes('person'), 'the preset’s ontology levels');
  t.notOk(names.includes('product'), 'levels outside the preset are not offered');
  t.same(reply.body.contexts.find((c: { name: string }) => c.name === 'hypothesis')?.kind, 'custom', 'the preset’s custom context');
  t.same(reply.body.custom_contexts, []);
});

t.test('custom contexts are set as a whole, and become assignable', async (t) => {
  const set = await service.call('PUT', `/api/v1/repositories/${repoId}/contexts`, {
    token,
    body: { custom_contexts: [{ name: 'Instrument', description: 'Lab instruments and apparatus.' }, { name: 'reagent' }] },
  });
  t.equal(set.status, 200, JSON.stringify(set.body));
  t.same(set.body.custom_contexts, [
    { name: 'instrument', description: 'Lab instruments and apparatus.' },
    { name: 'reagent', description: '' },
  ]);
  const names = set.body.contexts.map((c: { name: string }) => c.name);
  t.ok(names.includes('instrument') && names.includes('reagent'));

  const migrate = await service.call('POST', `/api/v1/repositories/${repoId}/concepts/migrate-context`, { token, body: { from_context: 'chemical', to_context: 'reagent' } });
  t.equal(migrate.status, 202, 'a custom context is a valid migration target');

  const cleared = await service.call('PUT', `/api/v1/repositories/${repoId}/contexts`, { token, body: { custom_contexts: [{ name: 'reagent' }] } });
  t.same(cleared.body.custom_contexts.map((c: { name: string }) => c.name), ['reagent']);
});

t.test('bad custom contexts are refused and change nothing', async (t) => {
  const before = (await service.call('GET', `/api/v1/repositories/${repoId}/contexts`, { token })).body;
  for (const [body, pattern] of [
    [{ custom_contexts: [{ name: 'person' }] }, /built-in/],
    [{ custom_contexts: [{ name: 'assay' }, { name: 'Assay' }] }, /twice/],
    [{ custom_contexts: [{ name: 'no/slashes' }] }, /must be/],
    [{ custom_contexts: 'assay' }, /custom_contexts/],
    [{}, /custom_contexts/],
  ] as const) {
    const reply = await service.call('PUT', `/api/v1/repositories/${repoId}/contexts`, { token, body });
    t.equal(reply.status, 400, JSON.stringify(body));
    t.equal(typeof reply.body.error, 'string');
    t.match(reply.body.message, pattern);
  }
  t.same((await service.call('GET', `/api/v1/repositories/${repoId}/contexts`, { token })).body, before);

  const stranger = await registerUser(service, 'stranger@example.org');
  const denied = await service.call('PUT', `/api/v1/repositories/${repoId}/contexts`, { token: stranger.token, body: { custom_contexts: [] } });
  t.equal(denied.status, 404, 'no role on the repository: as if there were none');
  t.equal((await service.call('GET', `/api/v1/repositories/nope/contexts`, { token })).status, 404);
});
