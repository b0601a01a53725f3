import t from 'tap';
import { withNamedLock, withNamedLocks, type LockMode } from '../../src/db/namedLock.js';
import { openTestPglite } from '../helpers/pglite.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';
import { waitUntil } from '../eventstore/contract.js';

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs two holders of one name at once; answers the order their steps ran in. */
async function interleaving(first: Parameters<typeof withNamedLock>[0], second: Parameters<typeof withNamedLock>[0], name: string): Promise<string[]> {
  const steps: string[] = [];
  const holder = (db: Parameters<typeof withNamedLock>[0], label: string) =>
    withNamedLock(db, name, async () => {
      steps.push(`${label} in`);
      await pause(150);
      steps.push(`${label} out`);
    });
  await Promise.all([holder(first, 'one'), pause(20).then(() => holder(second, 'two'))]);
  return steps;
}

t.test('on the PostgreSQL server, two pools never hold one name together', async (t) => {
  const { scratch: nodeA, second: nodeB } = await scratchPostgresWithSecondPool(t, 'factlog_lock', 2);
  t.same(await interleaving(nodeA, nodeB, 'factlog.test.lock'), ['one in', 'one out', 'two in', 'two out'], 'the second waits for the first');
  const other = await Promise.all([withNamedLock(nodeA, 'factlog.test.a', async () => 'a'), withNamedLock(nodeB, 'factlog.test.b', async () => 'b')]);
  t.same(other, ['a', 'b'], 'other names do not wait');
  await t.rejects(withNamedLock(nodeA, 'factlog.test.lock', async () => Promise.reject(new Error('boom'))), /boom/);
  t.same(await interleaving(nodeB, nodeA, 'factlog.test.lock'), ['one in', 'one out', 'two in', 'two out'], 'a failed holder released the lock');
});

// Two pools of one process share its in-process queue (keyed by name alone), which then decides
// the test above before the database is asked. Here the other process is a session of the second
// pool taking the advisory lock itself, as another process's withNamedLock would: only the lock
// in the database can keep the two apart.
t.test('on the PostgreSQL server, the name is held in the database against holders in other processes', async (t) => {
  const { scratch: db, second: other } = await scratchPostgresWithSecondPool(t, 'factlog_lock_db', 2);
  const name = 'factlog.test.database';
  const peer = (await other.knex.client.acquireConnection()) as { query(sql: string, params: unknown[]): Promise<{ rows: Array<{ answer: unknown }> }> };
  t.teardown(() => other.knex.client.releaseConnection(peer));
  const ask = async (lockFunction: string) => (await peer.query(`SELECT ${lockFunction}(hashtext($1)) AS answer`, [name])).rows[0]?.answer;
  /** A holder of the name in this process that stays until `leave` is called. */
  const holding = (mode: LockMode) => {
    let leave!: () => void;
    let entered!: () => void;
    const left = new Promise<void>((resolve) => (leave = resolve));
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const done = withNamedLock(db, name, async () => {
      entered();
      await left;
    }, mode);
    return { inside, leave, done };
  };

  const exclusive = holding('exclusive');
  await exclusive.inside;
  t.equal(await ask('pg_try_advisory_lock_shared'), false, 'while held here, another process cannot take the name, not even shared');
  exclusive.leave();
  await exclusive.done;
  t.equal(await ask('pg_try_advisory_lock'), true, 'released in the database when the holder left');

  // The other process holds it now: a holder here waits in the database, then goes in.
  let entered = false;
  const waiting = withNamedLock(db, name, async () => void (entered = true));
  await waitUntil(
    // Or in already: then the check below fails at once rather than at the timeout.
    async () => entered || Number((await other.knex.raw<{ rows: Array<{ waiting: string }> }>(`SELECT count(*) AS waiting FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rows[0]?.waiting) === 1,
    60_000,
    'the holder here waiting for the advisory lock',
  );
  t.equal(entered, false, 'a holder here waits while another process holds the name');
  t.equal(await ask('pg_advisory_unlock'), true);
  await waiting;
  t.equal(entered, true, 'and goes in once it is released');

  const shared = holding('shared');
  await shared.inside;
  t.equal(await ask('pg_try_advisory_lock'), false, 'held shared here, another process cannot take it alone');
  t.equal(await ask('pg_try_advisory_lock_shared'), true, 'but can share it');
  t.equal(await ask('pg_advisory_unlock_shared'), true);
  shared.leave();
  await shared.done;
  t.equal(await ask('pg_try_advisory_lock'), true, 'released in the database when the shared holder left');
  t.equal(await ask('pg_advisory_unlock'), true);
});

t.test('on PGlite (one process), holders in the process queue', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  t.same(await interleaving(db, db, 'factlog.test.local'), ['one in', 'one out', 'two in', 'two out']);
});

/** Holders of one name in `modes`, each starting 20 ms after the one before; answers the order their steps ran in. */
async function modeInterleaving(dbs: Array<Parameters<typeof withNamedLock>[0]>, name: string, modes: LockMode[]): Promise<string[]> {
  const steps: string[] = [];
  await Promise.all(
    modes.map((mode, index) =>
      pause(20 * index).then(() =>
        withNamedLock(
          dbs[index % dbs.length],
          name,
          async () => {
            steps.push(`${index} in`);
            await pause(150);
            steps.push(`${index} out`);
          },
          mode,
        ),
      ),
    ),
  );
  return steps;
}

t.test('shared holders hold a name together, an exclusive one alone; a shared one arriving after an exclusive waiter waits behind it', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  const expected = ['0 in', '1 in', '0 out', '1 out', '2 in', '2 out', '3 in', '4 in', '3 out', '4 out'];
  t.same(await modeInterleaving([db], 'factlog.test.shared', ['shared', 'shared', 'exclusive', 'shared', 'shared']), expected, 'in this process');

  // Across two pools each holder first takes a connection, so start times say nothing of arrival: each
  // step starts once the one before holds the lock (or, if it never could, after a second).
  const { scratch: nodeA, second: nodeB } = await scratchPostgresWithSecondPool(t, 'factlog_lock_shared', 3);
  const name = 'factlog.test.shared';
  const signal = () => {
    let open!: () => void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    return { open, opened: Promise.race([opened, pause(1000)]) };
  };
  const steps: string[] = [];
  const holder = (db: Parameters<typeof withNamedLock>[0], label: string, mode: LockMode, entered: () => void, leave: Promise<unknown>) =>
    withNamedLock(db, name, async () => {
      steps.push(`${label} in`);
      entered();
      await leave;
      steps.push(`${label} out`);
    }, mode);
  const firstIn = signal();
  const bothIn = signal();
  let inside = 0;
  const enter = () => (++inside === 1 ? firstIn.open() : bothIn.open());
  const sharedA = holder(nodeA, 'A', 'shared', enter, bothIn.opened.then(() => pause(100)));
  await firstIn.opened;
  const sharedB = holder(nodeB, 'B', 'shared', enter, bothIn.opened.then(() => pause(100)));
  await bothIn.opened;
  const exclusive = holder(nodeA, 'X', 'exclusive', () => undefined, Promise.resolve());
  await Promise.all([sharedA, sharedB, exclusive]);
  t.same(steps.slice(0, 2), ['A in', 'B in'], 'across two pools, two shared holders hold the name together');
  t.same(steps.slice(4), ['X in', 'X out'], 'and an exclusive one in either pool only after both left');

  steps.length = 0;
  const exclusiveIn = signal();
  const first = holder(nodeB, 'X', 'exclusive', exclusiveIn.open, exclusiveIn.opened.then(() => pause(150)));
  await exclusiveIn.opened;
  const togetherIn = signal();
  let sharedInside = 0;
  const enterShared = () => void (++sharedInside === 2 && togetherIn.open());
  const later = [holder(nodeA, 'A', 'shared', enterShared, togetherIn.opened), holder(nodeB, 'B', 'shared', enterShared, togetherIn.opened)];
  await Promise.all([first, ...later]);
  t.same(steps.slice(0, 2), ['X in', 'X out'], 'shared holders wait for an exclusive one in another process');
  // Which of the two waiting backends PostgreSQL wakes first is its choice: both are in before either is out.
  t.same(steps.slice(2, 4).sort(), ['A in', 'B in'], 'then hold it together');
});

t.test('several names held at once: one pooled connection holds them all, each in its mode, all released after', async (t) => {
  // A pool of one: nested withNamedLock calls would wait for a second connection for ever.
  const { scratch: db, second: onePool } = await scratchPostgresWithSecondPool(t, 'factlog_lock_many', 1);
  const advisory = async () =>
    (await db.knex.raw<{ rows: Array<{ mode: string }> }>(
      `SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY mode`,
    )).rows.map((row) => row.mode);
  const held = await withNamedLocks(onePool, [{ name: 'factlog.test.many.a', mode: 'shared' }, { name: 'factlog.test.many.b', mode: 'exclusive' }], async () => advisory());
  t.same(held, ['ExclusiveLock', 'ShareLock'], 'both held, the first shared, the second alone');
  t.same(await advisory(), [], 'and both released');
  await t.rejects(withNamedLocks(onePool, [{ name: 'factlog.test.many.a', mode: 'exclusive' }, { name: 'factlog.test.many.b', mode: 'exclusive' }], async () => Promise.reject(new Error('boom'))), /boom/);
  t.same(await advisory(), [], 'a failed holder released every name');
  t.equal(await withNamedLock(onePool, 'factlog.test.many.b', async () => 'taken again'), 'taken again');
});

t.test('holders as many as the pool has connections still get connections for their work; nested locks need no place of their own', async (t) => {
  // Each holder keeps a pooled connection for its locks while its work queries on another, as a
  // fenced command appends. Eight holders on a pool of four took all four for their locks before,
  // and their queries waited out the pool's acquire timeout.
  const { second: smallPool } = await scratchPostgresWithSecondPool(t, 'factlog_lock_pool', 4);
  let inside = 0;
  let mostInside = 0;
  const answers = await Promise.all(
    Array.from({ length: 8 }, (_, index) =>
      withNamedLock(smallPool, `factlog.test.pool.${index}`, async () => {
        mostInside = Math.max(mostInside, ++inside);
        try {
          // A lock taken inside a holder's work (a command's own lock around the fence's) is part of it.
          return await withNamedLock(smallPool, `factlog.test.pool.nested.${index}`, async () => {
            const { rows } = await smallPool.knex.raw<{ rows: Array<{ answer: number }> }>('SELECT ?::int AS answer', [index]);
            return rows[0]?.answer;
          });
        } finally {
          inside -= 1;
        }
      }),
    ),
  );
  t.same(answers, [0, 1, 2, 3, 4, 5, 6, 7], 'every holder ran its query');
  t.equal(mostInside, 1, 'a pool of four: one outermost holder at a time (a quarter of it)');
});
