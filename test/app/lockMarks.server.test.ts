import { AsyncLocalStorage } from 'node:async_hooks';
import t, { type Test } from 'tap';
import { createLockMarks } from '../../src/app/lockMarks.js';
import { openDatabase } from '../../src/db/database.js';
import { withNamedLock } from '../../src/db/namedLock.js';
import { registerUser, startServerNodes, type TestService } from '../helpers/service.js';

/**
 * The marks of src/app/lockMarks.ts on the server tier: the named locks are PostgreSQL advisory
 * locks, and a node looks a lock's marks up in the read-model database at each holder, so a change
 * one node answered before the read models had it holds back the next holder on another node
 * (test/app/lockMarks.test.ts has the same on PGlite, where the locks are in the process).
 */

/** Two nodes on one fresh database; their settle, and a lock's wait for its marks, waits two thirds of `readTimeout` (2 s by default: a refusal waits it out). */
async function twoNodes(t: Test, database: string, readTimeout = '3s') {
  const { nodes, scratch } = await startServerNodes(t, database, { overrides: { server: { read_timeout: readTimeout, write_timeout: '0s' } } });
  const [a, b] = nodes;
  const owner = await registerUser(a, 'owner@example.org');
  const newRepository = async (name: string) => {
    const created = await a.call('POST', '/api/v1/repositories', { token: owner.token, body: { name } });
    if (created.status !== 201) throw new Error(`repository ${name}: ${created.status} ${JSON.stringify(created.body)}`);
    return created.body.id as string;
  };
  /** The marks of a repository's locks, those at `atMost` or before if given (a later change may leave marks of its own when its wait runs out). */
  const marks = (repository: string, atMost = Number.MAX_SAFE_INTEGER) =>
    scratch.knex('lock_pending_positions').whereLike('lock_name', `%${repository}%`).where('position', '<=', atMost).orderBy(['lock_name', 'projection']).select('lock_name', 'projection');
  const head = () => a.context.store.headPosition();
  const events = async () => Number((await scratch.knex('events').count({ count: '*' }))[0].count);
  return { a, b, owner, newRepository, marks, events, head };
}

/** Runs `work` while the read models of every node are stopped, then runs them again until they have caught up with the log. */
async function whileReadModelsStopped<T>(nodes: readonly TestService[], work: () => Promise<T>): Promise<T> {
  for (const node of nodes) await node.context.projections.stop();
  try {
    return await work();
  } finally {
    for (const node of nodes) await node.context.projections.start();
    const head = await nodes[0].context.store.headPosition();
    for (const node of nodes) await node.context.projections.caughtUp(head, 30_000);
  }
}

t.test("a role change node A answered before the read models had it holds back the next one on node B until they have it", async (t) => {
  const { a, b, owner, newRepository, marks, events, head } = await twoNodes(t, 'factlog_lock_marks_roles');
  const repository = await newRepository('Locked across nodes');
  const members = `/api/v1/repositories/${repository}/members`;
  const member = await registerUser(a, 'member@example.org');
  t.equal((await a.call('PUT', members, { token: owner.token, body: { email: 'member@example.org', role: 'reader' } })).status, 200);
  const setRole = (node: TestService, role: string) => node.call('PUT', members, { token: owner.token, body: { user_id: member.user.id, role } });

  let changedOnA = 0;
  await whileReadModelsStopped([a, b], async () => {
    t.equal((await setRole(a, 'editor')).status, 200, 'node A answers before the read models have the change');
    changedOnA = await head();
    t.same(await marks(repository), [
      { lock_name: `factlog.members.${repository}`, projection: 'users' },
      { lock_name: `factlog.repository-access.${repository}`, projection: 'users' },
    ], "and leaves marks on the membership's lock and the repository's, in the read-model database");
    const before = await events();
    // B would read the member as a reader still, grant reader and revoke nothing: two roles.
    const refused = await setRole(b, 'reader');
    t.equal(refused.status, 503, "node B's next change under the lock is refused");
    t.match(refused.body, { error: 'unavailable', message: /users/ });
    t.ok(refused.headers['retry-after'], 'with Retry-After');
    t.equal(await events(), before, 'nothing appended');
    const invalid = await setRole(b, 'overlord');
    t.match({ status: invalid.status, body: invalid.body }, { status: 400, body: { error: String, message: String } }, 'a role that does not exist is refused as such');
    t.equal(await events(), before, 'nothing appended');
    t.equal((await marks(repository)).length, 2, 'the marks stay while the read models have not reached them');
  });

  t.equal((await setRole(b, 'reader')).status, 200, 'once the read models have caught up, node B makes the change');
  t.same(await marks(repository, changedOnA), [], 'and removes the marks it waited for');
  const listed = (await b.call('GET', members, { token: owner.token })).body.members as Array<{ user_id: string; roles: string[] }>;
  t.same(listed.find((each) => each.user_id === member.user.id)?.roles, ['reader'], 'the member has one role');
});

t.test("node B's next holder waits for the mark node A left while B's read models apply A's change: it is made, and the mark removed", async (t) => {
  // B's read models poll the event store for A's append: time enough for that on a busy machine.
  const { a, b, owner, newRepository, marks, head } = await twoNodes(t, 'factlog_lock_marks_applied', '15s');
  const repository = await newRepository('Applied elsewhere');
  const members = `/api/v1/repositories/${repository}/members`;
  const member = await registerUser(a, 'member@example.org');
  t.equal((await a.call('PUT', members, { token: owner.token, body: { email: 'member@example.org', role: 'reader' } })).status, 200);
  const setRole = (node: TestService, role: string) => node.call('PUT', members, { token: owner.token, body: { user_id: member.user.id, role } });
  // Only A's read models stop: B's run, and read A's change from the event store.
  await whileReadModelsStopped([a], async () => {
    t.equal((await setRole(a, 'editor')).status, 200);
    t.equal((await marks(repository)).length, 2, 'A leaves its marks');
    const changedOnA = await head();
    t.equal((await setRole(b, 'reader')).status, 200, "B waits for its read models to reach A's change, then makes its own");
    t.same(await marks(repository, changedOnA), [], 'and removes the marks');
  });
  const listed = (await b.call('GET', members, { token: owner.token })).body.members as Array<{ user_id: string; roles: string[] }>;
  t.same(listed.find((each) => each.user_id === member.user.id)?.roles, ['reader'], 'the member has one role');
});

t.test('a lock without a mark waits for nothing on another node: other URLs and repositories are added while the read models are stopped', async (t) => {
  const { a, b, owner, newRepository, marks, events } = await twoNodes(t, 'factlog_lock_marks_sources');
  const [first, second] = [await newRepository('First'), await newRepository('Second')];
  const add = (node: TestService, repository: string, url: string) => node.call('POST', `/api/v1/repositories/${repository}/sources`, { token: owner.token, body: { url } });
  const url = 'http://127.0.0.1:9/added-on-a';

  await whileReadModelsStopped([a, b], async () => {
    t.equal((await add(a, first, url)).status, 201, 'node A adds a URL');
    t.same(await marks(first), [{ lock_name: `factlog.source-reference.${first}.url:${url}`, projection: 'sources' }], "a mark on its reference's lock only");
    t.equal((await add(b, first, 'http://127.0.0.1:9/another')).status, 201, 'node B adds another URL to the repository');
    t.equal((await add(b, second, url)).status, 201, 'and the same URL to another repository');
    const before = await events();
    // B would not see A's source in the read model and register the URL a second time.
    t.equal((await add(b, first, url)).status, 503, 'the same URL in the same repository waits for the read model, and is refused');
    t.equal(await events(), before, 'nothing appended');
  });

  t.equal((await add(b, first, url)).status, 200, "once the read model has it, node B finds node A's source");
  t.same(await marks(first), [{ lock_name: `factlog.source-reference.${first}.url:http://127.0.0.1:9/another`, projection: 'sources' }], "and removes the mark of A's URL (B's other URL keeps its own until its next add)");
});

t.test("holders of a shared advisory lock on two nodes marking side by side keep the later position; the next holder clears only what it waited for", async (t) => {
  const { a } = await twoNodes(t, 'factlog_lock_marks_shared');
  // Two pools of their own on the nodes' database, each with its own marks: two nodes' holders, whatever the services hold.
  const url = (a.context.db.knex.client.config.connection as { connectionString: string }).connectionString;
  const reached = new Map<string, number>();
  const whileAsked: { run?: () => Promise<void> } = {};
  const node = async () => {
    const db = await openDatabase({ kind: 'postgres', url, maxConns: 4 });
    t.teardown(() => db.close());
    const marks = createLockMarks({
      db,
      projections: {
        projectionReached: async (name, position) => {
          await whileAsked.run?.();
          return (reached.get(name) ?? 0) >= position;
        },
      },
      waitMs: 10,
    });
    return { db, marks };
  };
  const [x, y] = [await node(), await node()];
  const rows = () => x.db.knex('lock_pending_positions').where('lock_name', 'shared-across-nodes').select('projection', 'position');
  const write = (position: number) => ({ position, streamId: 's-1', streamVersion: 0, types: ['Something'] });
  const shared = <T>(on: typeof x, work: () => Promise<T>) => withNamedLock(on.db, 'shared-across-nodes', work, 'shared', ['users']);

  // Both hold the lock at once (each enters before either marks), and the later position is marked first.
  let bothIn: () => void = () => undefined;
  const inside = new Promise<void>((resolve) => (bothIn = resolve));
  let entered = 0;
  const enter = () => {
    entered += 1;
    if (entered === 2) bothIn();
    return inside;
  };
  let markedLater: () => void = () => undefined;
  const laterMarked = new Promise<void>((resolve) => (markedLater = resolve));
  await Promise.all([
    shared(y, async () => {
      await enter();
      await y.marks.leave(write(8), ['users']);
      markedLater();
    }),
    shared(x, async () => {
      await enter();
      await laterMarked;
      await x.marks.leave(write(5), ['users']);
    }),
  ]);
  t.same(await rows(), [{ projection: 'users', position: '8' }], 'the later position stays');

  await t.rejects(shared(x, async () => t.fail('ran before the read model had the mark')), { name: 'ReadModelsBehindError' }, 'a holder on the other node waits for 8');
  reached.set('users', 8);
  // While the next holder on X waits for 8, a holder of the shared lock on Y marks 12: a holder
  // of its own, not of X's locks (the hook runs in X's holder, so Y's is started from outside it).
  const outsideX = AsyncLocalStorage.snapshot();
  whileAsked.run = async () => {
    whileAsked.run = undefined;
    await outsideX(() => shared(y, () => y.marks.leave(write(12), ['users'])));
  };
  t.equal(await shared(x, async () => 'ran'), 'ran');
  t.same(await rows(), [{ projection: 'users', position: '12' }], "the mark Y left meanwhile is kept for the next holder");
});
