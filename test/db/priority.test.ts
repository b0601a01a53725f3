import t from 'tap';
import { inBackground, isBackground, PriorityGate } from '../../src/db/priority.js';
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

t.test('the gate lets one holder in: a waiting foreground caller first, then background ones, then deferred ones', async (t) => {
  const gate = new PriorityGate();
  const order: string[] = [];
  await gate.enter();
  const waiters = [
    inBackground(() => gate.enter().then(() => order.push('deferred 1')), 'deferred'),
    inBackground(() => gate.enter().then(() => order.push('background 1'))),
    inBackground(() => gate.enter().then(() => order.push('deferred 2')), 'deferred'),
    inBackground(() => gate.enter().then(() => order.push('background 2'))),
    gate.enter().then(() => order.push('foreground')),
  ];
  t.same(gate.waiting(), { foreground: 1, background: 2, deferred: 2 });
  for (let i = 0; i < 5; i++) {
    gate.leave();
    await new Promise((resolve) => setImmediate(resolve));
  }
  await Promise.all(waiters);
  t.same(order, ['foreground', 'background 1', 'background 2', 'deferred 1', 'deferred 2'], 'by level, each level in arrival order');
  gate.leave();
  await gate.enter();
  t.pass('free again once every holder left');
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
