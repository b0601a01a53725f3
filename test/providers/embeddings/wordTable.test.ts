import t from 'tap';
import { buildWordTable, WordTable } from '../../../src/providers/embeddings/wordTable.js';

const DIMS = 3;

function table(words: string[]): WordTable {
  const vectors = new SharedArrayBuffer(words.length * DIMS * Float32Array.BYTES_PER_ELEMENT);
  new Float32Array(vectors).forEach((_, i, all) => (all[i] = i / 10));
  return buildWordTable(words, vectors, DIMS, (rows, count) => Float32Array.from([count, rows[0] ?? 0, 0]));
}

t.test('finds every word at its row, and nothing else', async (t) => {
  const words = ['the', 'of', 'x-ray', 'curie', 'naïve', '𝔘nicode', '', 'théâtre', 'constructor', '__proto__'];
  const built = table(words);
  t.equal(built.size, words.length);
  words.forEach((word, rank) => t.equal(built.rankOf(word), rank, JSON.stringify(word)));
  for (const unknown of ['The', 'cur', 'curies', 'x', 'naive', 'toString', ' the']) t.equal(built.rankOf(unknown), undefined, JSON.stringify(unknown));
  t.same(Array.from(built.vectors.subarray(DIMS * 3, DIMS * 4)), Array.from(Float32Array.from([0.9, 1, 1.1])), 'row 3 is the 4th vector');
  t.same(Array.from(built.common), [words.length, 0, 0], 'the common direction of the rows');
});

t.test('a word listed twice keeps its later row, as a Map filled in order would', async (t) => {
  const built = table(['a', 'b', 'a', 'c']);
  t.equal(built.rankOf('a'), 2);
  t.equal(built.rankOf('b'), 1);
  t.equal(built.rankOf('c'), 3);
});

t.test('many words: collisions are probed past, lookups agree with a Map', async (t) => {
  const words = Array.from({ length: 20_000 }, (_, i) => `w${(i * 7919) % 50_000}`);
  const built = table(words);
  const reference = new Map<string, number>();
  words.forEach((word, rank) => reference.set(word, rank));
  let agree = 0;
  for (let i = 0; i < 60_000; i++) if (built.rankOf(`w${i}`) === reference.get(`w${i}`)) agree++;
  t.equal(agree, 60_000);
});

t.test('rebuilt from its buffers (as a worker does), the same table', async (t) => {
  const built = table(['alpha', 'beta', 'gamma']);
  const again = new WordTable(structuredClone(built.buffers));
  t.equal(again.rankOf('gamma'), 2);
  t.same(Array.from(again.vectors), Array.from(built.vectors));
  // Shared memory: the copy sees the original's rows, it holds no copy of them.
  built.vectors[0] = 42;
  t.equal(again.vectors[0], 42);
  t.throws(() => new WordTable({ ...built.buffers, count: 4 }), RangeError, 'buffers that do not fit together');
});
