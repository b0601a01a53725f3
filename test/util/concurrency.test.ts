import t from 'tap';
import { mapWithConcurrency } from '../../src/util/concurrency.js';

/** A promise with its resolver, so a test decides when each piece of work finishes. */
function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

t.test('results come back in input order, whatever order the work finishes in', async (t) => {
  const gates = [deferred(), deferred(), deferred()];
  const running = mapWithConcurrency([10, 20, 30], 3, async (item, index) => {
    await gates[index].promise;
    return item + index;
  });
  gates[2].resolve();
  gates[0].resolve();
  gates[1].resolve();
  t.same(await running, [10, 21, 32]);
});

t.test('never more than `limit` pieces of work in flight', async (t) => {
  let inFlight = 0;
  let most = 0;
  const items = Array.from({ length: 12 }, (_, index) => index);
  await mapWithConcurrency(items, 3, async () => {
    inFlight += 1;
    most = Math.max(most, inFlight);
    await new Promise((resolve) => setImmediate(resolve));
    inFlight -= 1;
  });
  t.equal(most, 3);
});

t.test('a limit below 1 still runs the work, one at a time', async (t) => {
  let inFlight = 0;
  let most = 0;
  const results = await mapWithConcurrency(['a', 'b'], 0, async (item) => {
    inFlight += 1;
    most = Math.max(most, inFlight);
    await new Promise((resolve) => setImmediate(resolve));
    inFlight -= 1;
    return item.toUpperCase();
  });
  t.same(results, ['A', 'B']);
  t.equal(most, 1);
});

t.test('no items: no work, an empty result', async (t) => {
  let calls = 0;
  t.same(await mapWithConcurrency([], 4, async () => void (calls += 1)), []);
  t.equal(calls, 0);
});

t.test('the first failure stops new work and is rethrown after the running work settles', async (t) => {
  const started: number[] = [];
  let settled = 0;
  const failing = mapWithConcurrency([0, 1, 2, 3, 4, 5], 2, async (item) => {
    started.push(item);
    await new Promise((resolve) => setImmediate(resolve));
    settled += 1;
    if (item === 1) throw new Error(`item ${item} failed`);
    if (item === 3) throw new Error('a later failure is not the one reported');
    return item;
  });
  await t.rejects(failing, { message: 'item 1 failed' });
  t.same(started, [0, 1, 2], 'nothing started after the failure was seen');
  t.equal(settled, started.length, 'work in flight finished before the rejection');
});
