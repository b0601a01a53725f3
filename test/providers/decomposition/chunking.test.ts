import t from 'tap';
import {
  chunkText,
  DEFAULT_CHUNKING,
  validateChunkingSettings,
  type ChunkingSettings,
  type TextChunk,
} from '../../../src/providers/decomposition/chunking.js';
import { longArticle } from '../../helpers/longArticle.js';

/** Deterministic pseudo-random prose: words, sentences and paragraphs of varying length. */
function prose(seed: number, paragraphs: number): string {
  let state = seed;
  const next = (n: number): number => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return state % n;
  };
  const words = ['radium', 'element', 'the', 'discovered', 'Paris', 'was', 'in', 'a', 'laboratory', 'Curie', 'of', 'isotope'];
  const out: string[] = [];
  for (let p = 0; p < paragraphs; p++) {
    const sentences: string[] = [];
    for (let s = 0, count = 1 + next(8); s < count; s++) {
      const sentence = Array.from({ length: 3 + next(25) }, () => words[next(words.length)]).join(' ');
      sentences.push(sentence.charAt(0).toUpperCase() + sentence.slice(1) + '.');
    }
    out.push(sentences.join(' '));
  }
  return out.join('\n\n');
}

/** Every broken invariant, described; an empty list means the chunks are right. */
function invariantViolations(text: string, chunks: TextChunk[], settings: ChunkingSettings): string[] {
  const problems: string[] = [];
  if (chunks.length === 0) problems.push('no chunks');
  if (chunks[0]?.start !== 0) problems.push('first chunk does not start at 0');
  if (chunks.at(-1)?.end !== text.length) problems.push('last chunk does not end at the end');
  chunks.forEach((chunk, i) => {
    if (chunk.index !== i) problems.push(`chunk ${i} has index ${chunk.index}`);
    if (chunk.text !== text.slice(chunk.start, chunk.end)) problems.push(`chunk ${i} text is not the slice`);
    if (chunk.end - chunk.start > settings.chunkSize) problems.push(`chunk ${i} is longer than chunkSize`);
    if (chunk.text.trim() === '') problems.push(`chunk ${i} is blank`);
    const previous = chunks[i - 1];
    if (previous !== undefined && chunk.start !== previous.end - settings.chunkOverlap) {
      problems.push(`chunk ${i} starts at ${chunk.start}, not ${previous.end - settings.chunkOverlap}`);
    }
  });
  return problems;
}

t.test('defaults are the spec constants', async (t) => {
  t.same(DEFAULT_CHUNKING, { chunkSize: 2000, chunkOverlap: 200 });
  const text = prose(1, 40);
  t.same(chunkText(text), chunkText(text, { chunkSize: 2000, chunkOverlap: 200 }));
});

t.test('bounds and overlap hold for many texts and settings', async (t) => {
  const settingsList: ChunkingSettings[] = [
    { chunkSize: 2000, chunkOverlap: 200 },
    { chunkSize: 500, chunkOverlap: 100 },
    { chunkSize: 120, chunkOverlap: 0 },
    { chunkSize: 50, chunkOverlap: 49 },
    { chunkSize: 7, chunkOverlap: 3 },
  ];
  for (const seed of [1, 2, 3]) {
    const text = prose(seed, 30);
    for (const settings of settingsList) {
      t.same(invariantViolations(text, chunkText(text, settings), settings), [], `seed ${seed} ${JSON.stringify(settings)}`);
    }
  }
  const article = longArticle();
  const chunks = chunkText(article);
  t.same(invariantViolations(article, chunks, DEFAULT_CHUNKING), [], 'the long article');
  t.ok(chunks.length >= 5, 'a 10k article makes several chunks');
});

t.test('a text that fits is one chunk, verbatim', async (t) => {
  const text = '  Marie Curie was a physicist.\n';
  t.same(chunkText(text), [{ index: 0, start: 0, end: text.length, text }]);
  const exact = 'x'.repeat(2000);
  t.equal(chunkText(exact).length, 1, 'exactly chunkSize characters is one chunk');
});

t.test('empty and blank texts give no chunks', async (t) => {
  t.same(chunkText(''), []);
  t.same(chunkText(' \n\t\n  '), []);
});

t.test('never a whitespace-only chunk', async (t) => {
  const text = `${'word '.repeat(30)}${' '.repeat(300)}${'\n'.repeat(200)}${'tail '.repeat(30)}`;
  const chunks = chunkText(text, { chunkSize: 100, chunkOverlap: 10 });
  t.ok(chunks.every((chunk) => chunk.text.trim() !== ''));
  t.same(
    chunks.map((chunk) => chunk.index),
    chunks.map((_, i) => i),
    'indices stay contiguous when blank windows are left out',
  );
  t.ok(chunks.some((chunk) => chunk.text.includes('tail')), 'text after the gap is chunked');
});

t.test('prefers a paragraph break over a later sentence end', async (t) => {
  const first = `${'Alpha beta gamma delta. '.repeat(3)}Paragraph one ends here.`; // 96 chars
  const text = `${first}\n\n${'Second paragraph has sentences. '.repeat(4)}`;
  const [chunk] = chunkText(text, { chunkSize: 150, chunkOverlap: 20 });
  t.equal(chunk?.end, first.length + 2, 'cut right after the blank line');
  t.ok(chunk?.text.endsWith('here.\n\n'));
});

t.test('prefers a sentence end over a later word end', async (t) => {
  const text = `${'One two three four five six seven. '.repeat(3)}${'eight nine ten '.repeat(10)}`;
  const [chunk] = chunkText(text, { chunkSize: 140, chunkOverlap: 20 });
  t.ok(chunk?.text.endsWith('seven.'), JSON.stringify(chunk?.text.slice(-20)));
});

t.test('a line break counts as a sentence end', async (t) => {
  const text = `- ${'item words here '.repeat(4)}\n- ${'more item words '.repeat(10)}`;
  const [chunk] = chunkText(text, { chunkSize: 120, chunkOverlap: 10 });
  t.ok(chunk?.text.endsWith('\n'));
});

t.test('falls back to a word end, then to a hard cut', async (t) => {
  const words = `${'lorem ipsum dolor sit amet '.repeat(20)}`;
  const [wordChunk] = chunkText(words, { chunkSize: 100, chunkOverlap: 10 });
  t.ok(wordChunk !== undefined && /\S$/.test(wordChunk.text), 'ends on a word');
  t.ok(/\s/.test(words[wordChunk?.end ?? 0] ?? ''), 'cut before whitespace');

  const solid = 'x'.repeat(250);
  const chunks = chunkText(solid, { chunkSize: 100, chunkOverlap: 10 });
  t.same(
    chunks.map((chunk) => [chunk.start, chunk.end]),
    [
      [0, 100],
      [90, 190],
      [180, 250],
    ],
  );
});

t.test('ignores boundaries in the first half of the window', async (t) => {
  const text = `Short. ${'y'.repeat(300)}`;
  const [chunk] = chunkText(text, { chunkSize: 100, chunkOverlap: 10 });
  t.equal(chunk?.end, 100, 'a tiny first chunk would waste a model call');
});

t.test('does not split surrogate pairs at cuts', async (t) => {
  const text = '😀'.repeat(200); // 400 UTF-16 units, no boundaries at all
  const loneSurrogate = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
  for (const settings of [
    { chunkSize: 101, chunkOverlap: 11 },
    { chunkSize: 100, chunkOverlap: 11 },
    { chunkSize: 3, chunkOverlap: 1 },
  ]) {
    const chunks = chunkText(text, settings);
    t.ok(chunks.every((chunk) => !loneSurrogate.test(chunk.text)), JSON.stringify(settings));
    t.equal(chunks.at(-1)?.end, text.length);
  }
  // chunkSize 2 with overlap 1 cannot keep pairs whole and still move: it must still end.
  t.ok(chunkText(text, { chunkSize: 2, chunkOverlap: 1 }).length > 0);
});

t.test('is deterministic', async (t) => {
  const text = longArticle();
  t.same(chunkText(text, { chunkSize: 700, chunkOverlap: 70 }), chunkText(text, { chunkSize: 700, chunkOverlap: 70 }));
});

t.test('rejects invalid settings', async (t) => {
  const text = 'Some text.';
  for (const bad of [
    { chunkSize: 100, chunkOverlap: 100 },
    { chunkSize: 100, chunkOverlap: 150 },
    { chunkSize: 0, chunkOverlap: 0 },
    { chunkSize: -5, chunkOverlap: 0 },
    { chunkSize: 100, chunkOverlap: -1 },
    { chunkSize: 1.5, chunkOverlap: 0 },
    { chunkSize: Number.NaN, chunkOverlap: 0 },
    { chunkSize: Number.POSITIVE_INFINITY, chunkOverlap: 0 },
    { chunkSize: 100, chunkOverlap: Number.NaN },
    { chunkSize: '100' as unknown as number, chunkOverlap: 10 },
  ]) {
    t.throws(() => chunkText(text, bad), RangeError, JSON.stringify(bad));
    t.throws(() => validateChunkingSettings(bad), RangeError);
  }
  t.throws(() => chunkText('', { chunkSize: 0, chunkOverlap: 0 }), RangeError, 'settings are checked even for empty text');
  t.throws(() => chunkText(null as unknown as string), TypeError);
});
