import t from 'tap';
import { Doorbell, mapWithConcurrency, Semaphore } from '../../src/util/concurrency.js';

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

t.test('Semaphore: at most `limit` at once, the freed place to the first waiter, freed on failure too', async (t) => {
  const places = new Semaphore(2);
  let inFlight = 0;
  let most = 0;
  const started: number[] = [];
  const releases: Array<() => void> = [];
  const work = (index: number, fail = false) =>
    places.run(async () => {
      started.push(index);
      inFlight += 1;
      most = Math.max(most, inFlight);
      await new Promise<void>((resolve) => releases.push(resolve));
      inFlight -= 1;
      if (fail) throw new Error(`work ${index} failed`);
      return index;
    });
  const runs = [work(0, true), work(1), work(2), work(3)];
  await new Promise((resolve) => setImmediate(resolve));
  t.same(started, [0, 1], 'two start, two wait');
  releases.shift()?.();
  await t.rejects(runs[0], /work 0 failed/);
  await new Promise((resolve) => setImmediate(resolve));
  t.same(started, [0, 1, 2], "the failed work's place goes to the first waiter");
  while (started.length < 4 || releases.length > 0) {
    releases.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  }
  t.same(await Promise.all(runs.slice(1)), [1, 2, 3]);
  t.equal(most, 2);
  t.throws(() => new Semaphore(0), RangeError, 'a limit below 1 is refused');
});

t.test('Doorbell: a wait ends on a poke; a poke with nobody waiting ends the next wait at once; a timed wait ends by itself', async (t) => {
  const bell = new Doorbell();
  let rung = false;
  const waiting = bell.wait().then(() => (rung = true));
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(rung, false, 'waits until poked');
  bell.poke();
  await waiting;
  t.equal(rung, true);
  bell.poke();
  await bell.wait();
  t.pass('the earlier poke was kept for this wait');
  await bell.wait(5);
  t.pass('a timed wait ends without a poke');
});
