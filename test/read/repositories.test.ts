import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
const ids: string[] = [];

t.before(async () => {
  harness = await startTestApplication();
  owner = await harness.user('lister@example.org');
  stranger = harness.stranger;
  for (const name of ['First', 'Second', 'Third']) ids.push((await harness.app.repositories.create(owner, { name })).id);
  owner = await harness.refreshed(owner);
});
t.teardown(() => harness.close());

t.test('list: the repositories one holds a role on, oldest first; a sysadmin sees all', async (t) => {
  const mine = await harness.app.repositories.list(owner, { limit: 2, offset: 1 });
  t.equal(mine.total, 3);
  t.same(mine.items.map((repository) => repository.id), ids.slice(1));
  t.same(mine.items[0].roles, ['owner']);
  t.same(await harness.app.repositories.list(stranger), { items: [], total: 0 });
  const all = await harness.app.repositories.list(harness.admin);
  t.equal(all.total, 4, "the harness's own repository too");
  t.same(all.items[0].roles, [], 'no role of its own');
  await rejectsWith(t, harness.app.repositories.list(owner, { limit: 501 }), 'invalid');
});

t.test('get by id or slug; presets', async (t) => {
  const byId = await harness.app.repositories.get(owner, { repository: ids[0] });
  t.match(byId, { name: 'First', created_at: /Z$/ });
  t.equal((await harness.app.repositories.get(owner, { repository: byId.slug })).id, ids[0]);
  await rejectsWith(t, harness.app.repositories.get(stranger, { repository: ids[0] }), 'not_found', /^repository not found$/);
  const presets = harness.app.repositories.presets(stranger);
  t.ok(presets.presets.some((preset) => preset.id === presets.default), 'the default is one of them');
});
