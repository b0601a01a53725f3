import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let alice: Principal;
let bob: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Shared' });
  ({ owner: alice, stranger: bob, repository } = harness);
});
t.teardown(() => harness.close());

t.test('profiles: one changes one’s own; another’s needs user:write', async (t) => {
  t.match(await harness.app.users.updateProfile(alice, { user: alice.userId, name: 'Alice' }), { id: alice.userId, name: 'Alice' });
  await rejectsWith(t, harness.app.users.updateProfile(alice, { user: bob.userId, name: 'Robert' }), 'forbidden', /user:write/);
  t.match(await harness.app.users.updateProfile(harness.admin, { user: bob.userId, name: 'Robert' }), { name: 'Robert' });
  await rejectsWith(t, harness.app.users.updateProfile(alice, { user: alice.userId, email: 'not an email' }), 'invalid');
  // The email is what one signs in with: not changed through a key or token, however scoped.
  for (const kind of ['api_key', 'oauth'] as const) {
    await rejectsWith(t, harness.app.users.updateProfile({ ...alice, credential: { kind, id: 'k' } }, { user: alice.userId, email: 'taken-over@example.org' }), 'forbidden', /signed-in session/);
  }
});

t.test('email changes at once: the sign-in email and the profile end up the same; an address goes to one user', async (t) => {
  const knex = harness.service.context.db.knex;
  const carol = await harness.user('carol@example.org');
  const dave = await harness.user('dave@example.org');
  const own = await Promise.allSettled([1, 2, 3, 4].map((n) => harness.app.users.updateProfile(carol, { user: carol.userId, email: `carol-${n}@example.org` })));
  t.ok(own.every((outcome) => outcome.status === 'fulfilled'), 'each change of one user is made, one after another');
  const signIn = (await knex('credentials').where({ user_id: carol.userId }).first('email')).email;
  t.equal((await knex('users').where({ id: carol.userId }).first('email')).email, signIn, 'the profile shows the email one signs in with');

  const contested = await Promise.allSettled([carol, dave, carol, dave].map((who, n) => harness.app.users.updateProfile(who, { user: who.userId, email: 'shared-a@example.org' })));
  const refused = contested.flatMap((outcome) => (outcome.status === 'rejected' ? [outcome.reason as { code?: string }] : []));
  t.ok(refused.length >= 1 && refused.every((reason) => reason.code === 'conflict'), 'the other is told the address is taken, never an internal error');
  const holders = await knex('credentials').where({ email: 'shared-a@example.org' }).select('user_id');
  t.equal(holders.length, 1, 'one user holds the address');
  const profiles = await knex('users').where({ email: 'shared-a@example.org' }).select('id');
  t.same(profiles.map((row: { id: string }) => row.id), holders.map((row: { user_id: string }) => row.user_id), 'and only their profile shows it');
});

t.test('roles: granted and revoked with role:manage, checked against the catalog', async (t) => {
  const grant = { user_id: bob.userId, role: 'reader', domain: `repository:${repository}` };
  await rejectsWith(t, harness.app.users.grantRole(alice, grant), 'forbidden', /role:manage/);
  t.same(await harness.app.users.grantRole(harness.admin, grant, { correlationId: 'grant-1' }), grant);
  const reader = await harness.refreshed(bob);
  t.equal((await harness.app.repositories.get(reader, { repository })).id, repository, 'the grant takes effect');
  await harness.app.users.revokeRole(harness.admin, grant);
  await rejectsWith(t, harness.app.repositories.get(await harness.refreshed(bob), { repository }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.users.grantRole(harness.admin, { ...grant, domain: 'galaxy' }), 'invalid', /unknown domain/);
  await rejectsWith(t, harness.app.users.grantRole(harness.admin, { ...grant, role: 'sysadmin' }), 'invalid', /does not exist in domain/);
  await rejectsWith(t, harness.app.users.grantRole(harness.admin, { ...grant, user_id: 'nobody' }), 'not_found', /user/);
  await rejectsWith(t, harness.app.users.grantRole(harness.admin, { ...grant, domain: 'repository:gone' }), 'not_found', /repository/);
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, { ...grant, user_id: 'nobody' }), 'not_found');
  // A revocation is checked against the catalog as a grant is.
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, { ...grant, role: 'god', domain: 'system' }), 'invalid', /does not exist in domain/);
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, { ...grant, domain: 'garbage' }), 'invalid', /unknown domain/);
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, { ...grant, domain: 'repository:*' }), 'invalid');
});

t.test("an administrator's repository roles keep the members' rules: one role a member, an owner left", async (t) => {
  const erin = await harness.user('erin@example.org');
  const domain = `repository:${repository}`;
  await harness.app.users.grantRole(harness.admin, { user_id: erin.userId, role: 'reader', domain });
  await harness.app.users.grantRole(harness.admin, { user_id: erin.userId, role: 'editor', domain });
  const members = await harness.app.members.list(harness.admin, { repository });
  t.same(members.members.find((member) => member.user_id === erin.userId)?.roles, ['editor'], 'the new role replaces the old');
  const lastOwner = { user_id: alice.userId, role: 'owner', domain };
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, lastOwner), 'conflict', /last owner/);
  await rejectsWith(t, harness.app.users.grantRole(harness.admin, { ...lastOwner, role: 'reader' }), 'conflict', /last owner/);
  await harness.app.users.grantRole(harness.admin, { user_id: erin.userId, role: 'owner', domain });
  await harness.app.users.revokeRole(harness.admin, lastOwner);
  const after = await harness.app.members.list(harness.admin, { repository });
  t.same(after.members.filter((member) => member.roles.includes('owner')).map((member) => member.user_id), [erin.userId], 'with another owner, the first may go');
});

t.test('the last sysadmin keeps the role; with another one it may go', async (t) => {
  const admin = harness.admin.userId;
  const lastOne = { user_id: admin, role: 'sysadmin', domain: 'system' };
  await rejectsWith(t, harness.app.users.revokeRole(harness.admin, lastOne), 'conflict', /last sysadmin/);
  t.ok(await harness.service.context.db.knex('role_assignments').where({ user_id: admin, role: 'sysadmin', domain: 'system' }).first(), 'still held');

  const carol = await harness.user('carol-admin@example.org');
  await harness.app.users.grantRole(harness.admin, { user_id: carol.userId, role: 'sysadmin', domain: 'system' });
  // Two sysadmins revoking each other at once: one of them stays.
  const results = await Promise.allSettled([
    harness.app.users.revokeRole(harness.admin, { user_id: carol.userId, role: 'sysadmin', domain: 'system' }),
    harness.app.users.revokeRole(await harness.refreshed(carol), lastOne),
  ]);
  t.same(results.map((result) => result.status).sort(), ['fulfilled', 'rejected'], 'one revocation, one refusal');
  const holders = await harness.service.context.db.knex('role_assignments').where({ role: 'sysadmin', domain: 'system' }).pluck('user_id');
  t.equal(holders.length, 1, 'one sysadmin left');
});
