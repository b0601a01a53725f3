import t from 'tap';
import { withCallContext, type CallContext } from '../../src/app/callContext.js';
import type { Principal } from '../../src/auth/rbac.js';
import { membersOf } from '../../src/read/members.js';
import { startTestApplication, type TestApplication } from '../helpers/application.js';

/**
 * A command that holds a named lock, reads a read model, decides and appends answers before the
 * read models have its events when their wait runs out, or when they are stopped or failed (settle
 * waits for neither). The next holder of the same lock must not decide on the rows as they were:
 * src/app/lockMarks.ts. Here the read models are stopped, which a lag past the wait does alike.
 */
let harness: TestApplication;
let owner: Principal;

t.before(async () => {
  // The settle wait is 200 ms (two thirds of the connection deadline).
  harness = await startTestApplication({ name: 'Locked' }, undefined, { server: { read_timeout: '300ms', write_timeout: '0s' } });
  ({ owner } = harness);
});
t.teardown(() => harness.close());

/** A call as a transport makes one, so the fence re-checks what it was allowed (src/app/repositoryFence.ts). */
const call = <T>(operation: string, run: () => Promise<T>, principal?: Principal): Promise<T> =>
  withCallContext({ transport: 'rest', operation, principal } satisfies CallContext, run);

const outcome = (promise: Promise<unknown>) =>
  promise.then(
    () => 'answered',
    (error: Error) => (error.name === 'ReadModelsBehindError' ? 'refused: read models behind' : `refused: ${error.message}`),
  );

/**
 * Runs `lagged` while the read models are stopped, so its command answers before they have its
 * events, then `next`, which takes the same lock; answers `next`'s outcome once the read models
 * run again and have caught up.
 */
async function afterALaggedChange(lagged: () => Promise<unknown>, next: () => Promise<unknown>): Promise<string> {
  const { projections, store } = harness.service.context;
  await projections.stop();
  try {
    await lagged();
    return await outcome(next());
  } finally {
    await projections.start();
    await projections.caughtUp(await store.headPosition(), 30_000);
  }
}

let repositories = 0;
/** A repository of `owner` with a member of `role`. */
async function repositoryWith(role: string): Promise<{ repository: string; member: Principal; email: string }> {
  repositories += 1;
  const email = `member-${repositories}@example.org`;
  const { id: repository } = await harness.app.repositories.create(owner, { name: `Locked ${repositories}` });
  owner = await harness.refreshed(owner);
  const member = await harness.user(email);
  await call('add member', () => harness.app.members.setMemberRole(owner, { repository, email, role }), owner);
  return { repository, member: await harness.refreshed(member), email };
}

const rolesOf = async (repository: string, userId: string) => (await membersOf(harness.service.context.db.knex, repository)).find((member) => member.user_id === userId)?.roles ?? [];

t.test('a member whose role is set again after a change the read model lags behind keeps one role, not two', async (t) => {
  const { repository, member } = await repositoryWith('reader');
  const setRole = (role: string) => call('set role', () => harness.app.members.setMemberRole(owner, { repository, user_id: member.userId, role }), owner);
  // The second change read the member as a reader still, granted reader and revoked nothing: editor stayed.
  t.equal(await afterALaggedChange(() => setRole('editor'), () => setRole('reader')), 'refused: read models behind', 'refused (503), nothing appended');
  t.same(await rolesOf(repository, member.userId), ['editor'], 'the first change stands');
  await setRole('reader');
  t.same(await rolesOf(repository, member.userId), ['reader'], 'once the read model has it, the change is made whole');
});

t.test("a repository's owners do not demote each other past the last one while the read model lags", async (t) => {
  const { repository, member: second } = await repositoryWith('owner');
  const demote = (by: Principal, userId: string) => call('demote', () => harness.app.members.setMemberRole(by, { repository, user_id: userId, role: 'editor' }), by);
  // The second demotion counted two owners and was allowed by the role its caller had just lost.
  t.equal(await afterALaggedChange(() => demote(owner, second.userId), () => demote(second, owner.userId)), 'refused: read models behind');
  const members = await membersOf(harness.service.context.db.knex, repository);
  t.same(members.filter((member) => member.roles.includes('owner')).map((member) => member.user_id), [owner.userId], 'the repository keeps its owner');
});

t.test('a member removed while the read model lags is not let write by the check of its roles', async (t) => {
  const { repository, member } = await repositoryWith('editor');
  const write = () => call('create report', () => harness.app.reports.create(member, { repository, title: 'After removal', text: 'A sentence.' }), member);
  const removal = () => call('remove member', () => harness.app.members.removeMember(owner, { repository, user_id: member.userId }), owner);
  t.equal(await afterALaggedChange(removal, write), 'refused: read models behind', 'not written by a member who no longer is one');
  t.match(await outcome(write()), /^refused: permission denied/, 'and refused (403) once the read model has the removal');
  t.same((await harness.app.reports.list(owner, { repository })).items, [], 'no report');
});

t.test('two sysadmins revoked one after the other while the read model lags leave one sysadmin', async (t) => {
  const second = await harness.user('second-admin@example.org');
  const { admin } = harness;
  await call('grant', () => harness.app.users.grantRole(admin, { user_id: second.userId, role: 'sysadmin', domain: 'system' }), admin);
  const revoke = (userId: string) => call('revoke', () => harness.app.users.revokeRole(admin, { user_id: userId, role: 'sysadmin', domain: 'system' }), admin);
  // The second revocation counted two holders: the service was left with no sysadmin.
  t.equal(await afterALaggedChange(() => revoke(second.userId), () => revoke(admin.userId)), 'refused: read models behind');
  const holders = await harness.service.context.db.knex('role_assignments').where({ role: 'sysadmin', domain: 'system' }).pluck('user_id');
  t.same(holders, [admin.userId], 'one sysadmin left');
});

t.test('two parent changes while the reports read model lags do not close a cycle', async (t) => {
  const { repository } = await repositoryWith('reader');
  const a = await harness.app.reports.create(owner, { repository, title: 'A', text: 'A sentence.' });
  const b = await harness.app.reports.create(owner, { repository, title: 'B', text: 'B sentence.' });
  const under = (child: string, parent: string) => call('move', () => harness.app.reports.update(owner, { repository, report: child, parent_id: parent }), owner);
  // The second read A's chain without B above it, and put B under A: A under B under A.
  t.equal(await afterALaggedChange(() => under(a.id, b.id), () => under(b.id, a.id)), 'refused: read models behind');
  const parents = Object.fromEntries(await harness.service.context.db.knex('reports').whereIn('id', [a.id, b.id]).select('id', 'parent_id').then((rows: Array<{ id: string; parent_id: string | null }>) => rows.map((row) => [row.id, row.parent_id])));
  t.same(parents, { [a.id]: b.id, [b.id]: null }, 'A under B, and no cycle');
  t.match(await outcome(under(b.id, a.id)), /^refused: .*cycle/, 'refused as a cycle once the read model has the first');
});

t.test('a source deleted while the read model lags is not linked to an investigation after its deletion', async (t) => {
  const { repository } = await repositoryWith('reader');
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/deleted-then-linked' });
  const investigation = await harness.app.investigations.create(owner, { repository, title: 'Linked' });
  const link = () => call('link', () => harness.app.investigations.addSource(owner, { repository, investigation: investigation.id, source_id: source.id }), owner);
  const removal = () => call('delete source', () => harness.app.sources.remove(owner, { repository, source: source.id }), owner);
  // The link read the source as live and was appended after SourceDeleted: it outlived the deletion.
  t.equal(await afterALaggedChange(removal, link), 'refused: read models behind');
  t.match(await outcome(link()), /^refused: .*source/, 'not found once the read model has the deletion');
  const linked = await harness.service.context.db.knex('investigation_sources').where({ investigation_id: investigation.id }).pluck('source_id');
  t.same(linked, [], 'the investigation has no link to it');
});

t.test("two renames while the read model lags do not leave the first's slug reserved", async (t) => {
  const { repository } = await repositoryWith('reader');
  const rename = (slug: string) => call('rename', () => harness.app.repositories.update(owner, { repository, slug }), owner);
  // The second released the slug it read (the one before the first), and the first's new slug stayed reserved for ever.
  t.equal(await afterALaggedChange(() => rename('renamed-once'), () => rename('renamed-twice')), 'refused: read models behind');
  await rename('renamed-twice');
  t.same(await harness.service.context.db.knex('slug_reservations').where({ repository_id: repository }).pluck('slug'), ['renamed-twice'], 'only the slug it has');
});

t.test('an API key revoked while the read model lags does not act', async (t) => {
  const { repository } = await repositoryWith('reader');
  const { identity } = harness.service.context;
  const session = await identity.authenticate((await identity.login({ email: 'owner@example.org', password: 'correct horse battery' })).token);
  const created = await call('create key', () => harness.app.apiKeys.createApiKey(session, { name: 'Revoked', scopes: ['reports:create'], repository }), session);
  const keyHolder = await identity.authenticate(created.key);
  const write = () => call('create report', () => harness.app.reports.create(keyHolder, { repository, title: 'With a revoked key', text: 'A sentence.' }), keyHolder);
  const revoke = () => call('revoke key', () => harness.app.apiKeys.revokeApiKey(session, { keyId: created.id }), session);
  t.equal(await afterALaggedChange(revoke, write), 'refused: read models behind');
  t.match(await outcome(write()), /^refused: permission denied: the API key was revoked/, 'refused (403) once the read model has the revocation');
});

t.test('a lock without a mark waits for nothing: other references and repositories go on while the read models are stopped', async (t) => {
  const { repository } = await repositoryWith('reader');
  const { projections, store } = harness.service.context;
  await projections.stop();
  try {
    // Each through the fence's locks (the repository's, the credential's), which the first add's write leaves unmarked: they decide on roles, not sources.
    const add = (url: string) => call('add source', () => harness.app.sources.add(owner, { repository, url }), owner);
    await add('http://127.0.0.1:9/first-of-two');
    t.equal(await outcome(add('http://127.0.0.1:9/second-of-two')), 'answered', 'another reference in the same repository');
    t.same(await harness.service.context.db.knex('lock_pending_positions').whereLike('lock_name', `%${repository}%`).orderBy('lock_name').pluck('lock_name'), [
      `factlog.source-reference.${repository}.url:http://127.0.0.1:9/first-of-two`,
      `factlog.source-reference.${repository}.url:http://127.0.0.1:9/second-of-two`,
    ], "marks on the references' locks only, not on the repository's");
  } finally {
    await projections.start();
    await projections.caughtUp(await store.headPosition(), 30_000);
  }
});
