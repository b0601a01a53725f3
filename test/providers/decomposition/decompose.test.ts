import { createHash } from 'node:crypto';
import t from 'tap';
import { chunkText } from '../../../src/providers/decomposition/chunking.js';
import { CONTEXT_CHARS, decomposeDocument } from '../../../src/providers/decomposition/decompose.js';
import { extractDocument } from '../../../src/providers/fetch/extract.js';
import { createLocalFactExtractor } from '../../../src/providers/llm/local.js';
import type { ExtractedFact, FactExtractionInput, FactExtractor } from '../../../src/providers/llm/port.js';
import { longArticle } from '../../helpers/longArticle.js';

function sha256(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** A scripted extractor that records what it was asked. */
function scriptedExtractor(reply: (input: FactExtractionInput) => unknown[]): FactExtractor & { calls: FactExtractionInput[] } {
  const calls: FactExtractionInput[] = [];
  return {
    modelId: 'test/scripted',
    calls,
    async extractFacts(input) {
      calls.push(input);
      // Malformed entries are part of the script: adapters parse untrusted model output.
      return reply(input) as ExtractedFact[];
    },
  };
}

const local = createLocalFactExtractor();

t.test('normalizes, hashes and keeps the first of duplicate facts', async (t) => {
  const extractor = scriptedExtractor((input) => [
    { content: '  Radium   is a chemical\nelement. ', sourceText: ' Radium is a chemical element. ' },
    { content: `Chunk ${input.chunkIndex} has its own fact.`, sourceText: 'own' },
    { content: 'Radium is a chemical element.', sourceText: 'again' },
    { content: 'Cafe\u0301 Curie is in Paris.', sourceText: 'nfd' },
    { content: 'Caf\u00e9 Curie is in Paris.', sourceText: 'nfc' },
    { content: '', sourceText: 'empty' },
    { content: ' \n\t', sourceText: 'blank' },
    null,
    { content: 42, sourceText: 'not text' },
    { content: 'No source text here.' },
  ]);
  const text = 'word '.repeat(80); // 400 characters: three chunks of at most 200, overlapping by 50
  const result = await decomposeDocument({ text }, extractor, { chunkSize: 200, chunkOverlap: 50 });
  t.equal(extractor.calls.length, 3);
  t.equal(result.modelId, 'test/scripted');
  t.same(result.facts, [
    {
      content: 'Radium is a chemical element.',
      contentHash: sha256('Radium is a chemical element.'),
      sourceText: 'Radium is a chemical element.',
      chunkIndex: 0,
      sentenceIndex: -1,
    },
    { content: 'Chunk 0 has its own fact.', contentHash: sha256('Chunk 0 has its own fact.'), sourceText: 'own', chunkIndex: 0, sentenceIndex: -1 },
    { content: 'Café Curie is in Paris.', contentHash: sha256('Caf\u00e9 Curie is in Paris.'), sourceText: 'nfd', chunkIndex: 0, sentenceIndex: -1 },
    { content: 'No source text here.', contentHash: sha256('No source text here.'), sourceText: '', chunkIndex: 0, sentenceIndex: -1 },
    { content: 'Chunk 1 has its own fact.', contentHash: sha256('Chunk 1 has its own fact.'), sourceText: 'own', chunkIndex: 1, sentenceIndex: -1 },
    { content: 'Chunk 2 has its own fact.', contentHash: sha256('Chunk 2 has its own fact.'), sourceText: 'own', chunkIndex: 2, sentenceIndex: -1 },
  ]);
});

t.test('passes each chunk with its index, the title and the surrounding text', async (t) => {
  const extractor = scriptedExtractor(() => []);
  const text = longArticle();
  const settings = { chunkSize: 2000, chunkOverlap: 200 };
  await decomposeDocument({ text, title: 'Chemical elements' }, extractor, settings);
  const chunks = chunkText(text, settings);
  t.equal(extractor.calls.length, chunks.length);
  chunks.forEach((chunk, i) => {
    const call = extractor.calls[i];
    t.equal(call?.text, chunk.text);
    t.equal(call?.chunkIndex, chunk.index);
    t.equal(call?.title, 'Chemical elements');
    t.equal(call?.previousContext, i === 0 ? undefined : text.slice(Math.max(0, chunk.start - CONTEXT_CHARS), chunk.start));
    t.equal(call?.nextContext, i === chunks.length - 1 ? undefined : text.slice(chunk.end, chunk.end + CONTEXT_CHARS));
  });
  await decomposeDocument({ text: 'Short.' }, extractor);
  t.equal(extractor.calls.at(-1)?.title, null, 'a missing title is passed as null');
});

t.test('empty documents make no calls; bad input is rejected', async (t) => {
  const extractor = scriptedExtractor(() => [{ content: 'Never.', sourceText: '' }]);
  t.same(await decomposeDocument({ text: '' }, extractor), { modelId: 'test/scripted', facts: [] });
  t.same(await decomposeDocument({ text: '  \n\n ' }, extractor), { modelId: 'test/scripted', facts: [] });
  t.equal(extractor.calls.length, 0);
  await t.rejects(decomposeDocument({ text: null as unknown as string }, extractor), TypeError);
  await t.rejects(decomposeDocument(undefined as unknown as { text: string }, extractor), TypeError);
  await t.rejects(decomposeDocument({ text: 'Radium.' }, extractor, { chunkSize: 10, chunkOverlap: 10 }), RangeError);
});

t.test('stops when the signal aborts, and propagates extractor failures', async (t) => {
  const controller = new AbortController();
  const extractor = scriptedExtractor(() => {
    controller.abort(new Error('job timed out'));
    return [];
  });
  await t.rejects(
    decomposeDocument({ text: 'word '.repeat(100) }, extractor, { chunkSize: 200, chunkOverlap: 50 }, controller.signal),
    { message: 'job timed out' },
  );
  t.equal(extractor.calls.length, 1, 'no call after the abort');

  const failing: FactExtractor = {
    modelId: 'test/failing',
    async extractFacts() {
      throw new Error('model unavailable');
    },
  };
  await t.rejects(decomposeDocument({ text: 'Radium is a chemical element.' }, failing), { message: 'model unavailable' });
});

t.test('overlapping chunks yield each local fact once, as if the text were one chunk', async (t) => {
  const text = [
    'Marie Curie was a Polish-born physicist. She won two Nobel Prizes; her husband Pierre shared the first one.',
    'France is a country in Western Europe. Its capital is Paris. It has a population of 68 million people.',
    'The Eiffel Tower, built in 1889, is in Paris, but it was controversial at first.',
  ].join('\n\n');
  const settings = { chunkSize: 150, chunkOverlap: 60 };

  // The raw per-chunk output really repeats facts.
  const raw: string[] = [];
  for (const chunk of chunkText(text, settings)) {
    const previousContext = text.slice(0, chunk.start);
    const nextContext = text.slice(chunk.end);
    const facts = await local.extractFacts({ text: chunk.text, chunkIndex: chunk.index, previousContext, nextContext });
    raw.push(...facts.map((fact) => fact.content));
  }
  t.ok(raw.length > new Set(raw).size, 'overlap produces duplicates before dedup');

  const chunked = await decomposeDocument({ text }, local, settings);
  const hashes = chunked.facts.map((fact) => fact.contentHash);
  t.equal(new Set(hashes).size, hashes.length, 'no duplicate hashes');
  const whole = await decomposeDocument({ text }, local, { chunkSize: 10_000, chunkOverlap: 0 });
  t.same(
    chunked.facts.map((fact) => fact.content),
    whole.facts.map((fact) => fact.content),
  );
  t.same(
    whole.facts.map((fact) => fact.content),
    [
      'Marie Curie was a Polish-born physicist.',
      'Marie Curie won two Nobel Prizes.',
      "Marie Curie's husband Pierre shared the first one.",
      'France is a country in Western Europe.',
      "France's capital is Paris.",
      'France has a population of 68 million people.',
      'The Eiffel Tower, built in 1889, is in Paris.',
      'The Eiffel Tower was controversial at first.',
    ],
  );
});

t.test('a 10k-character article decomposes deterministically', async (t) => {
  const markdown = longArticle();
  t.ok(markdown.length >= 10_000, `${markdown.length} characters`);
  // Read as the pipeline reads a Markdown document: the extractor takes its syntax away, the model reads none.
  const { text } = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown' });
  const doc = { text, title: 'Chemical elements' };
  const first = await decomposeDocument(doc, local);
  const second = await decomposeDocument(doc, createLocalFactExtractor());
  t.same(first, second, 'same output twice');
  t.equal(first.modelId, 'local/rule-based-v1');
  t.ok(first.facts.length > 100, `${first.facts.length} facts`);
  t.ok(
    first.facts.every((fact) => fact.contentHash === sha256(fact.content)),
    'contentHash is the SHA-256 of the stored content',
  );
  t.ok(
    first.facts.every((fact, i) => i === 0 || fact.chunkIndex >= (first.facts[i - 1]?.chunkIndex ?? 0)),
    'facts come in chunk order',
  );
  t.ok(first.facts.some((fact) => fact.chunkIndex > 3), 'facts come from several chunks');
  t.notOk(first.facts.some((fact) => /click here|\?|\[\d+\]|\*\*|Wikipedia/i.test(fact.content)), 'no boilerplate, questions or markup');
  t.ok(first.facts.some((fact) => fact.content === 'Marie Curie published the discovery in a short paper.'));
  t.ok(first.facts.some((fact) => fact.content === "Ida Noddack's notebooks are kept in a museum in Berlin."));

  for (const settings of [
    { chunkSize: 700, chunkOverlap: 150 },
    { chunkSize: 10_000_000, chunkOverlap: 0 },
  ]) {
    const other = await decomposeDocument(doc, local, settings);
    t.same(
      other.facts.map((fact) => fact.content),
      first.facts.map((fact) => fact.content),
      `chunking ${JSON.stringify(settings)} changes nothing`,
    );
  }
});
