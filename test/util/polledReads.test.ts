import t from 'tap';
import { PolledReads } from '../../src/util/polledReads.js';

/** A read of squares that records the keys of each call; `fail` makes the next call reject. */
function squares() {
  const calls: string[][] = [];
  let fail: Error | null = null;
  const read = async (keys: readonly string[]) => {
    calls.push([...keys]);
    if (fail) {
      const error = fail;
      fail = null;
      throw error;
    }
    return new Map(keys.filter((key) => key !== 'missing').map((key) => [key, Number(key) ** 2]));
  };
  return { calls, read, failNext: (error: Error) => void (fail = error) };
}

t.test('waiters asking before a tick share its one read, of every key any of them asked for', async (t) => {
  const { calls, read } = squares();
  const reads = new PolledReads(read, 5);
  const [first, second] = await Promise.all([reads.atNextTick(['2', '3']), reads.atNextTick(['3', '4', 'missing'])]);
  t.same(calls, [['2', '3', '4', 'missing']]);
  t.equal(first, second, 'the same answer');
  t.same([...first], [['2', 4], ['3', 9], ['4', 16]], 'a key the read did not find is absent');
});

t.test('a key asked for while a tick reads goes to the next tick', async (t) => {
  const { calls, read } = squares();
  let later: Promise<Map<string, number>> | null = null;
  const reads = new PolledReads(async (keys) => {
    // Asked from inside the read: the tick has begun, its keys are taken.
    later ??= reads.atNextTick(['7']);
    return read(keys);
  }, 5);
  t.same([...(await reads.atNextTick(['1']))], [['1', 1]]);
  t.same([...(await later!)], [['7', 49]]);
  t.same(calls, [['1'], ['7']]);
});

t.test("a failed read fails its tick's waiters; the next tick reads again", async (t) => {
  const { calls, read, failNext } = squares();
  const reads = new PolledReads(read, 5);
  failNext(new Error('connection reset'));
  const failed = await Promise.allSettled([reads.atNextTick(['1']), reads.atNextTick(['2'])]);
  t.match(failed, [{ status: 'rejected', reason: { message: 'connection reset' } }, { status: 'rejected', reason: { message: 'connection reset' } }]);
  t.same([...(await reads.atNextTick(['3']))], [['3', 9]]);
  t.same(calls, [['1', '2'], ['3']]);
});

t.test('no keys: answered at once, with nothing read', async (t) => {
  const { calls, read } = squares();
  t.same([...(await new PolledReads(read, 60_000).atNextTick([]))], []);
  t.same(calls, []);
});
