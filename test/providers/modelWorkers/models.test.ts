import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createLocalEmbedder } from '../../../src/providers/embeddings/local.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import { ModelCallError, type ConceptContextChoice } from '../../../src/providers/llm/port.js';
import { createWorkerChatModel, createWorkerEmbedder, localModelPoolStarts } from '../../../src/providers/modelWorkers/models.js';
import { effectivePromptset } from '../../../src/providers/llm/promptsets.js';

/**
 * The worker-thread adapters answer exactly as the in-thread models do (the corpus snapshot
 * depends on it, to the last bit of every vector), with the same errors.
 */

const CORPUS_DOCS = path.resolve(import.meta.dirname, '../../fixtures/corpus/docs');
const texts = readdirSync(CORPUS_DOCS)
  .filter((file) => file.endsWith('.html'))
  .sort()
  .slice(0, 8)
  .map((file) => readFileSync(path.join(CORPUS_DOCS, file), 'utf8').replace(/<[^>]+>/g, '\n').replace(/\n{3,}/g, '\n\n'));
const contexts: ConceptContextChoice[] = ['Person', 'Organization', 'Location', 'Concept'].map((name) => ({ name, description: `${name}s` }));

const local = createLocalChatModel();
const worker = createWorkerChatModel({ size: 2 });
const embedder = createWorkerEmbedder({ size: 2 });
t.teardown(async () => {
  await worker.close();
  await embedder.close();
});

t.test('the chat model: the same facts, image facts, concepts and refinement', async (t) => {
  t.equal(worker.modelId, local.modelId);
  t.equal(worker.canSeeImages, false);
  const promptset = effectivePromptset({});
  const facts: string[] = [];
  for (const [chunkIndex, text] of texts.entries()) {
    const input = { text, chunkIndex, title: 'Marie Curie - Wikipedia', previousContext: 'She was born in Warsaw. ', promptset };
    const got = await worker.extractFacts(input);
    t.same(got, await local.extractFacts(input), `chunk ${chunkIndex}: ${got.length} facts`);
    facts.push(...got.map((fact) => fact.content));
  }
  t.ok(facts.length > 20, `${facts.length} facts in all`);

  const image = { bytes: new Uint8Array([137, 80, 78, 71]), contentType: 'image/png', caption: 'Marie Curie in her laboratory, 1904', sourceTitle: 'Marie Curie', promptset };
  t.same(await worker.extractImageFacts(image), await local.extractImageFacts(image));

  const conceptInput = { facts: facts.map((content, i) => ({ id: `f${i}`, content })), contexts, promptset };
  const concepts = await worker.extractConcepts(conceptInput);
  t.same(concepts, await local.extractConcepts(conceptInput));
  t.ok(concepts.length > 5, `${concepts.length} concepts`);

  const candidates = concepts.map((concept, i) => ({ id: `c${i}`, canonicalName: concept.canonicalName, context: concept.context, aliases: concept.aliases, factCount: concept.factIds.length }));
  // A name differing only in case: a merge to decide.
  const first = candidates[0] as (typeof candidates)[number];
  const refinementInput = { concepts: [...candidates, { ...first, id: 'c-upper', canonicalName: first.canonicalName.toUpperCase(), factCount: 1 }], pruneThreshold: 3, promptset };
  const decisions = await worker.refineConcepts(refinementInput);
  t.same(decisions, await local.refineConcepts(refinementInput));
  t.ok(decisions.some((decision) => decision.type === 'merge' && decision.loserId === 'c-upper'), 'with the merge');
});

t.test('the embedder: bit-identical vectors, in order', async (t) => {
  const sentences = ['', '  ', '?!', 'X-ray crystallography', "Curie's lab", '__proto__ constructor', 'Ünïcödé naïve café', ...texts.flatMap((text) => text.split(/(?<=[.!?])\s+/))];
  const got = await embedder.embed(sentences);
  const expected = await createLocalEmbedder().embed(sentences);
  t.equal(got.length, sentences.length);
  t.ok(
    got.every((vector, i) => vector.length === 100 && vector.every((value, d) => Object.is(value, expected[i]?.[d]))),
    `the same ${sentences.length} vectors to the bit`,
  );
  // A short call (a search query) is embedded on this thread from the shared table: the same bits.
  for (const sentence of sentences.slice(0, 12)) {
    const [alone] = await embedder.embed([sentence]);
    t.ok(alone?.every((value, d) => Object.is(value, expected[sentences.indexOf(sentence)]?.[d])), `alone: ${JSON.stringify(sentence.slice(0, 30))}`);
  }
  t.same(await embedder.embed([]), []);
  t.equal(embedder.modelId, 'local/wink-sg-100d-v1');
  t.equal(embedder.dimensions, 100);
});

t.test('bad input and aborted signals fail as in-thread', async (t) => {
  // Wrong types on purpose: callers outside TypeScript's reach.
  await t.rejects(embedder.embed('text' as unknown as string[]), TypeError);
  await t.rejects(embedder.embed(['ok', 42 as unknown as string]), TypeError);
  await t.rejects(worker.extractFacts({ text: 42 as unknown as string, chunkIndex: 0 }), { name: 'TypeError', message: /input.text/ });
  await t.rejects(worker.extractImageFacts(null as unknown as never), TypeError);
  const aborted = AbortSignal.abort(new Error('stopped'));
  await t.rejects(embedder.embed(['text'], aborted), { message: 'stopped' });
  await t.rejects(worker.extractConcepts({ facts: [], contexts }, aborted), { message: 'stopped' });
});

t.test('adapters share one pool: closing one leaves the other working; the last close ends the workers', async (t) => {
  const first = createWorkerEmbedder({ size: 1 });
  const second = createWorkerEmbedder({ size: 1 });
  await first.close();
  await first.close();
  t.equal((await second.embed(['Radium glows.']))[0]?.length, 100, 'the other lease still embeds');
  await second.close();
  await t.rejects(second.embed(['Radium glows.']), ModelCallError, 'closed');
});

t.test('with keepIdleMs the pool outlives its last adapter for the next one made meanwhile, then ends', async (t) => {
  // Options of their own (a heap limit no other test uses): a pool apart from the file's others.
  const options = { size: 1, keepIdleMs: 300, resourceLimits: { maxOldGenerationSizeMb: 257 } };
  const first = createWorkerEmbedder(options);
  t.equal((await first.embed(['Radium glows.']))[0]?.length, 100);
  const startsBefore = localModelPoolStarts();
  await first.close();
  const second = createWorkerEmbedder(options);
  t.equal((await second.embed(['Polonium too.']))[0]?.length, 100, 'the kept pool answers');
  t.equal(localModelPoolStarts(), startsBefore, 'no new pool was made for it');
  await second.close();
  await t.rejects(second.embed(['x']), ModelCallError, 'a closed adapter refuses, kept pool or not');
  await new Promise((resolve) => setTimeout(resolve, 500));
  const third = createWorkerEmbedder(options);
  t.equal((await third.embed(['Radon.']))[0]?.length, 100);
  t.equal(localModelPoolStarts(), startsBefore + 1, 'after the idle time a new pool is made');
  await third.close();
});
