import { createHash } from 'node:crypto';

import type { DocumentImage, DocumentKind } from './document.js';
import type { FetchedResource, FetchSettings } from './http.js';
import { DEFAULT_MIN_IMAGE_BYTES, DEFAULT_MIN_IMAGE_DIMENSION, extractPdfImages, type PdfImage, type PdfImageLimits } from './pdfImages.js';

/** The spec's `providers.decomposition.image_extraction`. */
export interface ImageLimits {
  /** Images larger than this are skipped (5242880). */
  maxImageBytes: number;
  /** At most this many images are kept per source (20). */
  maxImagesPerSource: number;
}

export const DEFAULT_IMAGE_LIMITS: Readonly<ImageLimits> = Object.freeze({ maxImageBytes: 5_242_880, maxImagesPerSource: 20 });

/** An image of a source, with its bytes, ready for the asset store. */
export interface SourceImage {
  bytes: Buffer;
  sha256: string;
  contentType: string;
  /** Where it came from: the absolute http(s) URL; null for inline (`data:`) and PDF images. */
  url: string | null;
  altText: string | null;
  caption: string | null;
}

export interface ImageFetcher {
  fetch(url: string, signal?: AbortSignal): Promise<FetchedResource>;
}

export interface CollectImagesInput {
  kind: DocumentKind;
  /** The source body (read for PDF images). */
  body: Uint8Array;
  /** The images the document references (HTML and Markdown). */
  images: readonly DocumentImage[];
  limits: ImageLimits;
  /** Fetches referenced images; without one only inline images are kept. */
  fetcher?: ImageFetcher | null;
  /** Reads a PDF's raster images; default `extractPdfImages` on the calling thread (the service: DocumentExtractor's worker). */
  pdfImages?: (body: Uint8Array, limits: PdfImageLimits, signal?: AbortSignal) => Promise<PdfImage[]>;
  signal?: AbortSignal;
}

/**
 * Settings of the fetcher for a page's images: the page fetcher's, with the body limit of an
 * image and without the in-process auto-skip (a page's broken images say nothing about whether
 * the host serves sources; host health is kept per source, from the log).
 */
export function imageFetchSettings(settings: FetchSettings, limits: ImageLimits): FetchSettings {
  return { ...settings, maxBodyBytes: limits.maxImageBytes, autoSkip: { ...settings.autoSkip, enabled: false } };
}

// Images fetched in parallel for one source.
const FETCH_CONCURRENCY = 4;
// Referenced images tried per kept image at most: a page of 500 broken images costs 4 × the cap.
const CANDIDATES_PER_KEPT_IMAGE = 4;

/** The raster formats a vision model takes, recognised by their first bytes. */
export function sniffImageType(bytes: Uint8Array): string | null {
  const starts = (...signature: number[]) => signature.every((byte, index) => bytes[index] === byte);
  if (starts(0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a)) return 'image/png';
  if (starts(0xff, 0xd8, 0xff)) return 'image/jpeg';
  if (starts(0x47, 0x49, 0x46, 0x38)) return 'image/gif';
  if (starts(0x52, 0x49, 0x46, 0x46) && bytes[8] === 0x57 && bytes[9] === 0x45 && bytes[10] === 0x42 && bytes[11] === 0x50) return 'image/webp';
  return null;
}

/** Decodes a `data:` URI (base64 or percent-encoded); null when malformed. */
export function decodeDataUri(uri: string): Buffer | null {
  const match = /^data:([^,]*),(.*)$/is.exec(uri);
  if (!match) return null;
  const parameters = (match[1] ?? '').split(';').map((part) => part.trim().toLowerCase());
  const payload = match[2] ?? '';
  try {
    return parameters.includes('base64') ? Buffer.from(payload.replace(/\s+/g, ''), 'base64') : Buffer.from(decodeURIComponent(payload), 'latin1');
  } catch {
    return null;
  }
}

function sha256Of(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** Whether an image is worth keeping: within the size limit, not a tracking pixel or icon, a raster format. */
function isKeepable(bytes: Uint8Array, limits: ImageLimits): boolean {
  return bytes.length <= limits.maxImageBytes && bytes.length >= DEFAULT_MIN_IMAGE_BYTES && sniffImageType(bytes) !== null;
}

/** Reads one referenced image; null when it cannot be had or is not fit to keep. */
async function loadReferencedImage(image: DocumentImage, input: CollectImagesInput): Promise<SourceImage | null> {
  let bytes: Buffer | null;
  let url: string | null = null;
  if (image.url.startsWith('data:')) {
    bytes = decodeDataUri(image.url);
  } else {
    if (!input.fetcher) return null;
    url = image.url;
    try {
      bytes = (await input.fetcher.fetch(image.url, input.signal)).body;
    } catch (error) {
      // An image that cannot be fetched does not fail its source; an abort still ends the job.
      if (input.signal?.aborted) throw error;
      return null;
    }
  }
  if (!bytes || !isKeepable(bytes, input.limits)) return null;
  return {
    bytes,
    sha256: sha256Of(bytes),
    contentType: sniffImageType(bytes) ?? 'application/octet-stream',
    url,
    altText: image.altText || null,
    caption: image.caption,
  };
}

/**
 * The images of a source, in document order, within the limits: HTML and Markdown images
 * (fetched, or decoded from `data:` URIs) and a PDF's raster images (as PNG). Images over
 * `maxImageBytes`, under 1 KiB (tracking pixels, icons), not in a raster format, or that fail
 * to load are skipped; the same bytes are kept once; at most `maxImagesPerSource` are kept.
 */
export async function collectSourceImages(input: CollectImagesInput): Promise<SourceImage[]> {
  const { limits } = input;
  if (limits.maxImagesPerSource <= 0) return [];
  if (input.kind === 'pdf') {
    const pdfImages = await (input.pdfImages ?? extractPdfImages)(
      input.body,
      { maxImageBytes: limits.maxImageBytes, maxImages: limits.maxImagesPerSource, minDimension: DEFAULT_MIN_IMAGE_DIMENSION },
      input.signal,
    );
    return dedupe(
      pdfImages.map((image) => ({ bytes: image.png, sha256: sha256Of(image.png), contentType: 'image/png', url: null, altText: null, caption: null })),
      limits.maxImagesPerSource,
    );
  }

  const candidates = input.images.slice(0, limits.maxImagesPerSource * CANDIDATES_PER_KEPT_IMAGE);
  const kept: SourceImage[] = [];
  const seen = new Set<string>();
  // Batches keep document order and stop fetching once the cap is reached.
  for (let start = 0; start < candidates.length && kept.length < limits.maxImagesPerSource; start += FETCH_CONCURRENCY) {
    input.signal?.throwIfAborted();
    const batch = candidates.slice(start, start + FETCH_CONCURRENCY);
    const loaded = await Promise.all(batch.map((image) => loadReferencedImage(image, input)));
    for (const image of loaded) {
      if (!image || seen.has(image.sha256) || kept.length >= limits.maxImagesPerSource) continue;
      seen.add(image.sha256);
      kept.push(image);
    }
  }
  return kept;
}

function dedupe(images: SourceImage[], cap: number): SourceImage[] {
  const seen = new Set<string>();
  const kept: SourceImage[] = [];
  for (const image of images) {
    if (seen.has(image.sha256) || kept.length >= cap) continue;
    seen.add(image.sha256);
    kept.push(image);
  }
  return kept;
}

/**
 * The image's id within its source: derived from its position and bytes, so a re-fetch of an
 * unchanged source gives the same ids (and its image facts the same content).
 */
export function imageIdFor(position: number, sha256: string): string {
  return `img-${position}-${sha256.slice(0, 16)}`;
}
