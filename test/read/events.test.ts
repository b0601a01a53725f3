import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'History' }, { correlationId: 'create-1' });
  ({ owner, stranger, repository } = harness);
  await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/history' });
});
t.teardown(() => harness.close());

t.test("a repository's events in log order, read on from next_from", async (t) => {
  const first = await harness.app.events.list(owner, { repository, limit: 1 });
  t.match(first.events, [{ type: 'RepositoryCreated', repository_id: repository, actor: owner.userId, correlation_id: 'create-1' }]);
  const rest = await harness.app.events.list(owner, { repository, from: first.next_from });
  t.ok(rest.events.some((event) => event.type === 'SourceRegistered'));
  t.ok(rest.events.every((event) => event.global_position > first.next_from));
  const none = await harness.app.events.list(owner, { repository, from: rest.next_from });
  t.same(none, { events: [], next_from: rest.next_from }, 'at the end, next_from stays');
  const head = await harness.service.context.store.headPosition();
  t.same(await harness.app.events.list(owner, { repository, from: head + 1_000_000 }), { events: [], next_from: head }, 'from beyond the head, next_from is the head');
  t.same((await harness.app.events.list(owner, { repository, types: ['SourceRegistered'] })).events.map((event) => event.type), ['SourceRegistered']);
});

t.test('a filtered read that reaches the end reads on from the head: a poller does not scan the same stretch again', async (t) => {
  const head = await harness.service.context.store.headPosition();
  t.same(await harness.app.events.list(owner, { repository, types: ['SourceDeleted'] }), { events: [], next_from: head }, 'nothing matched: past all of it');
  const created = await harness.app.events.list(owner, { repository, types: ['RepositoryCreated'] });
  t.equal(created.events.length, 1);
  t.ok(created.events[0].global_position < head, 'later events of other types follow it');
  t.equal(created.next_from, head, 'the page ended short of its limit: read on from the head, not from the match');
  const full = await harness.app.events.list(owner, { repository, limit: 1 });
  t.equal(full.next_from, full.events[0].global_position, 'a full page reads on from its last event');
});

t.test('bad input and denied access', async (t) => {
  await rejectsWith(t, harness.app.events.list(owner, { repository, limit: 1001 }), 'invalid', /limit/);
  await rejectsWith(t, harness.app.events.list(owner, { repository, from: -1 }), 'invalid', /from/);
  await rejectsWith(t, harness.app.events.list(stranger, { repository }), 'not_found', /^repository not found$/);
});

t.test('role grants on the repository: shown to those who may read its members, left out for readers', async (t) => {
  await harness.app.users.grantRole(harness.admin, { user_id: stranger.userId, role: 'reader', domain: `repository:${repository}` });
  const reader = await harness.refreshed(stranger);
  const forOwner = await harness.app.events.list(owner, { repository });
  t.ok(forOwner.events.some((event) => event.type === 'RoleGranted'), 'the owner (members:read) sees the grant');
  const forReader = await harness.app.events.list(reader, { repository });
  t.notOk(forReader.events.some((event) => event.type === 'RoleGranted' || event.type === 'RoleRevoked'), 'a reader does not');
  t.equal(forReader.next_from, forOwner.next_from, 'and reads on from the same position');
  t.same((await harness.app.events.list(reader, { repository, types: ['RoleGranted'] })).events, [], 'not even when asked for');
});

t.test("a deleted repository's history: read by its id by those whose events:read still covers it (a sysadmin), a 404 for everyone else", async (t) => {
  const created = await harness.app.repositories.create(owner, { name: 'Deleted with a history' });
  const creator = await harness.refreshed(owner);
  await harness.app.sources.add(creator, { repository: created.id, url: 'http://127.0.0.1:9/deleted-history' });
  await harness.app.repositories.remove(creator, { repository: created.id });
  const history = await harness.app.events.list(harness.admin, { repository: created.id });
  t.same(
    history.events.map((event) => event.type).filter((type) => type !== 'RoleGranted'),
    ['RepositoryCreated', 'SourceRegistered', 'RepositoryDeleted'],
    'the sysadmin reads it through its deletion',
  );
  t.ok(history.events.every((event) => event.repository_id === created.id), 'its events only');
  const formerOwner = await harness.refreshed(owner);
  t.notOk(formerOwner.assignments.some((assignment) => assignment.domain === `repository:${created.id}`), 'the deletion took its roles away');
  await rejectsWith(t, harness.app.events.list(formerOwner, { repository: created.id }), 'not_found', /repository not found/);
  // Not by its slug, which is released; a stranger learns nothing of it; nor of an id never used.
  await rejectsWith(t, harness.app.events.list(harness.admin, { repository: created.slug }), 'not_found', /repository not found/);
  await rejectsWith(t, harness.app.events.list(stranger, { repository: created.id }), 'not_found', /repository not found/);
  await rejectsWith(t, harness.app.events.list(harness.admin, { repository: '00000000-0000-4000-8000-0000000000d1' }), 'not_found', /repository not found/);
});
