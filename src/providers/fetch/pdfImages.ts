import { createHash } from 'node:crypto';

import { PNG } from 'pngjs';

import { loadPdfjs, openPdf } from './pdf.js';

/** A raster image drawn on a PDF page, re-encoded as PNG. */
export interface PdfImage {
  /** 1-based page the image is first drawn on. */
  page: number;
  width: number;
  height: number;
  png: Buffer;
}

export interface PdfImageLimits {
  /** Images whose PNG is larger are skipped. */
  maxImageBytes: number;
  /** At most this many images are returned (the first ones in page order). */
  maxImages: number;
  /** Images narrower or lower than this many pixels (rules, bullets, spacers) are skipped. */
  minDimension?: number;
  /** PNGs smaller than this are skipped: a flat colour block carries nothing. */
  minBytes?: number;
}

/** The decoded form pdf.js hands out for an image XObject (`page.objs`). */
interface DecodedPdfImage {
  width: number;
  height: number;
  kind?: number;
  data?: Uint8Array | Uint8ClampedArray;
}

export const DEFAULT_MIN_IMAGE_DIMENSION = 16;
export const DEFAULT_MIN_IMAGE_BYTES = 1024;
// Pixel budget of one decoded image (about 64 MiB of RGBA): larger ones are skipped before encoding.
const MAX_PIXELS = 16_000_000;
// How long to wait for pdf.js to resolve one image object.
const OBJECT_TIMEOUT_MS = 10_000;

/** Expands pdf.js image data (1-bit grey, RGB or RGBA; `ImageKind`, pdf.js's names of them) to RGBA, as pngjs wants it. */
function toRgba(image: DecodedPdfImage, ImageKind: Awaited<ReturnType<typeof loadPdfjs>>['ImageKind']): Buffer | null {
  const { width, height, data } = image;
  if (!data) return null;
  const pixels = width * height;
  const rgba = Buffer.alloc(pixels * 4);
  switch (image.kind) {
    case ImageKind.RGBA_32BPP:
      if (data.length < pixels * 4) return null;
      rgba.set(data.subarray(0, pixels * 4));
      return rgba;
    case ImageKind.RGB_24BPP:
      if (data.length < pixels * 3) return null;
      for (let pixel = 0; pixel < pixels; pixel += 1) {
        rgba[pixel * 4] = data[pixel * 3]!;
        rgba[pixel * 4 + 1] = data[pixel * 3 + 1]!;
        rgba[pixel * 4 + 2] = data[pixel * 3 + 2]!;
        rgba[pixel * 4 + 3] = 255;
      }
      return rgba;
    case ImageKind.GRAYSCALE_1BPP: {
      // Rows are packed 8 pixels a byte, most significant bit first; a set bit is white.
      const rowBytes = (width + 7) >> 3;
      if (data.length < rowBytes * height) return null;
      for (let y = 0; y < height; y += 1) {
        for (let x = 0; x < width; x += 1) {
          const bit = (data[y * rowBytes + (x >> 3)]! >> (7 - (x & 7))) & 1;
          const value = bit ? 255 : 0;
          const offset = (y * width + x) * 4;
          rgba[offset] = value;
          rgba[offset + 1] = value;
          rgba[offset + 2] = value;
          rgba[offset + 3] = 255;
        }
      }
      return rgba;
    }
    default:
      return null;
  }
}

function isDecodedImage(value: unknown): value is DecodedPdfImage {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { width?: unknown }).width === 'number' &&
    typeof (value as { height?: unknown }).height === 'number'
  );
}

/** Resolves a named image object of a page (page-local, or document-wide when pdf.js shares it). */
function resolveObject(
  page: { objs: { get(name: string, callback: (data: unknown) => void): unknown }; commonObjs: { get(name: string, callback: (data: unknown) => void): unknown } },
  name: string,
): Promise<unknown> {
  const objects = name.startsWith('g_') ? page.commonObjs : page.objs;
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), OBJECT_TIMEOUT_MS);
    try {
      objects.get(name, (data) => {
        clearTimeout(timer);
        resolve(data);
      });
    } catch {
      clearTimeout(timer);
      resolve(null);
    }
  });
}

/**
 * The raster images a PDF draws (image XObjects and inline images, via each page's operator
 * list), in page order, each re-encoded as PNG. An image drawn twice (or two copies of the same
 * pixels) is returned once; image masks (stencils) are not images of their own. Within the limits: too large, too small or
 * undecodable images are skipped, and the walk stops at `maxImages`.
 */
export async function extractPdfImages(bytes: Uint8Array, limits: PdfImageLimits, signal?: AbortSignal): Promise<PdfImage[]> {
  const minDimension = limits.minDimension ?? DEFAULT_MIN_IMAGE_DIMENSION;
  const minBytes = limits.minBytes ?? DEFAULT_MIN_IMAGE_BYTES;
  const images: PdfImage[] = [];
  if (limits.maxImages <= 0) return images;
  const { ImageKind, OPS } = await loadPdfjs();
  const { loadingTask, pdf } = await openPdf(bytes);
  try {
    const seen = new Set<string>();
    const seenPngs = new Set<string>();
    for (let pageNumber = 1; pageNumber <= pdf.numPages && images.length < limits.maxImages; pageNumber += 1) {
      signal?.throwIfAborted();
      const page = await pdf.getPage(pageNumber);
      const operators = await page.getOperatorList();
      for (let index = 0; index < operators.fnArray.length && images.length < limits.maxImages; index += 1) {
        const operator = operators.fnArray[index];
        // pdf.js types operator arguments as any[]; the shapes are documented per operator.
        const args = operators.argsArray[index] as unknown[] | null;
        let decoded: unknown = null;
        if (operator === OPS.paintImageXObject || operator === OPS.paintImageXObjectRepeat) {
          const name = args?.[0];
          if (typeof name !== 'string' || seen.has(name)) continue;
          seen.add(name);
          decoded = await resolveObject(page, name);
        } else if (operator === OPS.paintInlineImageXObject) {
          decoded = args?.[0];
        } else {
          continue;
        }
        if (!isDecodedImage(decoded)) continue;
        if (decoded.width < minDimension || decoded.height < minDimension) continue;
        if (decoded.width * decoded.height > MAX_PIXELS) continue;
        const rgba = toRgba(decoded, ImageKind);
        if (!rgba) continue;
        // PNG.sync.write reads only width, height and data of its PNG argument.
        const png = PNG.sync.write({ width: decoded.width, height: decoded.height, data: rgba } as PNG, { colorType: 6 });
        if (png.length > limits.maxImageBytes || png.length < minBytes) continue;
        const digest = createHash('sha256').update(png).digest('hex');
        if (seenPngs.has(digest)) continue;
        seenPngs.add(digest);
        images.push({ page: pageNumber, width: decoded.width, height: decoded.height, png });
      }
      page.cleanup();
    }
    return images;
  } finally {
    await loadingTask.destroy();
  }
}
