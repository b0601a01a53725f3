import { createHash } from 'node:crypto';
import t from 'tap';

import type { ExtractedFactRecord } from '../../../src/domain/source/decider.js';
import { createRetrieveSourceStage } from '../../../src/pipeline/stages/retrieveSource.js';
import { createSourceDecompositionStage, factIdFor } from '../../../src/pipeline/stages/sourceDecomposition.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS } from '../../../src/providers/fetch/http.js';
import { imageFetchSettings } from '../../../src/providers/fetch/images.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import type { ChatModel } from '../../../src/providers/llm/port.js';
import { BUILT_IN_PROMPTSET_HASH, effectivePromptset, type Promptset } from '../../../src/providers/llm/promptsets.js';
import { startWebServer } from '../../helpers/webServer.js';
import { longArticle } from '../../helpers/longArticle.js';
import { noisePng, openStageFixture, recordingChatModel, REPOSITORY_ID } from '../../helpers/decompositionHarness.js';
import { buildPdfWithImages, noiseImage } from '../../fixtures/fetch/pdfWithImages.js';
import { runeLength } from '../../../src/util/codePoints.js';
import { MAX_KEPT_ERROR_CHARS } from '../../../src/util/errorMessage.js';

const fixture = await openStageFixture(t);
const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

const chart = noisePng(40, 40, 41);
const photo = noisePng(48, 32, 42);
const ARTICLE = `<!doctype html><html><head><title>Sea otters</title></head><body><article>
  <h1>Sea otters</h1>
  <p>Sea otters are marine mammals of the North Pacific. They use rocks as tools to open shellfish.</p>
  <figure><img src="/img/chart.png" alt="Otter population chart"><figcaption>Otter population from 1900 to 2000</figcaption></figure>
  <p>The population recovered after the fur trade was banned in 1911.</p>
  <img src="/img/photo.png" alt="Marie Curie in her laboratory, 1904">
  <p>Sea otters hold hands while they sleep, so that they do not drift apart.</p>
  </article></body></html>`;
const server = await startWebServer({
  '/article.html': { body: ARTICLE },
  '/long.html': { body: `<!doctype html><html><head><title>Elements</title></head><body><article>${longArticle().split('\n\n').map((p) => `<p>${p}</p>`).join('')}</article></body></html>` },
  '/img/chart.png': { body: chart, contentType: 'image/png' },
  '/img/photo.png': { body: photo, contentType: 'image/png' },
});
t.teardown(server.close);

const fetchSettings = { ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 5000 };
const limits = { maxImageBytes: 5_242_880, maxImagesPerSource: 20 };
const retrieve = createRetrieveSourceStage({
  store: fixture.store,
  assets: fixture.assets,
  fetcher: createHttpFetcher(fetchSettings),
  imageFetcher: createHttpFetcher(imageFetchSettings(fetchSettings, limits)),
  doiResolver: 'https://doi.org/',
  maxAttempts: 1,
  images: limits,
});

// A repository that overrides the image prompt: its hash is not the built-in one.
const customPromptset = effectivePromptset({ image_fact_extraction: 'Describe the image as facts. Answer {"facts": []}.' });

function decomposition(chat: ChatModel, options: { promptset?: Promptset; fact?: number; image?: number; maxAttempts?: number } = {}) {
  const asked: string[] = [];
  const stage = createSourceDecompositionStage({
    store: fixture.store,
    assets: fixture.assets,
    chat,
    promptsetFor: async (repositoryId) => {
      asked.push(repositoryId);
      return options.promptset ?? customPromptset;
    },
    chunking: { chunkSize: 2000, chunkOverlap: 200 },
    concurrency: { fact: options.fact ?? 4, image: options.image ?? 4 },
    maxAttempts: options.maxAttempts ?? 1,
  });
  return { stage, asked };
}

async function fetchedSource(source: { url: string } | { upload: Buffer; contentType: string; filename?: string }): Promise<string> {
  const id = await fixture.register(source);
  const error = await fixture.run(retrieve, id);
  if (error) throw error;
  return id;
}

async function factsExtracted(sourceId: string): Promise<{ model_id: string; promptset_hash: string; facts: ExtractedFactRecord[] }> {
  const event = (await fixture.events(sourceId)).find((recorded) => recorded.type === 'FactsExtracted');
  if (!event) throw new Error(`no FactsExtracted on ${sourceId}`);
  return event.data as { model_id: string; promptset_hash: string; facts: ExtractedFactRecord[] };
}

t.test('an HTML page with images: text facts, then image facts, with the promptset hash', async (t) => {
  const source = await fetchedSource({ url: `${server.baseUrl}/article.html` });
  const images = (await fixture.state(source)).fetched?.images ?? [];
  t.equal(images.length, 2);
  const chat = recordingChatModel();
  const { stage, asked } = decomposition(chat.model);
  t.equal(await fixture.run(stage, source), null);
  t.same(asked, [REPOSITORY_ID], 'the promptset of the source repository');
  t.equal((await fixture.state(source)).status, 'processed');

  const extracted = await factsExtracted(source);
  t.equal(extracted.model_id, 'test/recording-chat');
  t.equal(extracted.promptset_hash, customPromptset.hash);
  t.not(extracted.promptset_hash, BUILT_IN_PROMPTSET_HASH);

  const textFacts = extracted.facts.filter((fact) => fact.fact_kind === 'text');
  const imageFacts = extracted.facts.filter((fact) => fact.fact_kind === 'image');
  t.ok(textFacts.length >= 3, 'text facts');
  t.same(extracted.facts.slice(0, textFacts.length), textFacts, 'text facts come first');
  t.ok(textFacts.every((fact) => fact.image_id === null && fact.chunk_index === 0));
  t.ok(textFacts.every((fact) => fact.sentence_index >= 0), 'each text fact knows its sentence');
  t.ok((textFacts.find((fact) => /hold hands/.test(fact.content))?.sentence_index ?? -1) > 0, 'a later sentence has a later index');
  t.same(
    imageFacts.map((fact) => [fact.image_id, fact.content, fact.source_text, fact.chunk_index, fact.sentence_index]),
    [
      [images[0]!.image_id, 'The source has a figure captioned "Otter population from 1900 to 2000".', 'Otter population from 1900 to 2000', -1, -1],
      [images[0]!.image_id, 'An image of the source shows Otter population chart.', 'Otter population chart', -1, -1],
      [images[1]!.image_id, 'An image of the source shows Marie Curie in her laboratory, 1904.', 'Marie Curie in her laboratory, 1904', -1, -1],
    ],
  );
  for (const fact of extracted.facts) {
    t.equal(fact.content_hash, sha256(fact.content));
    t.equal(fact.fact_id, factIdFor(REPOSITORY_ID, fact.content_hash));
  }

  t.equal(chat.imageCalls.length, 2);
  // Images are read in parallel (providers.decomposition.concurrency.image): calls arrive in any
  // order, while the recorded facts above keep the images' order.
  const [chartCall, photoCall] = ['Otter population chart', 'Marie Curie in her laboratory, 1904'].map((alt) =>
    chat.imageCalls.find((call) => call.altText === alt),
  );
  t.match(chartCall, {
    contentType: 'image/png',
    altText: 'Otter population chart',
    caption: 'Otter population from 1900 to 2000',
    sourceTitle: 'Sea otters',
    surroundingText: /use rocks as tools to open shellfish\..*The population recovered after the fur trade/,
    promptset: { hash: customPromptset.hash },
  });
  t.same(Buffer.from(chartCall!.bytes), chart, 'the stored bytes are what the model sees');
  t.same(Buffer.from(photoCall!.bytes), photo);

  await fixture.project();
  const row = await fixture.db.knex('sources').where({ id: source }).first();
  t.equal(row.fact_count, extracted.facts.length);
});

t.test('with the built-in local chat model: image facts from the words next to the image', async (t) => {
  const source = await fetchedSource({ url: `${server.baseUrl}/article.html` });
  const images = (await fixture.state(source)).fetched?.images ?? [];
  const { stage } = decomposition(createLocalChatModel(), { promptset: effectivePromptset({}) });
  t.equal(await fixture.run(stage, source), null);
  const extracted = await factsExtracted(source);
  t.equal(extracted.promptset_hash, BUILT_IN_PROMPTSET_HASH);
  const imageFacts = extracted.facts.filter((fact) => fact.fact_kind === 'image');
  t.ok(imageFacts.length >= 1, 'at least one image fact');
  t.ok(imageFacts.every((fact) => images.some((image) => image.image_id === fact.image_id)), 'each names a stored image');
  t.ok(extracted.facts.some((fact) => fact.fact_kind === 'text' && /rocks as tools/.test(fact.content)));
});

t.test('a PDF with an embedded image: the image reaches the model as PNG', async (t) => {
  const pdf = buildPdfWithImages([{ lines: ['Sea otters float on their backs.', 'They eat shellfish and sea urchins.'], images: [noiseImage(64, 48, 51)] }], 'Otters');
  const source = await fetchedSource({ upload: pdf, contentType: 'application/pdf', filename: 'otters.pdf' });
  const [image] = (await fixture.state(source)).fetched?.images ?? [];
  t.ok(image);

  const seeing = recordingChatModel({ canSeeImages: true });
  t.equal(await fixture.run(decomposition(seeing.model).stage, source), null);
  t.equal(seeing.imageCalls.length, 1);
  t.match(seeing.imageCalls[0], { contentType: 'image/png', altText: null, caption: null, surroundingText: null, sourceTitle: 'Otters' });
  const facts = (await factsExtracted(source)).facts.filter((fact) => fact.fact_kind === 'image');
  t.same(facts.map((fact) => fact.image_id), [image!.image_id]);
  t.match(facts[0]!.content, /^The source has an image of \d+ bytes\.$/);

  // A model that cannot see pixels is not asked about an image without any words.
  const blindSource = await fetchedSource({ upload: pdf, contentType: 'application/pdf', filename: 'otters.pdf' });
  const blind = recordingChatModel({ canSeeImages: false });
  t.equal(await fixture.run(decomposition(blind.model).stage, blindSource), null);
  t.equal(blind.imageCalls.length, 0);
  t.same((await factsExtracted(blindSource)).facts.filter((fact) => fact.fact_kind === 'image'), []);
});

t.test('chunks and images run in parallel within the limits; facts stay in text order', async (t) => {
  const sequentialSource = await fetchedSource({ url: `${server.baseUrl}/long.html` });
  const sequential = recordingChatModel({ delayMs: 5 });
  t.equal(await fixture.run(decomposition(sequential.model, { fact: 1, image: 1 }).stage, sequentialSource), null);
  t.equal(sequential.peaks.text, 1);

  const parallelSource = await fetchedSource({ url: `${server.baseUrl}/long.html` });
  const parallel = recordingChatModel({ delayMs: 5 });
  t.equal(await fixture.run(decomposition(parallel.model, { fact: 3, image: 1 }).stage, parallelSource), null);
  t.equal(parallel.peaks.text, 3, 'three chunks at once');
  t.ok(parallel.chunkCalls.length >= 5, `the long text has many chunks (${parallel.chunkCalls.length})`);
  const contents = async (id: string) => (await factsExtracted(id)).facts.map((fact) => [fact.content, fact.chunk_index, fact.sentence_index]);
  t.same(await contents(parallelSource), await contents(sequentialSource), 'the same facts in the same order');

  const manyImages = await startWebServer({
    '/gallery.html': {
      body: `<!doctype html><html><head><title>Gallery</title></head><body><article><h1>Gallery</h1>
        <p>Six pictures of sea otters taken on the coast of California in the summer of 2020.</p>
        ${[1, 2, 3, 4, 5, 6].map((n) => `<figure><img src="/g/${n}.png" alt="Otter number ${n}"><figcaption>Otter ${n}</figcaption></figure>`).join('\n')}
        <p>All of the pictures were taken with the same camera from a small boat.</p></article></body></html>`,
    },
    ...Object.fromEntries([1, 2, 3, 4, 5, 6].map((n) => [`/g/${n}.png`, { body: noisePng(30, 30, 60 + n), contentType: 'image/png' }])),
  });
  t.teardown(manyImages.close);
  const gallery = await fetchedSource({ url: `${manyImages.baseUrl}/gallery.html` });
  const imageModel = recordingChatModel({ delayMs: 10 });
  t.equal(await fixture.run(decomposition(imageModel.model, { fact: 1, image: 2 }).stage, gallery), null);
  t.equal(imageModel.imageCalls.length, 6);
  t.equal(imageModel.peaks.image, 2, 'two images at once');
  const images = (await fixture.state(gallery)).fetched?.images ?? [];
  t.same(
    (await factsExtracted(gallery)).facts.filter((fact) => fact.fact_kind === 'image' && fact.content.startsWith('The source has a figure')).map((fact) => fact.image_id),
    images.map((image) => image.image_id),
    'image facts in image order',
  );
});

t.test('a failing image call: retried while attempts remain, then recorded on the source', async (t) => {
  const source = await fetchedSource({ url: `${server.baseUrl}/article.html` });
  const base = recordingChatModel();
  const failing: ChatModel = {
    ...base.model,
    async extractImageFacts() {
      throw new Error('vision endpoint unavailable');
    },
  };
  const { stage } = decomposition(failing, { maxAttempts: 2 });
  t.match(await fixture.run(stage, source, 1), { message: 'vision endpoint unavailable' });
  t.equal((await fixture.state(source)).status, 'decomposing', 'not recorded while attempts remain');
  t.match(await fixture.run(stage, source, 2), { name: 'PermanentJobError', message: 'vision endpoint unavailable' });
  const state = await fixture.state(source);
  t.equal(state.status, 'failed');
  t.equal(state.failure, 'source_decomposition: vision endpoint unavailable');
  t.notOk((await fixture.events(source)).some((event) => event.type === 'FactsExtracted'));
});

t.test("a long failure keeps its start and the reason at its end in the source's failure", async (t) => {
  const source = await fetchedSource({ url: `${server.baseUrl}/article.html` });
  const base = recordingChatModel();
  const reason = 'the model server said: 😀 context length exceeded';
  const failing: ChatModel = {
    ...base.model,
    async extractImageFacts() {
      throw new Error(`POST /v1/chat/completions ${'{"role":"user"} '.repeat(500)}failed: ${reason}`);
    },
  };
  const { stage } = decomposition(failing, { maxAttempts: 1 });
  t.match(await fixture.run(stage, source, 1), { name: 'PermanentJobError' });
  const state = await fixture.state(source);
  t.equal(state.status, 'failed');
  t.match(state.failure, /^source_decomposition: POST \/v1\/chat\/completions \{"role":"user"\} .* … \(\d+ characters left out\) … .*failed: the model server said: 😀 context length exceeded$/s);
  t.ok(runeLength(state.failure?.slice('source_decomposition: '.length) ?? '') <= MAX_KEPT_ERROR_CHARS, 'the reason is bounded');
});

t.test('a fact both in the text and in an image is recorded once, as a text fact', async (t) => {
  const source = await fetchedSource({ url: `${server.baseUrl}/article.html` });
  const base = recordingChatModel();
  const echoing: ChatModel = {
    ...base.model,
    async extractImageFacts() {
      return [
        { content: 'Sea otters are marine mammals of the North Pacific.', sourceText: '' },
        { content: '   ', sourceText: 'blank' },
      ];
    },
  };
  t.equal(await fixture.run(decomposition(echoing).stage, source), null);
  const facts = (await factsExtracted(source)).facts.filter((fact) => /marine mammals of the North Pacific/.test(fact.content));
  t.same(facts.map((fact) => fact.fact_kind), ['text']);
  t.same((await factsExtracted(source)).facts.filter((fact) => fact.fact_kind === 'image'), []);
});

t.test('with the built-in local chat model: angle brackets in the text are words, never dropped or glued', async (t) => {
  const { stage } = decomposition(createLocalChatModel());
  const factsOf = async (upload: string, contentType: string, filename: string): Promise<string[]> => {
    const source = await fetchedSource({ upload: Buffer.from(upload), contentType, filename });
    t.equal(await fixture.run(stage, source), null);
    return (await factsExtracted(source)).facts.map((fact) => fact.content);
  };
  // The page writes the tag as text; its extracted text is `<script> tags run …`.
  const page = await factsOf('<!doctype html><html><body><p>Inline &lt;script&gt; tags run code when the page loads.</p></body></html>', 'text/html', 'scripts.html');
  t.same(page, ['Inline <script> tags run code when the page loads.']);
  // An HTML document sent as plain text is read as text: its tags stay, and no two words meet.
  // Stripping them made the fact "Sea otters hold handswhile they sleep in the kelp."
  const plain = await factsOf('<p>Sea otters hold hands</p><p>while they sleep in the kelp.</p>', 'text/plain', 'otters.html');
  t.equal(plain.length, 1);
  t.match(plain[0], /^<p>Sea otters hold hands<\/p><p>while they sleep in the kelp\./);
});
