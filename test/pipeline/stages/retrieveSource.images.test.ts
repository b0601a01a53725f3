import { createHash } from 'node:crypto';
import t, { type Test } from 'tap';

import type { SourceImage } from '../../../src/domain/source/decider.js';
import { createRetrieveSourceStage } from '../../../src/pipeline/stages/retrieveSource.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS } from '../../../src/providers/fetch/http.js';
import { createWorkerDocumentExtractor, type DocumentExtractor } from '../../../src/providers/fetch/extractionWorkers.js';
import { imageFetchSettings, type ImageLimits } from '../../../src/providers/fetch/images.js';
import { startWebServer } from '../../helpers/webServer.js';
import { noisePng, openStageFixture } from '../../helpers/decompositionHarness.js';
import { buildPdfWithImages, noiseImage } from '../../fixtures/fetch/pdfWithImages.js';

const fixture = await openStageFixture(t);
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

const chart = noisePng(40, 40, 21);
const photo = noisePng(48, 32, 22);
const huge = noisePng(200, 200, 23); // about 160 KB
const extra = [noisePng(30, 30, 24), noisePng(30, 30, 25)];
const inline = noisePng(24, 24, 26);

function articleWithImages(inlineUri: string): string {
  return `<!doctype html><html><head><title>Sea otters</title></head><body><article>
  <h1>Sea otters</h1>
  <p>Sea otters are marine mammals of the North Pacific. They use rocks as tools to open shellfish, a behaviour few mammals show.</p>
  <figure><img src="/img/chart.png" alt="Otter population chart"><figcaption>Population 1900-2000</figcaption></figure>
  <p>Their fur is the densest of any animal. It keeps them warm without a layer of blubber, unlike other marine mammals.</p>
  <img src="/img/pixel.gif" width="1" height="1" alt="">
  <img src="/img/huge.png" alt="A huge photo">
  <img src="img/photo.png" alt="An otter floating on its back">
  <img src="${inlineUri}" alt="Inline sketch">
  <img src="/img/extra-1.png" alt="Extra one">
  <img src="/img/extra-2.png" alt="Extra two">
  <p>Sea otters hold hands while they sleep, so that they do not drift apart in the current.</p>
  </article></body></html>`;
}

const server = await startWebServer({
  '/article.html': { body: articleWithImages(`data:image/png;base64,${inline.toString('base64')}`) },
  '/img/chart.png': { body: chart, contentType: 'image/png' },
  '/img/photo.png': { body: photo, contentType: 'image/png' },
  '/img/huge.png': { body: huge, contentType: 'image/png' },
  '/img/pixel.gif': { body: Buffer.from('GIF89a\x01\x00\x01\x00', 'latin1'), contentType: 'image/gif' },
  '/img/extra-1.png': { body: extra[0]!, contentType: 'image/png' },
  '/img/extra-2.png': { body: extra[1]!, contentType: 'image/png' },
});
t.teardown(server.close);

function stageWith(images: ImageLimits, documents?: DocumentExtractor) {
  const settings = { ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 5000 };
  return createRetrieveSourceStage({
    store: fixture.store,
    assets: fixture.assets,
    fetcher: createHttpFetcher(settings),
    imageFetcher: createHttpFetcher(imageFetchSettings(settings, images)),
    doiResolver: 'https://doi.org/',
    maxAttempts: 1,
    images,
    ...(documents ? { documents } : {}),
  });
}

async function fetchedImages(t: Test, sourceId: string): Promise<SourceImage[]> {
  const state = await fixture.state(sourceId);
  t.equal(state.status, 'fetched', `source ${sourceId} is fetched (${state.failure ?? ''})`);
  return state.fetched?.images ?? [];
}

t.test('an HTML page: its images within the limits, in page order, stored by SHA-256', async (t) => {
  const stage = stageWith({ maxImageBytes: 50_000, maxImagesPerSource: 20 });
  const source = await fixture.register({ url: `${server.baseUrl}/article.html` });
  t.equal(await fixture.run(stage, source), null);
  const images = await fetchedImages(t, source);
  t.same(
    images.map((image) => ({ ...image, image_id: image.image_id.replace(/^img-(\d+)-[0-9a-f]{16}$/, 'img-$1') })),
    [
      { image_id: 'img-0', sha256: sha256(chart), content_type: 'image/png', bytes: chart.length, url: `${server.baseUrl}/img/chart.png`, alt_text: 'Otter population chart', caption: 'Population 1900-2000' },
      { image_id: 'img-1', sha256: sha256(photo), content_type: 'image/png', bytes: photo.length, url: `${server.baseUrl}/img/photo.png`, alt_text: 'An otter floating on its back', caption: null },
      { image_id: 'img-2', sha256: sha256(inline), content_type: 'image/png', bytes: inline.length, url: null, alt_text: 'Inline sketch', caption: null },
      { image_id: 'img-3', sha256: sha256(extra[0]!), content_type: 'image/png', bytes: extra[0]!.length, url: `${server.baseUrl}/img/extra-1.png`, alt_text: 'Extra one', caption: null },
      { image_id: 'img-4', sha256: sha256(extra[1]!), content_type: 'image/png', bytes: extra[1]!.length, url: `${server.baseUrl}/img/extra-2.png`, alt_text: 'Extra two', caption: null },
    ],
    'the tracking pixel is never fetched, the huge image is skipped',
  );
  t.equal(server.hits.get('/img/pixel.gif'), undefined, 'a declared 1x1 image is not even fetched');
  t.equal(images[0]!.image_id, `img-0-${sha256(chart).slice(0, 16)}`);
  for (const image of images) t.ok(await fixture.assets.has(image.sha256), `${image.image_id} is in the asset store`);
  t.same(await fixture.assets.get(images[1]!.sha256), photo);

  const again = await fixture.register({ url: `${server.baseUrl}/article.html` });
  t.equal(await fixture.run(stage, again), null);
  t.same((await fetchedImages(t, again)).map((image) => image.image_id), images.map((image) => image.image_id), 'a re-fetch gives the same ids');
});

t.test('max_images_per_source caps the images; the spec size limit keeps the large one', async (t) => {
  const capped = await fixture.register({ url: `${server.baseUrl}/article.html` });
  t.equal(await fixture.run(stageWith({ maxImageBytes: 50_000, maxImagesPerSource: 2 }), capped), null);
  t.same((await fetchedImages(t, capped)).map((image) => image.alt_text), ['Otter population chart', 'An otter floating on its back']);

  const spec = await fixture.register({ url: `${server.baseUrl}/article.html` });
  t.equal(await fixture.run(stageWith({ maxImageBytes: 5_242_880, maxImagesPerSource: 20 }), spec), null);
  t.same((await fetchedImages(t, spec)).map((image) => image.alt_text), [
    'Otter population chart',
    'A huge photo',
    'An otter floating on its back',
    'Inline sketch',
    'Extra one',
    'Extra two',
  ]);

  const none = await fixture.register({ url: `${server.baseUrl}/article.html` });
  t.equal(await fixture.run(stageWith({ maxImageBytes: 5_242_880, maxImagesPerSource: 0 }), none), null);
  t.same(await fetchedImages(t, none), []);
});

t.test('uploads: an HTML file keeps its inline images; a PDF its embedded ones', async (t) => {
  const stage = stageWith({ maxImageBytes: 5_242_880, maxImagesPerSource: 20 });
  const html = await fixture.register({
    upload: Buffer.from(articleWithImages(`data:image/png;base64,${inline.toString('base64')}`)),
    contentType: 'text/html',
    filename: 'otters.html',
  });
  t.equal(await fixture.run(stage, html), null);
  t.same(
    (await fetchedImages(t, html)).map((image) => [image.sha256, image.url, image.alt_text]),
    [[sha256(inline), null, 'Inline sketch']],
    'relative images of an upload have no base to be fetched from; the absolute-path ones neither',
  );

  const pdf = buildPdfWithImages([{ lines: ['Sea otters float on their backs.', 'They eat shellfish.'], images: [noiseImage(64, 48, 31)] }], 'Otters');
  const uploaded = await fixture.register({ upload: pdf, contentType: 'application/pdf', filename: 'otters.pdf' });
  t.equal(await fixture.run(stage, uploaded), null);
  const images = await fetchedImages(t, uploaded);
  t.equal(images.length, 1);
  t.match(images[0], { content_type: 'image/png', url: null, alt_text: null, caption: null, image_id: /^img-0-[0-9a-f]{16}$/ });
  t.equal(sha256(await fixture.assets.get(images[0]!.sha256)), images[0]!.sha256);
  t.equal((await fixture.state(uploaded)).fetched?.document_kind, 'pdf');
});

t.test('a page whose images all fail is still fetched', async (t) => {
  const broken = await startWebServer({
    '/page.html': { body: articleWithImages('data:image/png;base64,!!!!') },
  });
  t.teardown(broken.close);
  const source = await fixture.register({ url: `${broken.baseUrl}/page.html` });
  t.equal(await fixture.run(stageWith({ maxImageBytes: 5_242_880, maxImagesPerSource: 20 }), source), null);
  t.same(await fetchedImages(t, source), []);
  t.ok((broken.hits.get('/img/chart.png') ?? 0) >= 1, 'the missing images were asked for');
});

t.test('with the extraction worker: the same page and PDF images as on the calling thread', async (t) => {
  const workers = createWorkerDocumentExtractor({ inThreadBelowBytes: 0 });
  t.teardown(() => workers.close());
  const calls = { extract: 0, pdfImages: 0 };
  const documents: DocumentExtractor = {
    extract: (input, signal) => (calls.extract++, workers.extract(input, signal)),
    pdfImages: (body, limits, signal) => (calls.pdfImages++, workers.pdfImages(body, limits, signal)),
  };
  const images = { maxImageBytes: 50_000, maxImagesPerSource: 20 };
  const inWorker = stageWith(images, documents);
  const withoutIds = (list: SourceImage[]) => list.map(({ image_id: _id, ...image }) => image);
  const page = { url: `${server.baseUrl}/article.html` };
  const [here, there] = [await fixture.register(page), await fixture.register(page)];
  t.equal(await fixture.run(stageWith(images), here), null);
  t.equal(await fixture.run(inWorker, there), null);
  t.same(withoutIds(await fetchedImages(t, there)), withoutIds(await fetchedImages(t, here)), 'the page: the same images');
  const [hereState, thereState] = [await fixture.state(here), await fixture.state(there)];
  t.same(
    { title: thereState.fetched?.title, text: thereState.fetched?.text_sha256, markdown: thereState.fetched?.markdown_sha256 },
    { title: hereState.fetched?.title, text: hereState.fetched?.text_sha256, markdown: hereState.fetched?.markdown_sha256 },
    'the page: the same title, text and Markdown',
  );
  t.match(thereState.fetched, { title: 'Sea otters', text_sha256: /^[0-9a-f]{64}$/, markdown_sha256: /^[0-9a-f]{64}$/ }, 'all of them there');

  const pdf = buildPdfWithImages([{ lines: ['Sea otters float on their backs.'], images: [noiseImage(64, 48, 31), noiseImage(40, 40, 32)] }], 'Otters');
  const upload = { upload: pdf, contentType: 'application/pdf', filename: 'otters.pdf' };
  const [pdfHere, pdfThere] = [await fixture.register(upload), await fixture.register(upload)];
  t.equal(await fixture.run(stageWith(images), pdfHere), null);
  t.equal(await fixture.run(inWorker, pdfThere), null);
  const extracted = await fetchedImages(t, pdfThere);
  t.equal(extracted.length, 2, "the PDF's two images");
  t.same(withoutIds(extracted), withoutIds(await fetchedImages(t, pdfHere)), 'the PDF: the same images');
  t.same(calls, { extract: 2, pdfImages: 1 }, 'the page and the PDF went to the extractor, and so did the PDF\'s images');
  t.equal(workers.workerCount, 1, 'its worker did the work');
});

t.test("a PDF whose images outrun the extraction deadline is fetched with its text and no images", async (t) => {
  const workers = createWorkerDocumentExtractor({ deadlineMs: 1000 });
  t.teardown(() => workers.close());
  // 2^24 drawings of a form: the walk for images takes hours; the text is read at once. The deadline
  // is the worker's CPU time, so on a busy machine the text read (0.15 s of it) still makes it.
  const pdf = buildPdfWithImages([{ lines: ['Sea otters float on their backs.'], images: [noiseImage(64, 48, 31)], nestedForms: 24 }], 'Otters');
  const uploaded = await fixture.register({ upload: pdf, contentType: 'application/pdf', filename: 'otters.pdf' });
  t.equal(await fixture.run(stageWith({ maxImageBytes: 5_242_880, maxImagesPerSource: 20 }, workers), uploaded), null, 'the source does not fail');
  const state = await fixture.state(uploaded);
  t.match(state.fetched, { document_kind: 'pdf', title: 'Otters', text_sha256: /^[0-9a-f]{64}$/ }, 'fetched, with its text');
  t.ok((state.fetched?.text_chars ?? 0) > 0, 'the text was kept');
  t.same(await fetchedImages(t, uploaded), [], 'no images: the walk was ended');
});
