import t from 'tap';
import { inBackground, inProjections, isBackground, PriorityGate } from '../../src/db/priority.js';
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

t.test('the gate lets one holder in: requests, then projections, then background work, then deferred work', async (t) => {
  const gate = new PriorityGate();
  const order: string[] = [];
  await gate.enter();
  const waiters = [
    inBackground(() => gate.enter().then(() => order.push('deferred 1')), 'deferred'),
    inBackground(() => gate.enter().then(() => order.push('background 1'))),
    inProjections(() => gate.enter().then(() => order.push('projections 1'))),
    inBackground(() => gate.enter().then(() => order.push('deferred 2')), 'deferred'),
    inBackground(() => gate.enter().then(() => order.push('background 2'))),
    inProjections(() => gate.enter().then(() => order.push('projections 2'))),
    gate.enter().then(() => order.push('foreground')),
  ];
  t.same(gate.waiting(), { foreground: 1, projections: 2, background: 2, deferred: 2 });
  t.equal(inProjections(isBackground), false, 'projection work is not background work');
  for (let i = 0; i < waiters.length; i++) {
    gate.leave();
    await new Promise((resolve) => setImmediate(resolve));
  }
  await Promise.all(waiters);
  t.same(
    order,
    ['foreground', 'projections 1', 'projections 2', 'background 1', 'background 2', 'deferred 1', 'deferred 2'],
    'by level, each level in arrival order',
  );
  gate.leave();
  await gate.enter();
  t.pass('free again once every holder left');
});

t.test("a request's next statement, sent as its previous one ends, goes before waiting lower levels", async (t) => {
  const gate = new PriorityGate();
  const order: string[] = [];
  await gate.enter(); // a request's first statement
  const lower = [
    inProjections(() => gate.enter().then(() => order.push('projections'))).then(() => gate.leave()),
    inBackground(() => gate.enter().then(() => order.push('background'))).then(() => gate.leave()),
  ];
  gate.leave();
  await Promise.resolve(); // the request's code goes on to its next statement
  await gate.enter();
  order.push('request again');
  gate.leave();
  await Promise.all(lower);
  t.same(order, ['request again', 'projections', 'background'], 'then the lower levels, once the request sent nothing more');
  // A projection that leaves hands the connection on at once: waiting background work goes before a later request.
  const handedOn: string[] = [];
  await inProjections(() => gate.enter());
  const background = inBackground(() => gate.enter().then(() => handedOn.push('background'))).then(() => gate.leave());
  gate.leave();
  await Promise.resolve();
  await gate.enter();
  handedOn.push('request');
  gate.leave();
  await background;
  t.same(handedOn, ['background', 'request']);
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
  t.pass('transactions acquire and release through the gate');
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

t.test('the gate says how long ago a request last entered; projection and background work do not count', async (t) => {
  const gate = new PriorityGate();
  t.equal(gate.msSinceForeground(), Number.POSITIVE_INFINITY, 'no request yet');
  await inProjections(() => gate.enter());
  gate.leave();
  await inBackground(() => gate.enter());
  gate.leave();
  t.equal(gate.msSinceForeground(), Number.POSITIVE_INFINITY, 'projection and background work are no requests');
  await gate.enter();
  gate.leave();
  await new Promise((resolve) => setTimeout(resolve, 30));
  const since = gate.msSinceForeground();
  t.ok(since >= 25 && since < 10_000, `a request entered ${since.toFixed(1)} ms ago`);
});
