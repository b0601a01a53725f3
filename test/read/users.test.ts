import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let alice: Principal;
let bob: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Mine' });
  ({ owner: alice, stranger: bob, repository } = harness);
});
t.teardown(() => harness.close());

t.test('profiles: one’s own, or anyone’s with user:read', async (t) => {
  t.match(await harness.app.users.get(alice, { user: alice.userId }), { id: alice.userId, email: 'owner@example.org' });
  await rejectsWith(t, harness.app.users.get(alice, { user: bob.userId }), 'forbidden', /user:read/);
  t.match(await harness.app.users.get(harness.admin, { user: bob.userId }), { email: 'stranger@example.org' });
  await rejectsWith(t, harness.app.users.get(harness.admin, { user: 'nobody' }), 'not_found');
});

t.test('the user list and the catalog are for administrators', async (t) => {
  const { users } = await harness.app.users.list(harness.admin);
  t.same(users.map((user) => user.email).sort(), ['admin@example.org', 'owner@example.org', 'stranger@example.org']);
  t.match(users.find((user) => user.id === alice.userId)?.roles, [{ role: 'owner', domain: `repository:${repository}` }, { role: 'user', domain: 'system' }]);
  await rejectsWith(t, harness.app.users.list(alice), 'forbidden', /user:read/);
  t.ok(harness.app.users.catalog(harness.admin).roles.some((role) => role.name === 'owner'));
  t.throws(() => harness.app.users.catalog(alice), { code: 'forbidden' });
});

t.test("one's permissions per domain", async (t) => {
  const { user_id, domains } = harness.app.users.permissions(alice);
  t.equal(user_id, alice.userId);
  t.same(domains.map((domain) => [domain.domain, domain.roles]), [[`repository:${repository}`, ['owner']], ['system', ['user']]]);
  t.ok(domains[0].permissions.includes('facts:read'));
});
