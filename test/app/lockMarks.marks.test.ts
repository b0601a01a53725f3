import t, { type Test } from 'tap';
import { createLockMarks } from '../../src/app/lockMarks.js';
import { withNamedLock, withNamedLocks } from '../../src/db/namedLock.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

/** The marks of src/app/lockMarks.ts on a database of their own, with a runner whose projections reach what `reached` says. */
async function fixture(t: Test) {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const reached = new Map<string, number>();
  const asked: Array<[string, number]> = [];
  /** The stream each ask named, in order. */
  const askedStreams: Array<string | undefined> = [];
  const whileAsked: { run?: () => Promise<void> } = {};
  const marks = createLockMarks({
    db,
    projections: {
      projectionReached: async (name, position, _timeoutMs, streamId) => {
        asked.push([name, position]);
        askedStreams.push(streamId);
        await whileAsked.run?.();
        return (reached.get(name) ?? 0) >= position;
      },
    },
    waitMs: 10,
  });
  const rows = () => db.knex('lock_pending_positions').orderBy(['lock_name', 'projection']).select('lock_name', 'projection', 'position');
  const write = (position: number) => ({ position, streamId: 's-1', streamVersion: 0, types: ['Something'] });
  return { db, marks, reached, asked, askedStreams, whileAsked, rows, write };
}

t.test('a write answered before its read models had it marks each lock held, for the read models its holders decide on', async (t) => {
  const { db, marks, rows, write } = await fixture(t);
  const roles = [{ name: 'roles', mode: 'shared' as const, readModels: ['users'] }, { name: 'session', mode: 'shared' as const, readModels: [] }];
  await withNamedLock(db, 'outer', () =>
    withNamedLocks(db, roles, async () => {
      await marks.leave(write(7), ['users', 'sources']);
      // Holders of a shared lock side by side: an earlier position marked after a later one.
      await marks.leave(write(5), ['users']);
    }),
  );
  t.same(await rows(), [
    { lock_name: 'outer', projection: 'sources', position: '7' },
    { lock_name: 'outer', projection: 'users', position: '7' },
    { lock_name: 'roles', projection: 'users', position: '7' },
  ], 'a lock that names none is marked for each; one that names some, for those; one that names none of them, not at all; the later position stays');
  await marks.leave(write(9), ['users']);
  t.equal((await rows()).length, 3, 'a write under no lock marks nothing');
});

t.test("the next holder waits for its lock's marks, then removes them; a lock without one asks nothing of the runner", async (t) => {
  const { db, marks, reached, asked, rows, write } = await fixture(t);
  await withNamedLock(db, 'members', () => marks.leave(write(12), ['users']), 'exclusive', ['users']);
  t.equal(await withNamedLock(db, 'another', async () => 'free', 'exclusive', ['users']), 'free', 'another lock goes on');
  t.same(asked, [], 'without waiting for anything');
  await t.rejects(withNamedLock(db, 'members', async () => t.fail('ran before the read model had the mark'), 'exclusive', ['users']), { name: 'ReadModelsBehindError', readModels: ['users'] });
  t.same(asked, [['users', 12]], 'the marked position is waited for, not the head');
  t.equal((await rows()).length, 1, 'the mark stays while it is not reached');
  reached.set('users', 12);
  t.equal(await withNamedLock(db, 'members', async () => 'ran', 'exclusive', ['users']), 'ran');
  t.same(await rows(), [], 'and is removed once it is');
});

t.test("holders of a shared lock marking writes of two streams keep a mark each; the next holder asks for each write with its stream", async (t) => {
  const { db, marks, reached, asked, askedStreams } = await fixture(t);
  const streamRows = () => db.knex('lock_pending_positions').orderBy('stream_id').select('stream_id', 'position');
  await withNamedLock(db, 'shared', async () => {
    await marks.leave({ position: 7, streamId: 's-a', streamVersion: 0, types: ['Something'] }, ['users']);
    await marks.leave({ position: 5, streamId: 's-b', streamVersion: 3, types: ['Something'] }, ['users']);
    await marks.leave({ position: 4, streamId: 's-b', streamVersion: 2, types: ['Something'] }, ['users']);
  }, 'shared', ['users']);
  t.same(await streamRows(), [{ stream_id: 's-a', position: '7' }, { stream_id: 's-b', position: '5' }], "an earlier write's position does not stand for another stream's; of one stream, the later stays");
  reached.set('users', 5);
  await t.rejects(withNamedLock(db, 'shared', async () => t.fail('ran before s-a was applied'), 'shared', ['users']), { name: 'ReadModelsBehindError', readModels: ['users'] }, 'refused while one write is not reached, its read model named once');
  t.same(asked.map(([, position], index) => [position, askedStreams[index]]).sort(), [[5, 's-b'], [7, 's-a']], 'each write asked for with its stream');
  reached.set('users', 7);
  t.equal(await withNamedLock(db, 'shared', async () => 'ran', 'shared', ['users']), 'ran');
  t.same(await streamRows(), [], 'both marks removed');
});

t.test('a mark a shared holder left at a later position meanwhile stays', async (t) => {
  const { db, marks, reached, whileAsked, rows, write } = await fixture(t);
  await withNamedLock(db, 'shared', () => marks.leave(write(3), ['users']), 'shared', ['users']);
  reached.set('users', 3);
  // While the next holder waits for 3, another holder of the shared lock marks 8.
  whileAsked.run = async () => {
    whileAsked.run = undefined;
    await marks.leave(write(8), ['users']);
  };
  t.equal(await withNamedLock(db, 'shared', async () => 'ran', 'shared', ['users']), 'ran');
  t.match(await rows(), [{ lock_name: 'shared', position: '8' }], 'the later mark is kept for the next holder');
});

t.test('on PGlite a holder of a lock without a mark makes no statement: the names with marks are known in the process', async (t) => {
  const { db, marks, reached, rows, write } = await fixture(t);
  await withNamedLock(db, 'marked', () => marks.leave(write(4), ['users']), 'exclusive', ['users']);
  const statements: string[] = [];
  const count = (query: { sql: string }) => void statements.push(query.sql);
  db.knex.on('query', count);
  t.teardown(() => void db.knex.off('query', count));
  await withNamedLocks(db, [{ name: 'unmarked', mode: 'exclusive', readModels: ['users'] }, { name: 'also', mode: 'shared' }], async () => undefined);
  t.same(statements, [], 'none for two locks without a mark');
  reached.set('users', 4);
  await withNamedLock(db, 'marked', async () => undefined, 'exclusive', ['users']);
  t.ok(statements.some((sql) => sql.includes('lock_pending_positions')), 'the marked one is looked up');
  t.same(await rows(), [], 'and cleared');
  statements.length = 0;
  await withNamedLock(db, 'marked', async () => undefined, 'exclusive', ['users']);
  t.same(statements, [], 'after which it is a lock without a mark again');
});
