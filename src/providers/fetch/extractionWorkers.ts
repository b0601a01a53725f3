import type { ResourceLimits } from 'node:worker_threads';
import { siblingEntry } from '../../util/helperProcess.js';
import { errorFrom, plainError, WorkerPool, type CallOptions, type PlainError, type StartedCall } from '../../util/workerPool.js';
import { UnsupportedContentError } from './document.js';
import type { ExtractedDocument, ExtractInput } from './extract.js';
import type { PdfImage, PdfImageLimits } from './pdfImages.js';
import { startsWithPdfMagic } from './sniff.js';

/**
 * Document extraction (HTML through linkedom, Readability and Turndown; PDF through pdf.js) is
 * the heaviest JavaScript a source costs: a 115 KB page took about 210 ms, a 425 KB one 500 ms,
 * and on the API thread every request waited for it (docs/performance.md, "Twenty-first round").
 * The service sends documents of IN_THREAD_BELOW_BYTES or more to a worker thread of its own;
 * tests of a stage may run it all on the calling thread.
 */
export interface DocumentExtractor {
  /** `extractDocument` (providers/fetch/extract.ts): the same document, or the same error. */
  extract(input: ExtractInput, signal?: AbortSignal): Promise<ExtractedDocument>;
  /** `extractPdfImages` (providers/fetch/pdfImages.ts): a PDF's raster images as PNG, or the same error. */
  pdfImages(body: Uint8Array, limits: PdfImageLimits, signal?: AbortSignal): Promise<PdfImage[]>;
}

/**
 * On the calling thread. Its modules (linkedom, Readability, Turndown) load at the first call, so
 * a service whose documents all go to the worker holds no second copy of them on the API thread.
 */
export const inThreadDocumentExtractor: DocumentExtractor = {
  async extract(input, signal) {
    signal?.throwIfAborted();
    const { extractDocument } = await import('./extract.js');
    return extractDocument(input);
  },
  async pdfImages(body, limits, signal) {
    signal?.throwIfAborted();
    const { extractPdfImages } = await import('./pdfImages.js');
    return extractPdfImages(body, limits, signal);
  },
};

/** What the API thread asks an extraction worker (extractionWorker.ts). */
export type ExtractionCall = { method: 'extract'; input: ExtractInput } | { method: 'pdfImages'; body: Uint8Array; limits: PdfImageLimits };

/** An error as it crosses the thread: UnsupportedContentError keeps its content type (and so stays permanent). */
export interface SerializedExtractionError extends PlainError {
  contentType?: string | null;
}

export function serializeExtractionError(error: unknown): SerializedExtractionError {
  if (error instanceof UnsupportedContentError) return { name: error.name, message: error.message, contentType: error.contentType };
  return plainError(error);
}

function rebuildExtractionError(error: SerializedExtractionError): Error {
  if (error.name === 'UnsupportedContentError') return new UnsupportedContentError(error.message, error.contentType ?? null);
  return errorFrom(error);
}

/**
 * Each worker's heap: a document whose parse needs more ends its worker (the attempt fails and is
 * retried), not the service. The young generation is bounded as well: with V8's default size a
 * worker reaching its old-generation limit during a scavenge aborted the whole
 * process in 4 of 6 runs of its test (`FATAL ERROR: Reached heap limit`, nodejs/node#47224);
 * with 2 MB (as `bin/factlog.js`'s --max-semi-space-size=1 gives every isolate) in none.
 */
export const EXTRACTION_WORKER_LIMITS: ResourceLimits = { maxOldGenerationSizeMb: 512, maxYoungGenerationSizeMb: 2 };

const WORKER_ENTRY = siblingEntry(import.meta.url, 'extractionWorker');

/**
 * Bodies smaller than this (but PDFs, and deeply nested markup) are extracted on the calling thread: a page of a few kilobytes takes a
 * few milliseconds there, and sending it to a worker would start a thread (and an isolate's
 * memory, 15-30 MiB at the 1,000-page bench's peak, past its memory target) for no gain in
 * responsiveness. Real web pages (50-500 KB of HTML) and papers are larger.
 */
export const IN_THREAD_BELOW_BYTES = 16 * 1024;

/**
 * How much of its worker's CPU time one document's extraction may take when the caller does not say (the
 * service passes `providers.resolution.extraction_timeout`, 2m by default). Readability's
 * clean-up costs far more than the square of the markup's nesting (a chain of 1,000 divs, 5 KB,
 * took 28 s; a 9 MB one ran for hours), so a crafted page could hold the one extraction worker,
 * and every source behind it, up to the job's own deadline (hours). Past this the worker is ended
 * and the source fails with a permanent "too complex" refusal. Real pages and papers take well
 * under a second to a few.
 */
export const EXTRACTION_DEADLINE_MS = 120_000;

/**
 * Nesting past which a small document is extracted in a worker all the same (where the deadline
 * can end it): on the calling thread, which may be the API's, it could not be stopped.
 */
export const IN_THREAD_MAX_NESTING = 64;

const VOID_ELEMENTS = new Set(['area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'param', 'source', 'track', 'wbr']);

/** The deepest element nesting of markup, by a linear pass over its tags (an estimate: no parser's recovery rules). */
export function markupNesting(text: string): number {
  let depth = 0;
  let deepest = 0;
  for (const tag of text.matchAll(/<(\/?)([a-zA-Z][\w-]*)[^<>]*?(\/?)>/g)) {
    if (tag[1] === '/') depth = Math.max(0, depth - 1);
    else if (tag[3] !== '/' && !VOID_ELEMENTS.has(tag[2].toLowerCase())) deepest = Math.max(deepest, ++depth);
  }
  return deepest;
}

/** How many times the CPU-time deadline a call may last by the clock (withinDeadline). */
export const WALL_CLOCK_BACKSTOP = 10;

/**
 * `run` under the extraction deadline as well as the caller's signal; past the deadline, a
 * permanent refusal: "<what> too complex to extract: not done within <n> s<hint>".
 *
 * The deadline is the worker's CPU time from when it begins the call, not the clock's from the
 * request: the worker's start-up and the documents before it on the worker are not this
 * document's doing, nor is the time its thread waits for a core on a busy machine (pdf.js loading
 * and a PDF's first text read took a second there, where they take 0.15 s alone). Counted, they
 * refused sound documents as too complex under load. A thread spends no more CPU time than the
 * clock's, so the worker's is looked at when the rest of the budget could be spent, no sooner.
 * A call that waits without computing (a promise that never settles in the worker) spends none
 * of it, so the clock ends it too, at WALL_CLOCK_BACKSTOP times the deadline: one stuck document
 * must not hold the extraction worker, and every document queued behind it, for ever
 * (`task.job_timeout` may be unlimited).
 */
export async function withinDeadline<T>(
  deadlineMs: number,
  signal: AbortSignal | undefined,
  refusal: { what: string; hint: string },
  run: (options: CallOptions) => Promise<T>,
): Promise<T> {
  const deadline = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let settled = false;
  const onStart = (call: StartedCall) => {
    const wallDeadline = performance.now() + WALL_CLOCK_BACKSTOP * deadlineMs;
    const lookAfter = (ms: number) => {
      timer = setTimeout(() => {
        call.cpuTimeMs().then(
          (spent) => {
            if (settled) return;
            const wallLeft = wallDeadline - performance.now();
            if (spent >= deadlineMs) deadline.abort(new Error(`not done within ${deadlineMs} ms of CPU time`));
            else if (wallLeft <= 0) deadline.abort(new Error(`not done within ${WALL_CLOCK_BACKSTOP * deadlineMs} ms of the clock`));
            else lookAfter(Math.min(deadlineMs - spent, wallLeft));
          },
          () => {}, // the worker has exited: the call fails with its own error
        );
      }, ms);
    };
    lookAfter(deadlineMs);
  };
  try {
    return await run({ signal: signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal, onStart });
  } catch (error) {
    if (deadline.signal.aborted && !signal?.aborted) {
      throw new UnsupportedContentError(`${refusal.what} too complex to extract: not done within ${deadlineMs / 1000} s${refusal.hint}`, null, { cause: error });
    }
    throw error;
  } finally {
    settled = true;
    clearTimeout(timer);
  }
}

const DOCUMENT_REFUSAL = { what: 'the document is', hint: ' (deeply nested markup?)' };
const PDF_IMAGES_REFUSAL = { what: "the PDF's images are", hint: ' (deeply nested forms?)' };

/**
 * Extraction in worker threads (one by default: one source's parse at a time, as on the API
 * thread before), started at the first document of IN_THREAD_BELOW_BYTES or more (or of deep
 * markup) or the first PDF's images. Each call has `deadlineMs`, past which it fails permanently
 * as too complex; a call whose signal aborts (its job's deadline) ends its worker, so a document
 * that never finishes parsing cannot hold a worker; `close` ends them all.
 */
export interface WorkerDocumentExtractorOptions {
  size?: number;
  resourceLimits?: ResourceLimits;
  inThreadBelowBytes?: number;
  /** One document's deadline in the worker, in its CPU time (withinDeadline); default EXTRACTION_DEADLINE_MS. */
  deadlineMs?: number;
}

export type WorkerDocumentExtractor = DocumentExtractor & { close(): Promise<void>; readonly workerCount: number };

export function createWorkerDocumentExtractor(options: WorkerDocumentExtractorOptions = {}): WorkerDocumentExtractor {
  const inThreadBelow = options.inThreadBelowBytes ?? IN_THREAD_BELOW_BYTES;
  const deadlineMs = options.deadlineMs ?? EXTRACTION_DEADLINE_MS;
  const closedError = (inFlight: boolean) => new Error(inFlight ? 'document extraction was closed during the call' : 'document extraction is closed');
  const pool = new WorkerPool<ExtractionCall>({
    entry: WORKER_ENTRY,
    name: 'factlog-extraction',
    size: options.size ?? 1,
    resourceLimits: { ...EXTRACTION_WORKER_LIMITS, ...options.resourceLimits },
    closedError,
    lostError: (cause) => new Error(`a document extraction worker stopped (${cause}); the call can be retried`),
    rebuildError: (error) => rebuildExtractionError(error as SerializedExtractionError),
  });
  /** A copy of just the body's bytes, to move rather than clone: a Buffer may view a larger pooled allocation. */
  const movable = (body: Uint8Array) => new Uint8Array(body);
  // Refused after close whichever thread would have done the work.
  const closed = () => Promise.reject(closedError(false));
  return {
    extract(input, signal) {
      if (pool.closed) return closed();
      // A PDF, however small, goes to the worker (as for its images, below): only there can the deadline end pdf.js.
      if (
        input.body.byteLength < inThreadBelow &&
        !startsWithPdfMagic(input.body) &&
        markupNesting(Buffer.from(input.body.buffer, input.body.byteOffset, input.body.byteLength).toString('latin1')) <= IN_THREAD_MAX_NESTING
      ) {
        return inThreadDocumentExtractor.extract(input, signal);
      }
      const body = movable(input.body);
      return withinDeadline(deadlineMs, signal, DOCUMENT_REFUSAL, (call) => pool.call<ExtractedDocument>({ method: 'extract', input: { ...input, body } }, { ...call, transfer: [body.buffer] }));
    },
    // Every PDF, however small, in the worker: a few kilobytes of nested forms expand to billions
    // of drawing operations, and only there can the deadline end the walk.
    async pdfImages(body, limits, signal) {
      if (pool.closed) return closed();
      const copy = movable(body);
      const images = await withinDeadline(deadlineMs, signal, PDF_IMAGES_REFUSAL, (call) =>
        pool.call<PdfImage[]>({ method: 'pdfImages', body: copy, limits }, { ...call, transfer: [copy.buffer] }),
      );
      // A Buffer crosses the thread as a plain Uint8Array: the caller gets Buffers, as from the thread.
      return images.map((image) => ({ ...image, png: Buffer.from(image.png.buffer, image.png.byteOffset, image.png.byteLength) }));
    },
    close: () => pool.close(),
    get workerCount() {
      return pool.workerCount;
    },
  };
}
