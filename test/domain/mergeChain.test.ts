import t from 'tap';
import { followMergeChain, followMergeChains, MAX_MERGE_CHAIN } from '../../src/domain/mergeChain.js';

/** survivor of each merged node; nodes not listed were never merged. */
const chainOf = (survivors: Record<string, string>) => async (node: string) => survivors[node] ?? null;

t.test('follows merges to the node that was not merged', async (t) => {
  t.same(await followMergeChain('a', chainOf({ a: 'b', b: 'c' })), { node: 'c', ended: true });
  t.same(await followMergeChain('c', chainOf({ a: 'b', b: 'c' })), { node: 'c', ended: true }, 'an unmerged node is its own end');
});

t.test('a cycle is cut after maxSteps and says so', async (t) => {
  let calls = 0;
  const cycle = async (node: string) => {
    calls += 1;
    return node === 'a' ? 'b' : 'a';
  };
  t.same(await followMergeChain('a', cycle, 3), { node: 'b', ended: false });
  t.equal(calls, 3);
  calls = 0;
  t.equal((await followMergeChain('a', cycle)).ended, false);
  t.equal(calls, MAX_MERGE_CHAIN, 'the default bound');
});

t.test('a failing lookup fails the walk', async (t) => {
  await t.rejects(
    followMergeChain('a', async () => {
      throw new Error('store down');
    }),
    /store down/,
  );
});

t.test('several chains are walked together, one lookup per step for those still walking', async (t) => {
  const survivors: Record<string, string> = { a: 'b', b: 'c', x: 'y' };
  const asked: string[][] = [];
  const chains = await followMergeChains(['a', 'x', 'c'], async (nodes) => {
    asked.push([...nodes]);
    return nodes.map((node) => survivors[node] ?? null);
  });
  t.same(chains, [
    { node: 'c', ended: true },
    { node: 'y', ended: true },
    { node: 'c', ended: true },
  ]);
  t.same(asked, [['a', 'x', 'c'], ['b', 'y'], ['c']], 'an ended chain is not asked about again');
  t.same(
    await followMergeChains([], async () => {
      throw new Error('no lookup for no chains');
    }),
    [],
  );
});

t.test('a batch cuts only the chains longer than maxSteps', async (t) => {
  const survivors: Record<string, string> = { a: 'b', b: 'a', p: 'q' };
  const chains = await followMergeChains(['a', 'p'], async (nodes) => nodes.map((node) => survivors[node] ?? null), 3);
  t.same(chains, [
    { node: 'b', ended: false },
    { node: 'q', ended: true },
  ]);
});
