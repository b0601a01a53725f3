import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { BUILT_IN_PROMPTSET_HASH } from '../../src/providers/llm/promptsets.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Settings' });
  ({ owner, repository } = harness);
});
t.teardown(() => harness.close());

t.test('contexts: custom ones set as a whole', async (t) => {
  const initial = await harness.app.settings.contexts(owner, { repository });
  t.same(initial.custom_contexts, []);
  t.ok(initial.contexts.some((context) => context.kind === 'built_in'));
  const set = await harness.app.settings.setContexts(owner, { repository, custom_contexts: [{ name: 'instrument', description: 'Lab tools.' }, { name: 'reagent' }] });
  t.same(set.custom_contexts, [{ name: 'instrument', description: 'Lab tools.' }, { name: 'reagent', description: '' }]);
  t.same(await harness.app.settings.contexts(owner, { repository }), set, 'the read model agrees with the command');
  await rejectsWith(t, harness.app.settings.setContexts(owner, { repository, custom_contexts: [{ name: '' }] }), 'invalid');
});

t.test('promptset: built in, overridden, reset', async (t) => {
  t.match(await harness.app.settings.promptset(owner, { repository }), { promptset_hash: BUILT_IN_PROMPTSET_HASH, overridden: [] });
  const changed = await harness.app.settings.setPrompts(owner, { repository, prompts: { fact_extraction: 'Custom. Reply {"facts": []}.' } });
  t.same(changed.overridden, ['fact_extraction']);
  t.not(changed.promptset_hash, BUILT_IN_PROMPTSET_HASH);
  t.same(await harness.app.settings.promptset(owner, { repository }), changed);
  t.same((await harness.app.settings.setPrompts(owner, { repository, prompts: { fact_extraction: null } })).overridden, []);
  await rejectsWith(t, harness.app.settings.setPrompts(owner, { repository, prompts: { no_such_phase: 'x' } }), 'invalid');
});

t.test('changing needs repositories:write', async (t) => {
  await rejectsWith(t, harness.app.settings.setPrompts({ ...owner, scopes: ['repositories:read'] }, { repository, prompts: { fact_extraction: null } }), 'forbidden', /repositories:write/);
  await rejectsWith(t, harness.app.settings.setContexts({ ...owner, scopes: ['repositories:read'] }, { repository, custom_contexts: [] }), 'forbidden', /repositories:write/);
});
