import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { extractDocument, UnsupportedContentError } from '../../../src/providers/fetch/extract.js';
import { createWorkerDocumentExtractor, IN_THREAD_BELOW_BYTES, IN_THREAD_MAX_NESTING, inThreadDocumentExtractor, markupNesting, WALL_CLOCK_BACKSTOP, withinDeadline, type DocumentExtractor } from '../../../src/providers/fetch/extractionWorkers.js';
import { isPermanentError } from '../../../src/pipeline/types.js';
import { busyWorkerPool } from '../../util/fixtures/busyPool.js';
import { extractPdfImages } from '../../../src/providers/fetch/pdfImages.js';
import { buildPdfWithImages, noiseImage } from '../../fixtures/fetch/pdfWithImages.js';
import { CORPUS_DIR } from '../../helpers/corpus.js';

const corpusFile = (name: string) => readFileSync(path.join(CORPUS_DIR, 'docs', name));

/** A long article page: hundreds of paragraphs, as a news or encyclopaedia page has. */
function longPage(paragraphs: number): Buffer {
  const body = Array.from(
    { length: paragraphs },
    (_, i) => `<div class="c"><p>Paragraph ${i}: the <a href="/x${i}">Geiger counter</a> was refined in <em>1928</em> by Walther Müller, and its tube detects <strong>ionising radiation</strong>.</p></div>`,
  ).join('\n');
  return Buffer.from(`<!doctype html><html><head><title>Long page</title></head><body><nav>${'<a href="/n">nav</a> '.repeat(50)}</nav><article><h1>Long page</h1>${body}</article></body></html>`);
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a rejection');
}

/**
 * One worker extractor for the tests that compare its answers with the calling thread's and end
 * no worker: a worker loads the extraction modules again, about 0.3 CPU-s each.
 */
const comparing = createWorkerDocumentExtractor({ inThreadBelowBytes: 0 });
t.teardown(() => comparing.close());

t.test('a worker extracts the document the calling thread extracts, HTML and PDF', async (t) => {
  const extractor = comparing;
  for (const [name, contentType] of [
    ['r01-becquerel-rays.html', 'text/html; charset=utf-8'],
    ['c03-computable-numbers.pdf', 'application/pdf'],
  ] as const) {
    const input = { body: corpusFile(name), contentType, url: `https://example.org/${name}` };
    const inWorker = await extractor.extract(input);
    t.same(inWorker, await extractDocument(input), `${name}: the same document`);
    t.ok(inWorker.text.length > 100, `${name}: with its text`);
  }
  const body = Buffer.from('<html><body><p>Bytes the caller keeps.</p></body></html>');
  await extractor.extract({ body, contentType: 'text/html' });
  t.equal(body.toString('utf8'), '<html><body><p>Bytes the caller keeps.</p></body></html>', "the caller's buffer is left as it was (a copy went to the worker)");
});

t.test("a worker reads a PDF's images as the calling thread does, as Buffers", async (t) => {
  const extractor = comparing;
  const pdf = buildPdfWithImages([{ lines: ['A page with a photo.'], images: [noiseImage(48, 32, 11)] }, { lines: ['And another.'], images: [noiseImage(20, 20, 13)] }], 'Images');
  const limits = { maxImageBytes: 5_242_880, maxImages: 20 };
  const inWorker = await extractor.pdfImages(pdf, limits);
  const inThread = await extractPdfImages(pdf, limits);
  t.same(inWorker.map((image) => [image.page, image.width, image.height]), [[1, 48, 32], [2, 20, 20]]);
  t.same(inWorker.map((image) => image.png.toString('base64')), inThread.map((image) => image.png.toString('base64')), 'the same PNG bytes');
  t.ok(inWorker.every((image) => Buffer.isBuffer(image.png)), 'Buffers, as from the calling thread');
  const broken = await rejection(extractor.pdfImages(Buffer.from('%PDF-1.4 garbage'), limits));
  t.ok(broken instanceof UnsupportedContentError, 'a broken PDF: UnsupportedContentError');
  t.ok(isPermanentError(broken));
});

t.test("a worker's refusals are UnsupportedContentError with the content type, permanent as in the thread", async (t) => {
  const extractor = comparing;
  const cases = [
    { body: Buffer.from('%PDF-1.7 not really a pdf'), contentType: 'application/pdf' },
    { body: Buffer.from('<html><body>   </body></html>'), contentType: 'text/html' },
    { body: Buffer.from([0, 1, 2, 3]), contentType: 'image/png' },
  ];
  for (const input of cases) {
    const inThread = await rejection(inThreadDocumentExtractor.extract(input));
    const inWorker = await rejection(extractor.extract(input));
    t.ok(inWorker instanceof UnsupportedContentError, `${input.contentType}: UnsupportedContentError`);
    t.equal(inWorker.message, inThread.message, `${input.contentType}: the same message (${inWorker.message})`);
    t.equal((inWorker as UnsupportedContentError).contentType, (inThread as UnsupportedContentError).contentType, 'the same content type');
    t.ok(isPermanentError(inWorker), 'never retried');
  }
});

t.test('the calling thread keeps turning while a worker parses a long page; in the thread it stops', async (t) => {
  // The file's worker, its modules loaded by the tests above: a worker's start is not the subject.
  const extractor = comparing;
  const input = { body: longPage(100), contentType: 'text/html' }; // about 19 KB: a worker's even by default (the in-thread limit is 16 KiB)
  t.ok(input.body.byteLength > IN_THREAD_BELOW_BYTES, 'past the in-thread limit');
  // Counts turns of this thread's event loop while an extraction is out.
  const turnsDuring = async (documents: DocumentExtractor) => {
    let turns = 0;
    let spinning = true;
    const spin = () => {
      if (!spinning) return;
      turns += 1;
      setImmediate(spin);
    };
    setImmediate(spin);
    const document = await documents.extract(input);
    spinning = false;
    t.match(document.title, /Long page/);
    return turns;
  };
  await extractor.extract({ body: longPage(2), contentType: 'text/html' }); // the worker's modules are loaded before the count
  t.ok((await turnsDuring(extractor)) > 10, 'the loop turned while the worker parsed');
  t.equal(await turnsDuring(inThreadDocumentExtractor), 0, 'on the calling thread the parse held the loop');
});

t.test('an aborted extraction rejects with the reason and ends its worker; the next call gets a new one', async (t) => {
  const extractor = createWorkerDocumentExtractor();
  t.teardown(() => extractor.close());
  const controller = new AbortController();
  const out = extractor.extract({ body: longPage(3000), contentType: 'text/html' }, controller.signal);
  controller.abort(new Error('job deadline'));
  t.match(await rejection(out), { message: 'job deadline' });
  const document = await extractor.extract({ body: corpusFile('r01-becquerel-rays.html'), contentType: 'text/html' });
  t.ok(document.text.length > 100, 'a later call is answered');
  const already = new AbortController();
  already.abort(new Error('too late'));
  t.match(await rejection(extractor.extract({ body: Buffer.from('<p>x</p>'), contentType: 'text/html' }, already.signal)), { message: 'too late' });
});

t.test('a worker that runs out of memory fails its call as retryable, and the next call gets a new worker', async (t) => {
  // Half the heap and half the page of before (64 MB, 60,000 paragraphs): the same ratio, half the CPU.
  const extractor = createWorkerDocumentExtractor({ resourceLimits: { maxOldGenerationSizeMb: 32 }, inThreadBelowBytes: 0 });
  t.teardown(() => extractor.close());
  const error = await rejection(extractor.extract({ body: longPage(30_000), contentType: 'text/html' }));
  t.match(error.message, /document extraction worker stopped/);
  t.notOk(isPermanentError(error), 'retryable: the job runtime tries again');
  t.ok((await extractor.extract({ body: corpusFile('r01-becquerel-rays.html'), contentType: 'text/html' })).text.length > 100, 'a new worker answers a small page');
});

t.test('a small body is extracted on the calling thread: no worker starts for it', async (t) => {
  const extractor = createWorkerDocumentExtractor();
  t.teardown(() => extractor.close());
  const small = corpusFile('r01-becquerel-rays.html');
  t.ok(small.byteLength < IN_THREAD_BELOW_BYTES, 'a small page');
  t.same(await extractor.extract({ body: small, contentType: 'text/html' }), await extractDocument({ body: small, contentType: 'text/html' }));
  t.equal(extractor.workerCount, 0, 'no worker started');
  await extractor.extract({ body: longPage(100), contentType: 'text/html' }); // about 19 KB
  t.equal(extractor.workerCount, 1, 'a long page started one');
});

/** A page whose one sentence sits `depth` divs deep: Readability's clean-up costs far more than the square of the depth. */
const nestedPage = (depth: number) =>
  Buffer.from(`<html><body><article>${'<div>'.repeat(depth)}<p>Marie Curie discovered polonium in 1898.</p>${'</div>'.repeat(depth)}</article></body></html>`);

t.test('markup nesting is read in one pass over the tags', async (t) => {
  t.equal(markupNesting('<p>a<br>b<img src=x><b>c</b></p><hr/>'), 2, 'void and self-closed elements do not nest');
  t.equal(markupNesting('<div><div><span></span></div></div><div></div>'), 3);
  t.equal(markupNesting('a < b and c > d, Vector<int>'), 1, 'prose is prose, roughly');
  t.equal(markupNesting(nestedPage(500).toString()), 504, 'html, body, article, 500 divs and the paragraph');
});

t.test('a small page of deeply nested markup is extracted in a worker, which the deadline can end', async (t) => {
  const extractor = createWorkerDocumentExtractor();
  t.teardown(() => extractor.close());
  const shallow = nestedPage(IN_THREAD_MAX_NESTING - 4); // html, body, article and the paragraph: at the bound
  t.ok(shallow.byteLength < IN_THREAD_BELOW_BYTES);
  await extractor.extract({ body: shallow, contentType: 'text/html' });
  t.equal(extractor.workerCount, 0, 'nesting within the bound: on the calling thread');
  const deep = nestedPage(IN_THREAD_MAX_NESTING + 10);
  t.ok(deep.byteLength < IN_THREAD_BELOW_BYTES, 'small, but deep');
  t.match((await extractor.extract({ body: deep, contentType: 'text/html' })).text, /Marie Curie discovered polonium/);
  t.equal(extractor.workerCount, 1, 'in a worker');
});

t.test('a PDF is extracted in a worker however small, where the deadline can end pdf.js', async (t) => {
  const extractor = createWorkerDocumentExtractor();
  t.teardown(() => extractor.close());
  const pdf = buildPdfWithImages([{ lines: ['Sea otters float on their backs.'] }], 'Otters');
  t.ok(pdf.byteLength < IN_THREAD_BELOW_BYTES, 'a small PDF');
  t.match((await extractor.extract({ body: pdf, contentType: 'application/pdf' })).text, /Sea otters float on their backs/);
  t.equal(extractor.workerCount, 1, 'in a worker');
});

t.test('an extraction past its deadline ends its worker and fails the document as too complex, permanently', async (t) => {
  const extractor = createWorkerDocumentExtractor({ deadlineMs: 200 });
  t.teardown(() => extractor.close());
  const error = await rejection(extractor.extract({ body: nestedPage(3000), contentType: 'text/html' }));
  t.type(error, UnsupportedContentError);
  t.equal(error.message, 'the document is too complex to extract: not done within 0.2 s (deeply nested markup?)');
  t.ok(isPermanentError(error), 'not retried');
  t.ok((await extractor.extract({ body: corpusFile('r01-becquerel-rays.html'), contentType: 'text/html' })).text.length > 100, 'the next document is answered');
});

t.test("the deadline is the worker's CPU time for the call: a call that waits past it is answered, one that computes past it is refused", async (t) => {
  const pool = busyWorkerPool('test-deadline');
  t.teardown(() => pool.close());
  const refusal = { what: 'the call is', hint: '' };
  // Waiting, as a worker does for a core on a busy machine, spends none of it.
  t.equal(await withinDeadline(100, undefined, refusal, (options) => pool.call({ method: 'sleep', ms: 250 }, options)), 'slept');
  const error = await rejection(withinDeadline(100, undefined, refusal, (options) => pool.call({ method: 'spin' }, options)));
  t.type(error, UnsupportedContentError);
  t.equal(error.message, 'the call is too complex to extract: not done within 0.1 s');
  t.equal(pool.workerCount, 0, 'the computing worker was ended');
  // A call that waits for ever spends none of its CPU time: the clock ends it, at WALL_CLOCK_BACKSTOP times the deadline.
  const stuck = await rejection(withinDeadline(30, undefined, refusal, (options) => pool.call({ method: 'sleep', ms: 3_600_000 }, options)));
  t.type(stuck, UnsupportedContentError);
  t.equal(stuck.message, 'the call is too complex to extract: not done within 0.03 s');
  t.match(stuck.cause, { message: `not done within ${WALL_CLOCK_BACKSTOP * 30} ms of the clock` }, 'ended by the clock, not by CPU time');
  t.equal(pool.workerCount, 0, 'the waiting worker was ended');
});

t.test("a PDF's images past the deadline: the worker is ended and the images refused as too complex, permanently, however small the PDF", async (t) => {
  const extractor = createWorkerDocumentExtractor({ deadlineMs: 200 });
  t.teardown(() => extractor.close());
  // 2^24 drawings of a form in 4 KB: walking them for images takes hours.
  const pathological = buildPdfWithImages([{ lines: ['Sea otters float on their backs.'], nestedForms: 24 }], 'Otters');
  t.ok(pathological.byteLength < IN_THREAD_BELOW_BYTES, 'a small PDF: its images go to the worker all the same');
  const limits = { maxImageBytes: 5_242_880, maxImages: 20 };
  const error = await rejection(extractor.pdfImages(pathological, limits));
  t.type(error, UnsupportedContentError);
  t.equal(error.message, "the PDF's images are too complex to extract: not done within 0.2 s (deeply nested forms?)");
  t.ok(isPermanentError(error), 'not retried');
  t.equal(extractor.workerCount, 0, 'its worker was ended');
});

t.test('after close, calls are refused', async (t) => {
  const extractor = createWorkerDocumentExtractor({ inThreadBelowBytes: 0 });
  await extractor.extract({ body: corpusFile('r01-becquerel-rays.html'), contentType: 'text/html' });
  await extractor.close();
  t.match(await rejection(extractor.extract({ body: Buffer.from('<p>x</p>'), contentType: 'text/html' })), { message: 'document extraction is closed' });
});
