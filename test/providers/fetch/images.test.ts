import { createHash } from 'node:crypto';
import t from 'tap';
import { PNG } from 'pngjs';

import { htmlToDocument } from '../../../src/providers/fetch/html.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS } from '../../../src/providers/fetch/http.js';
import {
  collectSourceImages,
  decodeDataUri,
  imageFetchSettings,
  imageIdFor,
  sniffImageType,
} from '../../../src/providers/fetch/images.js';
import { extractPdfImages } from '../../../src/providers/fetch/pdfImages.js';
import { startWebServer } from '../../helpers/webServer.js';
import { noisePng } from '../../helpers/decompositionHarness.js';
import { buildPdfWithImages, noiseImage, solidImage } from '../../fixtures/fetch/pdfWithImages.js';

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
const fetcher = () => createHttpFetcher(imageFetchSettings({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1, timeoutMs: 5000 }, { maxImageBytes: 5_242_880, maxImagesPerSource: 20 }));

t.test('HTML images: srcset, data: URIs, figure captions, tracking pixels', async (t) => {
  const html = `<!doctype html><html><head><title>Otters</title></head><body><article>
    <h1>Otters</h1>
    <p>Sea otters float on their backs while they eat, and they use rocks to open shellfish. They live along the coasts of the North Pacific.</p>
    <figure><img src="img/raft.png" alt="A raft of otters" width="640" height="480"><figcaption>Otters  resting in a raft</figcaption></figure>
    <img srcset="img/small.png 1x, img/large.png 2x" alt="Only srcset">
    <img src="https://tracker.example/p.gif" width="1" height="1" alt="">
    <img src="img/icon.png" width="12px" alt="icon">
    <img src="data:image/png;base64,iVBORw0KGgo=" alt="inline">
    <img src="ftp://example.org/x.png" alt="not http">
    <img src="img/titled.png" title="A titled picture" alt="">
    <p>Otters have the densest fur of any animal, with up to a million hairs per square inch.</p>
  </article></body></html>`;
  const document = htmlToDocument(html, 'https://otters.example/articles/sea.html');
  t.same(document.images, [
    { url: 'https://otters.example/articles/img/raft.png', altText: 'A raft of otters', caption: 'Otters resting in a raft' },
    { url: 'https://otters.example/articles/img/small.png', altText: 'Only srcset', caption: null },
    { url: 'data:image/png;base64,iVBORw0KGgo=', altText: 'inline', caption: null },
    { url: 'https://otters.example/articles/img/titled.png', altText: '', caption: 'A titled picture' },
  ]);
});

t.test('sniffImageType and decodeDataUri', async (t) => {
  t.equal(sniffImageType(noisePng(2, 2)), 'image/png');
  t.equal(sniffImageType(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0])), 'image/jpeg');
  t.equal(sniffImageType(Buffer.from('GIF89a....')), 'image/gif');
  t.equal(sniffImageType(Buffer.from('RIFF\0\0\0\0WEBPVP8 ')), 'image/webp');
  t.equal(sniffImageType(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>')), null, 'SVG is not a raster image');
  t.equal(sniffImageType(Buffer.alloc(0)), null);
  t.same(decodeDataUri('data:image/png;base64,AAEC'), Buffer.from([0, 1, 2]));
  t.same(decodeDataUri('data:text/plain,hello%20there'), Buffer.from('hello there'));
  t.equal(decodeDataUri('data:broken'), null, 'no comma');
  t.equal(decodeDataUri('data:text/plain,%E0%A4%A'), null, 'malformed escape');
  t.equal(imageIdFor(3, 'ab'.repeat(32)), `img-3-${'ab'.repeat(8)}`);
});

t.test('collectSourceImages over a real server: limits, formats, failures, duplicates', async (t) => {
  const big = noisePng(200, 200, 2); // ~160 KB
  const medium = [noisePng(40, 40, 3), noisePng(40, 40, 4), noisePng(40, 40, 5)]; // ~6.5 KB each
  const pixel = noisePng(1, 1, 6); // < 1 KiB
  const server = await startWebServer({
    '/big.png': { body: big, contentType: 'image/png' },
    '/a.png': { body: medium[0]!, contentType: 'image/png' },
    '/a-copy.png': { body: medium[0]!, contentType: 'image/png' },
    '/b.png': { body: medium[1]!, contentType: 'application/octet-stream' },
    '/c.png': { body: medium[2]!, contentType: 'image/png' },
    '/pixel.png': { body: pixel, contentType: 'image/png' },
    '/page.png': { body: '<html>not an image</html>'.repeat(100), contentType: 'image/png' },
  });
  t.teardown(server.close);
  const url = (path: string) => `${server.baseUrl}${path}`;
  const inline = noisePng(30, 30, 7);
  const images = [
    { url: url('/big.png'), altText: 'too big', caption: null },
    { url: url('/missing.png'), altText: '404', caption: null },
    { url: url('/pixel.png'), altText: 'pixel', caption: null },
    { url: url('/page.png'), altText: 'html', caption: null },
    { url: url('/a.png'), altText: 'first', caption: 'Figure A' },
    { url: url('/a-copy.png'), altText: 'same bytes', caption: null },
    { url: `data:image/png;base64,${inline.toString('base64')}`, altText: 'inline', caption: null },
    { url: url('/b.png'), altText: 'typed octet-stream', caption: null },
    { url: url('/c.png'), altText: 'third', caption: null },
  ];

  const collected = await collectSourceImages({
    kind: 'html',
    body: Buffer.alloc(0),
    images,
    limits: { maxImageBytes: 50_000, maxImagesPerSource: 20 },
    fetcher: fetcher(),
  });
  t.same(
    collected.map((image) => [image.url, image.altText, image.caption, image.contentType, image.sha256]),
    [
      [url('/a.png'), 'first', 'Figure A', 'image/png', sha256(medium[0]!)],
      [null, 'inline', null, 'image/png', sha256(inline)],
      [url('/b.png'), 'typed octet-stream', null, 'image/png', sha256(medium[1]!)],
      [url('/c.png'), 'third', null, 'image/png', sha256(medium[2]!)],
    ],
    'too large, missing, tiny, non-image and repeated bytes are skipped; order is kept',
  );
  t.same(collected[0]!.bytes, medium[0]);

  const capped = await collectSourceImages({
    kind: 'html',
    body: Buffer.alloc(0),
    images,
    limits: { maxImageBytes: 50_000, maxImagesPerSource: 2 },
    fetcher: fetcher(),
  });
  t.same(capped.map((image) => image.altText), ['first', 'inline'], 'at most maxImagesPerSource');

  const withBig = await collectSourceImages({
    kind: 'html',
    body: Buffer.alloc(0),
    images: images.slice(0, 1),
    limits: { maxImageBytes: 5_242_880, maxImagesPerSource: 20 },
    fetcher: fetcher(),
  });
  t.equal(withBig.length, 1, 'the large image is kept under the spec limit');

  const withoutFetcher = await collectSourceImages({ kind: 'html', body: Buffer.alloc(0), images, limits: { maxImageBytes: 50_000, maxImagesPerSource: 20 } });
  t.same(withoutFetcher.map((image) => image.altText), ['inline'], 'without a fetcher only inline images');

  const none = await collectSourceImages({ kind: 'html', body: Buffer.alloc(0), images, limits: { maxImageBytes: 50_000, maxImagesPerSource: 0 }, fetcher: fetcher() });
  t.same(none, []);
});

t.test('an image fetcher stops reading at max_image_bytes', async (t) => {
  const server = await startWebServer({ '/huge.png': { body: noisePng(300, 300, 9), contentType: 'image/png' } });
  t.teardown(server.close);
  const small = createHttpFetcher(imageFetchSettings({ ...DEFAULT_FETCH_SETTINGS, maxAttempts: 1 }, { maxImageBytes: 10_000, maxImagesPerSource: 20 }));
  const refused = await small.fetch(`${server.baseUrl}/huge.png`).then(
    () => null,
    (error: unknown) => error,
  );
  t.match(refused, { reason: 'body too large', permanent: true }, 'a body over the limit fails for good');
  const collected = await collectSourceImages({
    kind: 'markdown',
    body: Buffer.alloc(0),
    images: [{ url: `${server.baseUrl}/huge.png`, altText: '', caption: null }],
    limits: { maxImageBytes: 10_000, maxImagesPerSource: 20 },
    fetcher: small,
  });
  t.same(collected, []);
});

t.test('PDF images: XObjects become PNGs within the limits', async (t) => {
  const photo = noiseImage(48, 32, 11);
  const pdf = buildPdfWithImages(
    [
      { lines: ['Page one has a photo and a rule.'], images: [photo, noiseImage(200, 4, 12)] },
      { lines: ['Page two has a flat block and a small photo.'], images: [solidImage(64, 64), noiseImage(20, 20, 13)] },
    ],
    'Images',
  );
  const images = await extractPdfImages(pdf, { maxImageBytes: 5_242_880, maxImages: 20 });
  t.same(
    images.map((image) => [image.page, image.width, image.height]),
    [
      [1, 48, 32],
      [2, 20, 20],
    ],
    'a 4 px high rule and a flat colour block are not images worth keeping',
  );
  const decoded = PNG.sync.read(images[0]!.png);
  t.equal(decoded.width, 48);
  t.same([...decoded.data.subarray(0, 4)], [...photo.rgb.subarray(0, 3), 255], 'pixels survive the round trip');
  t.same([...decoded.data.subarray(-4)], [...photo.rgb.subarray(-3), 255]);

  t.same(
    (await extractPdfImages(pdf, { maxImageBytes: 5_242_880, maxImages: 1 })).map((image) => image.page),
    [1],
    'maxImages caps the walk',
  );
  const smallOnly = await extractPdfImages(pdf, { maxImageBytes: images[1]!.png.length, maxImages: 20 });
  t.same(smallOnly.map((image) => image.width), [20], 'an image over maxImageBytes is skipped');

  const collected = await collectSourceImages({ kind: 'pdf', body: pdf, images: [], limits: { maxImageBytes: 5_242_880, maxImagesPerSource: 20 } });
  t.same(
    collected.map((image) => [image.contentType, image.url, image.sha256]),
    images.map((image) => ['image/png', null, sha256(image.png)]),
  );

  const twice = buildPdfWithImages([{ lines: ['Same photo'], images: [photo] }, { lines: ['Same photo again'], images: [photo] }]);
  t.equal((await extractPdfImages(twice, { maxImageBytes: 5_242_880, maxImages: 20 })).length, 1, 'the same pixels once');
  await t.rejects(extractPdfImages(Buffer.from('%PDF-1.4 garbage'), { maxImageBytes: 1000, maxImages: 2 }), { name: 'UnsupportedContentError' });
});
