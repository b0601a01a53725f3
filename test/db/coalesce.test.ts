import t from 'tap';
import { coalescer, takeBounded } from '../../src/db/coalesce.js';
import { backgroundLevel, inBackground, runAtLevel } from '../../src/db/priority.js';

interface Call {
  key: string;
  resolve(value: string): void;
  reject(error: unknown): void;
}

/** A coalescer whose batches wait until the test lets them go, recording each batch's keys and level. */
function heldBatches(take?: (waiting: Call[]) => Call[]) {
  const batches: Array<{ keys: string[]; level: string }> = [];
  const releases: Array<() => void> = [];
  const queue = coalescer<Call>(async (batch) => {
    batches.push({ keys: batch.map(({ key }) => key), level: backgroundLevel() });
    await new Promise<void>((resolve) => releases.push(resolve));
    for (const call of batch) call.resolve(`done ${call.key}`);
  }, take);
  const call = (key: string) => new Promise<string>((resolve, reject) => queue({ key, resolve, reject }));
  const releaseNext = async () => {
    releases.shift()?.();
    await new Promise((resolve) => setImmediate(resolve));
  };
  return { batches, call, releaseNext };
}

t.test('a lone call goes at once; the calls that come while it is out go together next', async (t) => {
  const { batches, call, releaseNext } = heldBatches();
  const first = call('a');
  t.same(batches, [{ keys: ['a'], level: 'foreground' }], 'nothing out: the call went alone, at once');
  const later = [call('b'), call('c'), call('d')];
  t.equal(batches.length, 1, 'the later calls wait while a batch is out');
  await releaseNext();
  t.equal(await first, 'done a');
  t.same(batches[1], { keys: ['b', 'c', 'd'], level: 'foreground' }, 'then go as one batch');
  await releaseNext();
  t.same(await Promise.all(later), ['done b', 'done c', 'done d'], 'each caller gets its own result');
  t.equal(batches.length, 2);
});

t.test('each priority level has its own batches, sent at that level', async (t) => {
  const { batches, call, releaseNext } = heldBatches();
  const background = inBackground(() => call('background 1'));
  const request = call('request');
  t.same(
    batches,
    [
      { keys: ['background 1'], level: 'background' },
      { keys: ['request'], level: 'foreground' },
    ],
    "a request's call does not wait behind a background batch",
  );
  const queued = [inBackground(() => call('background 2')), inBackground(() => call('deferred'), 'deferred')];
  t.same(batches[2], { keys: ['deferred'], level: 'deferred' }, 'deferred work neither');
  await releaseNext();
  await releaseNext();
  t.same(batches[3], { keys: ['background 2'], level: 'background' }, 'the waiting background call goes, at its level, from a foreground continuation');
  await releaseNext();
  await releaseNext();
  t.same(await Promise.all([background, request, ...queued]), ['done background 1', 'done request', 'done background 2', 'done deferred']);
});

t.test('takeBounded leaves a key already in the batch for the next one', async (t) => {
  const { batches, call, releaseNext } = heldBatches(takeBounded({ keyOf: ({ key }) => key, maxWeight: 100 }));
  const calls = [call('x'), call('x'), call('y'), call('x'), call('z')];
  await releaseNext();
  t.same(batches[1].keys, ['x', 'y', 'z'], 'one of each key');
  await releaseNext();
  t.same(batches[2].keys, ['x'], 'the repeat in the batch after');
  await releaseNext();
  t.same(batches.length, 3);
  t.equal((await Promise.all(calls)).length, 5);
});

t.test('takeBounded stops a batch at its weight, in arrival order, and always takes the first call', async (t) => {
  const weights: Record<string, number> = { a: 1, b: 2, c: 1, d: 1, huge: 10, e: 1 };
  const { batches, call, releaseNext } = heldBatches(takeBounded({ weightOf: ({ key }) => weights[key], maxWeight: 3 }));
  const calls = ['first', 'a', 'b', 'c', 'd', 'huge', 'e'].map((key) => call(key === 'first' ? 'a' : key));
  for (let round = 0; round < 5; round++) await releaseNext();
  t.same(
    batches.map(({ keys }) => keys),
    [['a'], ['a', 'b'], ['c', 'd', 'huge'], ['e']],
    'weights 1 + 2 reach 3; 1 + 1 + 10 passes it with its last call; a call over the bound alone still goes',
  );
  t.equal((await Promise.all(calls)).length, 7);
});

t.test('a send that throws rejects its batch, and the lane goes on', async (t) => {
  let sent = 0;
  const queue = coalescer<{ resolve(): void; reject(error: unknown): void }>(async (batch) => {
    sent += 1;
    if (sent === 1) throw new Error('send failed');
    for (const call of batch) call.resolve();
  });
  const failing = new Promise<void>((resolve, reject) => queue({ resolve, reject }));
  const next = new Promise<void>((resolve, reject) => queue({ resolve, reject }));
  await t.rejects(failing, { message: 'send failed' }, "the batch's caller hears the error");
  await next;
  t.equal(sent, 2, 'the next batch went');
});

t.test('runAtLevel runs work at a level, foreground included', async (t) => {
  t.equal(inBackground(() => runAtLevel('foreground', backgroundLevel)), 'foreground');
  t.equal(runAtLevel('deferred', backgroundLevel), 'deferred');
  t.equal(runAtLevel('projections', backgroundLevel), 'projections');
});
