import t from 'tap';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

// A repository's members, managed by its owners: GET/PUT /repositories/{id}/members, DELETE .../members/{userID}.

let service: TestService;
let admin: Awaited<ReturnType<typeof registerUser>>;
let owner: Awaited<ReturnType<typeof registerUser>>;
let colleague: Awaited<ReturnType<typeof registerUser>>;
let stranger: Awaited<ReturnType<typeof registerUser>>;

t.before(async () => {
  service = await startTestService({ workers: false });
  admin = await registerUser(service, 'admin@example.org'); // the first user: sysadmin
  owner = await registerUser(service, 'owner@example.org', undefined, 'Olive Owner');
  colleague = await registerUser(service, 'colleague@example.org', undefined, 'Colin Colleague');
  stranger = await registerUser(service, 'stranger@example.org');
});
t.teardown(() => service.close());

const newRepository = async (name: string) => (await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name } })).body.id as string;
const membersOf = (repoId: string, token = owner.token) => service.call('GET', `/api/v1/repositories/${repoId}/members`, { token });
const setRole = (repoId: string, body: Record<string, unknown>, token = owner.token) => service.call('PUT', `/api/v1/repositories/${repoId}/members`, { token, body });
const remove = (repoId: string, userId: string, token = owner.token) => service.call('DELETE', `/api/v1/repositories/${repoId}/members/${userId}`, { token });
const roles = async (repoId: string) =>
  Object.fromEntries(((await membersOf(repoId, admin.token)).body.members as Array<{ email: string; roles: string[] }>).map((member) => [member.email, member.roles]));

t.test('an owner adds a member by email, changes their role, and the role takes effect', async (t) => {
  const repoId = await newRepository('Members');
  const initial = await membersOf(repoId);
  t.equal(initial.status, 200);
  t.same(initial.body.members, [{ user_id: owner.user.id, email: 'owner@example.org', name: 'Olive Owner', roles: ['owner'] }], 'the creator is its owner');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}`, { token: colleague.token })).status, 404, 'a user without a role has no access (nor learns the repository exists)');

  const added = await setRole(repoId, { email: ' Colleague@Example.org ', role: 'reader' });
  t.equal(added.status, 200);
  t.same(added.body, { user_id: colleague.user.id, email: 'colleague@example.org', name: 'Colin Colleague', roles: ['reader'] }, 'found by their email as registered');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}`, { token: colleague.token })).status, 200, 'a reader reads');
  t.equal((await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: colleague.token, body: { url: 'https://example.org/a' } })).status, 403, 'and does not add sources');

  const promoted = await setRole(repoId, { user_id: colleague.user.id, role: 'editor' });
  t.same(promoted.body.roles, ['editor'], 'one role a member: the reader role went');
  t.same(await roles(repoId), { 'colleague@example.org': ['editor'], 'owner@example.org': ['owner'] });
  t.equal((await setRole(repoId, { user_id: colleague.user.id, role: 'editor' })).status, 200, 'setting the role held is no change and no error');

  // The history: the grants and the revocation on the colleague's stream, the owner as actor.
  const history = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=user-${colleague.user.id}`, { token: owner.token });
  t.same(
    (history.body.events as Array<{ type: string; actor: string; data: { role: string } }>).map((event) => [event.type, event.data.role, event.actor]),
    [
      ['RoleGranted', 'reader', owner.user.id],
      ['RoleGranted', 'editor', owner.user.id],
      ['RoleRevoked', 'reader', owner.user.id],
    ],
  );
});

t.test('only owners (and sysadmins) see and manage members', async (t) => {
  const repoId = await newRepository('Guarded');
  await setRole(repoId, { user_id: colleague.user.id, role: 'editor' });
  t.equal((await membersOf(repoId, colleague.token)).status, 403, 'an editor does not list members');
  t.equal((await setRole(repoId, { user_id: stranger.user.id, role: 'reader' }, colleague.token)).status, 403, 'nor adds them');
  t.equal((await remove(repoId, owner.user.id, colleague.token)).status, 403, 'nor removes them');
  t.equal((await membersOf(repoId, stranger.token)).status, 404, 'a stranger is refused, told of no repository');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/members`)).status, 401, 'and so is an anonymous caller');
  const bySysadmin = await setRole(repoId, { user_id: stranger.user.id, role: 'reader' }, admin.token);
  t.equal(bySysadmin.status, 200, 'a sysadmin manages any repository');
  t.same(await roles(repoId), { 'colleague@example.org': ['editor'], 'owner@example.org': ['owner'], 'stranger@example.org': ['reader'] });
});

t.test('bad requests are refused clearly and change nothing', async (t) => {
  const repoId = await newRepository('Strict');
  const before = await roles(repoId);
  const cases: Array<[Record<string, unknown>, number, RegExp]> = [
    [{ user_id: colleague.user.id, role: 'admin' }, 400, /role 'admin' does not exist on a repository: use owner, editor, reader/],
    [{ user_id: colleague.user.id, role: 'sysadmin' }, 400, /role 'sysadmin' does not exist on a repository/],
    [{ user_id: colleague.user.id, email: 'colleague@example.org', role: 'reader' }, 400, /by user_id or by email, one of the two/],
    [{ role: 'reader' }, 400, /by user_id or by email, one of the two/],
    [{ user_id: colleague.user.id }, 400, /role/],
    [{ user_id: colleague.user.id, role: 'reader', domain: 'system' }, 400, /^body must NOT have additional properties \('domain'\)$/],
    [{ email: 'nobody@example.org', role: 'reader' }, 404, /user not found/],
    [{ user_id: '00000000-0000-4000-8000-000000000000', role: 'reader' }, 404, /user not found/],
  ];
  for (const [body, status, message] of cases) {
    const reply = await setRole(repoId, body);
    t.equal(reply.status, status, JSON.stringify(body));
    t.match(reply.body, { error: String, message }, JSON.stringify(body));
  }
  t.equal((await setRole('no-such-repository', { user_id: colleague.user.id, role: 'reader' })).status, 404, 'an unknown repository');
  t.equal((await remove(repoId, colleague.user.id)).status, 404, 'removing a user who is no member');
  t.match((await remove(repoId, colleague.user.id)).body.message, /member not found/);
  t.equal((await remove(repoId, '00000000-0000-4000-8000-000000000000')).status, 404, 'removing an unknown user');
  t.same(await roles(repoId), before, 'nothing changed');
});

t.test('a repository keeps an owner: the last one can neither leave nor step down', async (t) => {
  const repoId = await newRepository('Owned');
  const demoted = await setRole(repoId, { user_id: owner.user.id, role: 'reader' });
  t.equal(demoted.status, 409);
  t.match(demoted.body, { error: 'conflict', message: /last owner/ });
  t.equal((await remove(repoId, owner.user.id)).status, 409);
  t.same(await roles(repoId), { 'owner@example.org': ['owner'] }, 'still the owner');

  t.same((await setRole(repoId, { email: 'colleague@example.org', role: 'owner' })).body.roles, ['owner'], 'a second owner');
  const steppedDown = await setRole(repoId, { user_id: owner.user.id, role: 'reader' });
  t.equal(steppedDown.status, 200, 'with another owner, the first may step down');
  t.same(steppedDown.body.roles, ['reader']);
  t.equal((await membersOf(repoId)).status, 403, 'and manages members no more');
  t.equal((await remove(repoId, colleague.user.id, colleague.token)).status, 409, 'the remaining owner cannot remove themselves');

  t.equal((await remove(repoId, owner.user.id, colleague.token)).status, 204, 'the new owner removes the old one');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}`, { token: owner.token })).status, 404, 'who has no access left');
  t.same(await roles(repoId), { 'colleague@example.org': ['owner'] });
});

t.test('two owners stepping down at once leave one of them owner', async (t) => {
  const repoId = await newRepository('Race');
  await setRole(repoId, { user_id: colleague.user.id, role: 'owner' });
  const replies = await Promise.all([
    setRole(repoId, { user_id: owner.user.id, role: 'editor' }, owner.token),
    setRole(repoId, { user_id: colleague.user.id, role: 'editor' }, colleague.token),
  ]);
  t.same(replies.map((reply) => reply.status).sort(), [200, 409], 'one succeeds, the other is the last owner');
  const after = await roles(repoId);
  t.same(Object.values(after).flat().sort(), ['editor', 'owner']);
});

t.test("a role change after one the read model lags behind is a 503 unavailable with Retry-After, nothing changed; a body the route refuses is a 400 first", async (t) => {
  // Its own service: the settle wait is 200 ms (two thirds of the connection deadline).
  const lagging = await startTestService({ workers: false, overrides: { server: { read_timeout: '300ms', write_timeout: '0s' } } });
  t.teardown(() => lagging.close());
  await registerUser(lagging, 'admin@example.org');
  const first = await registerUser(lagging, 'first@example.org');
  const member = await registerUser(lagging, 'member@example.org');
  const repoId = (await lagging.call('POST', '/api/v1/repositories', { token: first.token, body: { name: 'Lagging' } })).body.id as string;
  const put = (body: Record<string, unknown>) => lagging.call('PUT', `/api/v1/repositories/${repoId}/members`, { token: first.token, body });
  t.equal((await put({ user_id: member.user.id, role: 'reader' })).status, 200);
  const { projections, store } = lagging.context;
  await projections.stop();
  t.equal((await put({ user_id: member.user.id, role: 'editor' })).status, 200, 'stored, answered before the read model has it');
  t.equal((await put({ user_id: member.user.id, role: 'captain' })).status, 400, 'an unknown role is refused as before');
  const refused = await put({ user_id: member.user.id, role: 'reader' });
  t.equal(refused.status, 503);
  t.match(refused.body, { error: 'unavailable', message: /read model users/ });
  t.ok(refused.headers['retry-after'], 'with Retry-After');
  const events = await store.readStream(`user-${member.user.id}`);
  t.same(events.slice(-2).map((event) => [event.type, (event.data as { role: string }).role]), [['RoleGranted', 'editor'], ['RoleRevoked', 'reader']], 'nothing appended by the refused change');
  await projections.start();
  await projections.caughtUp(await store.headPosition(), 30_000);
  const again = await put({ user_id: member.user.id, role: 'reader' });
  t.same([again.status, again.body.roles], [200, ['reader']], 'made once the read model has the first');
});
