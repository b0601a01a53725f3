import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { cosineSimilarity } from '../../../src/interchange/vectors.js';
import {
  cacheFileIn,
  createLocalEmbedder,
  LOCAL_EMBEDDER_DIMENSIONS,
  LOCAL_EMBEDDER_MODEL_ID,
  localEmbedderLoadStats,
  parseDecimal,
  tokenize,
} from '../../../src/providers/embeddings/local.js';

const run = promisify(execFile);
const DEDUP_THRESHOLD = 0.94;
/** Different facts must stay clearly below the threshold, not just under it. */
const MARGIN = 0.02;

const embedder = createLocalEmbedder();

async function similarity(a: string, b: string): Promise<number> {
  const [va, vb] = await embedder.embed([a, b]);
  return cosineSimilarity(va as number[], vb as number[]);
}

t.test('identifies itself and embeds into 100 unit-length dimensions', async (t) => {
  t.equal(embedder.modelId, LOCAL_EMBEDDER_MODEL_ID);
  t.equal(embedder.modelId, 'local/wink-sg-100d-v1');
  t.equal(embedder.dimensions, 100);
  t.equal(LOCAL_EMBEDDER_DIMENSIONS, 100);
  const [vector] = await embedder.embed(['Marie Curie discovered polonium.']);
  t.equal(vector?.length, 100);
  const norm = Math.sqrt((vector ?? []).reduce((sum, value) => sum + value * value, 0));
  t.ok(Math.abs(norm - 1) < 1e-9, `unit length (${norm})`);
  t.ok(vector?.every((value) => Number.isFinite(value)));
  const stats = localEmbedderLoadStats();
  t.ok(stats !== null && stats.words === 150_000, 'the 150k most frequent words are loaded');
  t.comment(`load: ${stats?.milliseconds.toFixed(0)} ms (converted: ${stats?.converted}), cache ${stats?.cachePath}`);
});

t.test('one fact reordered or lightly reworded stays at or above the deduplication threshold', async (t) => {
  const pairs: Array<[string, string]> = [
    ['In 1903, Marie Curie won the Nobel Prize in Physics.', 'Marie Curie won the Nobel Prize in Physics in 1903.'],
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'Marie Curie was awarded the Nobel Prize in Physics in 1903.'],
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'Marie Curie received the Nobel Prize in Physics in 1903.'],
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'In 1903 Marie Curie received the Nobel Prize for Physics.'],
    ['Polonium was discovered by the Curies in 1898.', 'The Curies discovered polonium in 1898.'],
    ['Water boils at 100 degrees Celsius at sea level.', 'At sea level, water boils at 100 degrees Celsius.'],
    ['The Eiffel Tower is located in Paris.', 'The Eiffel Tower is in Paris.'],
    ['Paris is the capital of France.', 'The capital of France is Paris.'],
    ['The company was founded in 1998 by Larry Page and Sergey Brin.', 'Larry Page and Sergey Brin founded the company in 1998.'],
  ];
  for (const [a, b] of pairs) {
    const value = await similarity(a, b);
    t.comment(`${value.toFixed(3)}  ${a} | ${b}`);
    t.ok(value >= DEDUP_THRESHOLD, `${value.toFixed(3)} >= ${DEDUP_THRESHOLD}: "${a}" ~ "${b}"`);
  }
  t.equal(await similarity('In 1903, Marie Curie won the Nobel Prize in Physics.', 'Marie Curie won the Nobel Prize in Physics in 1903.'), 1,
    'a pure reordering is the same bag of words');
});

t.test('different facts sharing most words stay below the threshold with a margin', async (t) => {
  const pairs: Array<[string, string]> = [
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'Marie Curie won the Nobel Prize in Chemistry in 1911.'],
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'Marie Curie won the Nobel Prize in Physics in 1911.'],
    ['Marie Curie won the Nobel Prize in Physics in 1903.', 'Pierre Curie won the Nobel Prize in Physics in 1903.'],
    ['Pierre Curie was born in Paris.', 'Marie Curie was born in Warsaw.'],
    ['Marie Curie was born in Warsaw.', 'Marie Curie died in Passy.'],
    ['Radium was discovered in 1898.', 'Polonium was discovered in 1898.'],
    ['Water boils at 100 degrees Celsius at sea level.', 'Water freezes at 0 degrees Celsius at sea level.'],
    ['The population of Paris was 2.1 million in 2020.', 'The population of Paris was 2.2 million in 2020.'],
    ['Marie Curie was a Polish physicist.', 'Marie Curie was a Polish chemist.'],
    ['Paris is the capital of France.', 'Berlin is the capital of Germany.'],
  ];
  for (const [a, b] of pairs) {
    const value = await similarity(a, b);
    t.comment(`${value.toFixed(3)}  ${a} | ${b}`);
    t.ok(value < DEDUP_THRESHOLD - MARGIN, `${value.toFixed(3)} < ${DEDUP_THRESHOLD - MARGIN}: "${a}" vs "${b}"`);
  }
});

t.test('unrelated facts are far apart', async (t) => {
  const value = await similarity('Marie Curie won the Nobel Prize in Physics in 1903.', 'The stock market fell sharply on Monday.');
  t.comment(`${value.toFixed(3)} unrelated`);
  t.ok(value < 0.5, `${value.toFixed(3)} < 0.5`);
});

t.test('semantic retrieval finds a fact that shares no word with the query', async (t) => {
  const facts = [
    'Marie Curie won the Nobel Prize in Physics in 1903.',
    'The Eiffel Tower is located in Paris.',
    'A pediatrician is a physician who specializes in the care of infants.',
    'The stock market fell sharply on Monday.',
    'Polonium was discovered by the Curies in 1898.',
    'The river flooded the valley after heavy rain.',
  ];
  const cases: Array<[string, string]> = [
    ['doctor who treats children', 'A pediatrician is a physician who specializes in the care of infants.'],
    ['radioactive chemical element', 'Polonium was discovered by the Curies in 1898.'],
    ['shares dropped on Wall Street', 'The stock market fell sharply on Monday.'],
    ['famous landmark in France', 'The Eiffel Tower is located in Paris.'],
  ];
  const factVectors = await embedder.embed(facts);
  for (const [query, expected] of cases) {
    const [queryVector] = await embedder.embed([query]);
    const ranked = facts
      .map((fact, i) => ({ fact, score: cosineSimilarity(queryVector as number[], factVectors[i] as number[]) }))
      .sort((a, b) => b.score - a.score);
    t.comment(`"${query}": ${ranked.map((r) => `${r.score.toFixed(3)} ${r.fact.slice(0, 30)}`).join(' | ')}`);
    t.equal(ranked[0]?.fact, expected, `"${query}" ranks "${expected}" first`);
  }
});

t.test('deterministic, batch order kept, independent of the batch', async (t) => {
  const texts = ['Radium glows in the dark.', 'The Curies discovered polonium in 1898.', 'Paris is the capital of France.'];
  const first = await embedder.embed(texts);
  const again = await createLocalEmbedder().embed([...texts].reverse());
  t.same(again, [...first].reverse(), 'same vectors whatever the batch order');
  const alone = await embedder.embed([texts[1] as string]);
  t.same(alone[0], first[1], 'a text alone embeds as in a batch');
  t.same(await embedder.embed([]), []);
});

t.test('text with nothing to embed gets one fixed non-zero vector', async (t) => {
  const [empty, blank, punctuation] = await embedder.embed(['', '   \n', '?!…']);
  t.ok(empty?.some((value) => value !== 0), 'not all zeros');
  t.same(blank, empty);
  t.same(punctuation, empty);
  const [stopWordsOnly] = await embedder.embed(['it was the']);
  t.ok(stopWordsOnly?.some((value) => value !== 0), 'stop words alone still embed');
  const [unknown] = await embedder.embed(['Xqzvbrt Plomfk 4711']);
  t.ok(cosineSimilarity(unknown as number[], empty as number[]) < 0.9, 'unknown words embed by their hashes');
});

t.test('rejects bad input and honours an aborted signal', async (t) => {
  await t.rejects(embedder.embed('text' as unknown as string[]), TypeError);
  await t.rejects(embedder.embed(['ok', 42 as unknown as string]), TypeError);
  const controller = new AbortController();
  controller.abort(new Error('stopped'));
  await t.rejects(embedder.embed(['text'], controller.signal), { message: 'stopped' });
});

t.test('the tokenizer marks names whatever their place in the sentence', async (t) => {
  const names = (text: string): string[] => tokenize(text).filter((token) => token.proper).map((token) => token.word).sort();
  t.same(names('In 1903, Marie Curie won the Nobel Prize.'), ['curie', 'marie', 'nobel', 'prize']);
  t.same(names('Marie Curie won the Nobel Prize in 1903.'), ['curie', 'marie', 'nobel', 'prize']);
  t.same(names('Polonium was discovered by the Curies.'), ['curies'], 'a lone capital at the sentence start is no name');
  t.same(tokenize("Curie's lab").map((token) => token.word), ['curie', 'lab'], 'possessive dropped');
});

t.test('the conversion reads each JSON number exactly as Number does', async (t) => {
  const texts = ['0', '-0', '7', '-0.038194', '0.72812', '-3.0243', '2.2167', '1e-05', '-2.5E+3', '1.5e300', '4.9e-324', '123456789012345678',
    '0.1234567890123456789', '9007199254740993', '1e22', '1e23', '0.000001', '-1.7976931348623157e308', '00012', '.5', '5.', '-', '', 'x', '1e', '1e+', '12ab'];
  // And what the package holds: up to eight significant digits, a sign, sometimes an exponent, plus random doubles as JavaScript prints them.
  let seed = 7;
  const random = (): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  for (let i = 0; i < 20_000; i++) {
    texts.push((random() * 8 - 4).toFixed(1 + (i % 8)));
    texts.push(String((random() - 0.5) * 10 ** Math.floor(random() * 40 - 20)));
  }
  const mismatches = texts.filter((text) => !Object.is(parseDecimal(Buffer.from(`[${text},`), 1, text.length + 1), Number(text)));
  t.same(mismatches, [], 'every text read as Number reads it, sign of zero included');
});

t.test('the binary cache: built once, rebuilt when damaged, safe when processes race', async (t) => {
  const cacheDir = mkdtempSync(join(tmpdir(), 'factlog-emb-'));
  t.teardown(() => rmSync(cacheDir, { recursive: true, force: true }));
  writeFileSync(join(cacheDir, 'unrelated.txt'), 'x');
  // Two processes convert into one fresh directory at the same time.
  const script = [
    `import { createLocalEmbedder, localEmbedderLoadStats } from ${JSON.stringify(new URL('../../../src/providers/embeddings/local.ts', import.meta.url).pathname)};`,
    `const [v] = await createLocalEmbedder({ cacheDir: ${JSON.stringify(cacheDir)} }).embed(['The Curies discovered polonium in 1898.']);`,
    `console.log(JSON.stringify({ stats: localEmbedderLoadStats(), rss: process.memoryUsage().rss, v }));`,
  ].join('\n');
  const child = (): Promise<{ stats: { converted: boolean; milliseconds: number }; rss: number; v: number[] }> =>
    // The tests' own loader (test/loader.mjs), not tsx: about 0.3 CPU-s less per child and grandchild.
    // Without the test processes' malloc settings (the Makefile's TEST_MALLOC): the sizes compared are a service's.
    run(process.execPath, [`--import=${new URL('../../loader.mjs', import.meta.url).href}`, '--input-type=module', '-e', script], {
      cwd: process.cwd(),
      maxBuffer: 1 << 24,
      env: { ...process.env, GLIBC_TUNABLES: undefined },
    }).then(
      ({ stdout }) => JSON.parse(stdout.trim().split('\n').at(-1) as string),
    );
  const [one, two] = await Promise.all([child(), child()]);
  const [expected] = await embedder.embed(['The Curies discovered polonium in 1898.']);
  t.same(one.v, expected, 'a converted cache embeds like the default one');
  t.same(two.v, expected);
  t.same(readdirSync(cacheDir).sort(), [cacheFileIn(cacheDir).split('/').at(-1), 'unrelated.txt'].sort(), 'one cache file, no temporary leftovers');
  t.comment(`conversion: ${one.stats.milliseconds.toFixed(0)} ms, ${two.stats.milliseconds.toFixed(0)} ms`);

  // A later process reads the binary cache only.
  const later = await child();
  t.equal(later.stats.converted, false);
  t.same(later.v, expected);
  t.comment(`load from cache: ${later.stats.milliseconds.toFixed(0)} ms, process RSS after first embed ${(later.rss / 2 ** 20).toFixed(0)} MiB`);
  // The conversion runs in a child process of its own: what it held does not stay in the process that asked for it.
  t.comment(`process RSS after first embed: ${(one.rss / 2 ** 20).toFixed(0)} / ${(two.rss / 2 ** 20).toFixed(0)} MiB converting, ${(later.rss / 2 ** 20).toFixed(0)} MiB reading the cache`);
  t.ok(Math.max(one.rss, two.rss) < later.rss + 40 * 2 ** 20, 'a converting process ends about as large as one that read the cache');

  // A damaged cache (a crash cannot leave one, but a disk can) is rebuilt.
  writeFileSync(cacheFileIn(cacheDir), Buffer.from('garbage'));
  const repaired = await child();
  t.equal(repaired.stats.converted, true);
  t.same(repaired.v, expected);
});

t.test('a cache that cannot be written fails the embed with the reason, and the embedder recovers nothing half-made', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'factlog-emb-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // The cache directory's place is taken by a file: the conversion child cannot make it.
  const blocked = join(dir, 'not-a-directory');
  writeFileSync(blocked, 'x');
  await t.rejects(createLocalEmbedder({ cacheDir: blocked }).embed(['Polonium was discovered in 1898.']), {
    message: /^converting the word vectors into .*not-a-directory.* failed \(exit code 1\): .*(EEXIST|ENOTDIR)/,
  });
  t.same(readdirSync(dir), ['not-a-directory'], 'nothing written beside it');
});
