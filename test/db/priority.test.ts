import t from 'tap';
import { inBackground, inProjections, isBackground } from '../../src/db/priority.js';
import { openTestPglite } from '../helpers/pglite.js';

t.test('inBackground marks the work it starts, and only that', async (t) => {
  t.equal(isBackground(), false);
  await inBackground(async () => {
    await new Promise((resolve) => setTimeout(resolve, 1));
    t.equal(isBackground(), true, 'still background after an await');
  });
  await inBackground(async () => t.equal(isBackground(), true, 'deferred work is background work too'), 'deferred');
  t.equal(isBackground(), false, 'the caller is not');
});

t.test('on PGlite a request waiting behind queued background statements goes first', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  const order: string[] = [];
  const background = inBackground(() =>
    Promise.all(Array.from({ length: 20 }, (_, i) => db.knex.raw('SELECT pg_sleep(0.002)').then(() => order.push(`background ${i}`)))),
  );
  // Queued after all twenty, yet answered before most of them.
  const foreground = db.knex.raw('SELECT 1').then(() => order.push('foreground'));
  await Promise.all([background, foreground]);
  t.ok(order.indexOf('foreground') <= 1, `the foreground statement ran at position ${order.indexOf('foreground')} of ${order.length}`);
  await db.knex.transaction(async (trx) => {
    await trx.raw('SELECT 1');
  });
  t.pass('transactions run through the session hand-out');
});

t.test('on PGlite requestsWaiting says whether a request waits for the connection', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  t.equal(db.requestsWaiting?.(), false, 'nobody waits');
  let request: Promise<string> | null = null;
  let queuedWork: Promise<string[]> | null = null;
  await db.knex.transaction(async (trx) => {
    await trx.raw('SELECT 1');
    // A knex query starts when it is awaited (then).
    const queued = [inBackground(() => db.knex.raw('SELECT 1').then(() => 'background')), inProjections(() => db.knex.raw('SELECT 1').then(() => 'projections'))];
    // knex takes a few turns of the loop to ask for the connection.
    await new Promise((resolve) => setTimeout(resolve, 20));
    t.equal(db.requestsWaiting?.(), false, 'background and projection work waiting is no request');
    request = db.knex.raw('SELECT 1').then(() => 'request');
    for (let turn = 0; turn < 1000 && db.requestsWaiting?.() !== true; turn++) await new Promise((resolve) => setImmediate(resolve));
    t.equal(db.requestsWaiting?.(), true, 'a request waits behind the transaction');
    queuedWork = Promise.all(queued);
  });
  t.equal(await request, 'request');
  t.same(await queuedWork, ['background', 'projections']);
  t.equal(db.requestsWaiting?.(), false, 'answered');
});

t.test('on PGlite a transaction is never interleaved with statements sent meanwhile', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await db.knex.raw('CREATE TABLE interleaved (n int)');
  let outside: Promise<unknown> | null = null;
  await t.rejects(
    inBackground(() =>
      db.knex.transaction(async (trx) => {
        await trx.raw('INSERT INTO interleaved VALUES (1)');
        // Sent while the transaction is open, at a higher level: it must not run inside it.
        outside = db.knex.raw('INSERT INTO interleaved VALUES (2)').then(() => 'sent');
        await new Promise((resolve) => setTimeout(resolve, 20));
        await trx.raw('INSERT INTO interleaved VALUES (3)');
        throw new Error('roll back');
      }),
    ),
    /roll back/,
  );
  await outside;
  t.same((await db.knex.raw('SELECT n FROM interleaved ORDER BY n')).rows, [{ n: 2 }], "the outside statement kept, the transaction's rolled back");
});

t.test('on PGlite msSinceRequest says how long ago a request sent a statement; projection and background work do not count', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await db.knex.raw('SELECT 1');
  await new Promise((resolve) => setTimeout(resolve, 30));
  // A knex query starts when awaited: inside the mark, as the runner's and the stages' code does.
  await inProjections(async () => await db.knex.raw('SELECT 1'));
  await inBackground(async () => await db.knex.raw('SELECT 1'));
  const since = db.msSinceRequest?.() ?? 0;
  t.ok(since >= 25 && since < 10_000, `a request sent a statement ${since.toFixed(1)} ms ago`);
  await db.knex.raw('SELECT 1');
  t.ok((db.msSinceRequest?.() ?? 0) < 25, 'and a request now');
});

t.test("on PGlite a transaction's BEGIN goes with its first statement: until then other statements run", async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  await db.knex.raw('CREATE TABLE computed (n int)');
  let release!: () => void;
  const computing = new Promise<void>((resolve) => (release = resolve));
  const transaction = inProjections(() =>
    db.knex.transaction(async (trx) => {
      await computing; // the transaction's code working out its first statement
      await trx.raw('INSERT INTO computed VALUES (1)');
      return (await trx.raw('SHOW transaction_isolation')).rows[0];
    }, { isolationLevel: 'serializable' }),
  );
  await new Promise((resolve) => setTimeout(resolve, 20));
  try {
    const outside = inBackground(async () => (await db.knex.raw('INSERT INTO computed VALUES (2)'), 'ran'));
    t.equal(await Promise.race([outside, new Promise((resolve) => setTimeout(() => resolve('waited for the transaction'), 2000))]), 'ran');
  } finally {
    release();
  }
  t.same(await transaction, { transaction_isolation: 'serializable' }, 'the held BEGIN, with its isolation level, opened the transaction');
  await db.knex.transaction(async () => undefined);
  t.same((await db.knex.raw('SELECT n FROM computed ORDER BY n')).rows, [{ n: 1 }, { n: 2 }], 'an empty transaction commits, and nothing stays open');
  await t.rejects(
    db.knex.transaction(async (trx) => {
      await trx.raw('INSERT INTO computed VALUES (3)');
      throw new Error('roll back');
    }),
    /roll back/,
  );
  t.same((await db.knex.raw('SELECT count(*)::int AS n FROM computed')).rows, [{ n: 2 }], 'a rollback undoes the first statement');
});
