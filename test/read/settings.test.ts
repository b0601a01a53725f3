import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { BUILT_IN_PROMPTSET_HASH } from '../../src/providers/llm/promptsets.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Settings' });
  ({ owner, stranger, repository } = harness);
});
t.teardown(() => harness.close());

t.test('contexts: the built-in levels of the preset, no custom ones yet', async (t) => {
  const initial = await harness.app.settings.contexts(owner, { repository });
  t.same(initial.custom_contexts, []);
  t.match(initial, { preset: harness.service.config.default_repository_preset });
  t.ok(initial.contexts.some((context) => context.kind === 'built_in'));
});

t.test('promptset: the built-in one', async (t) => {
  t.match(await harness.app.settings.promptset(owner, { repository }), { promptset_hash: BUILT_IN_PROMPTSET_HASH, built_in_hash: BUILT_IN_PROMPTSET_HASH, overridden: [] });
});

t.test('denied: reading needs repositories:read', async (t) => {
  await rejectsWith(t, harness.app.settings.contexts(stranger, { repository }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.settings.promptset({ ...owner, scopes: ['facts:read'] }, { repository }), 'forbidden', /repositories:read/);
});
