import type { TextItem, TextMarkedContent } from 'pdfjs-dist/types/src/display/api.js';

import { headOfRunes } from '../../util/codePoints.js';
import { joinParagraphs, UnsupportedContentError, type ExtractedDocument } from './document.js';
import { errorMessage } from '../../util/errorMessage.js';

/** A pdf.js text item; `transform` is [scaleX, skewY, skewX, scaleY, x, y]. */
type PositionedText = TextItem;

// A vertical gap this many font heights or more between two lines starts a new paragraph
// (body text is usually set at 1.2 to 1.4 heights per line).
const PARAGRAPH_GAP_IN_FONT_HEIGHTS = 1.7;
// A horizontal gap this wide (in font heights) between two pieces of text is a word space.
const WORD_GAP_IN_FONT_HEIGHTS = 0.15;
const MAX_TITLE_CHARS = 300;

function isPositionedText(item: TextItem | TextMarkedContent): item is PositionedText {
  return 'str' in item;
}

function fontHeight(item: PositionedText): number {
  const [, , skewX = 0, scaleY = 0] = item.transform;
  return Math.hypot(skewX, scaleY) || item.height || 1;
}

/** Joins a page's text items into lines, and lines separated by a wide gap into paragraphs. */
function pageParagraphs(items: PositionedText[]): string[] {
  const paragraphs: string[] = [];
  let lines: string[] = [];
  let line = '';
  let previous: { x: number; y: number; endX: number; height: number } | null = null;
  let lastLineY: number | null = null;
  let lastLineHeight = 0;

  const finishLine = (): void => {
    if (line.trim() !== '') lines.push(line.replace(/\s+/g, ' ').trim());
    line = '';
  };
  const finishParagraph = (): void => {
    finishLine();
    if (lines.length > 0) paragraphs.push(lines.join('\n'));
    lines = [];
  };

  for (const item of items) {
    const x = item.transform[4] ?? 0;
    const y = item.transform[5] ?? 0;
    const height = fontHeight(item);
    if (item.str !== '') {
      if (previous && Math.abs(y - previous.y) > Math.max(previous.height, height) * 0.5) {
        finishLine();
      }
      if (line === '' && lastLineY !== null) {
        const gap = Math.abs(lastLineY - y);
        if (gap >= Math.max(lastLineHeight, height) * PARAGRAPH_GAP_IN_FONT_HEIGHTS) finishParagraph();
      }
      if (line !== '' && previous && !/\s$/.test(line) && !/^\s/.test(item.str) && x - previous.endX > height * WORD_GAP_IN_FONT_HEIGHTS) {
        line += ' ';
      }
      if (line === '') {
        lastLineY = y;
        lastLineHeight = height;
      }
      line += item.str;
      previous = { x, y, endX: x + item.width, height };
    }
    if (item.hasEOL) finishLine();
  }
  finishParagraph();
  return paragraphs;
}

function metadataTitle(info: unknown, xmpTitle: string | null): string | null {
  const infoTitle = typeof info === 'object' && info !== null && 'Title' in info ? info.Title : null;
  for (const candidate of [infoTitle, xmpTitle]) {
    if (typeof candidate === 'string' && candidate.trim() !== '') return candidate.replace(/\s+/g, ' ').trim();
  }
  return null;
}

function describeLoadError(error: unknown): string {
  const name = error instanceof Error ? error.name : '';
  const message = errorMessage(error);
  if (name === 'PasswordException') return 'the PDF is encrypted with a password';
  if (name === 'InvalidPDFException') return `the PDF is corrupt or not a PDF (${message})`;
  return `the PDF could not be read (${message})`;
}

/**
 * Extracts the text of a PDF: items become lines, widely spaced lines and pages become
 * paragraphs. The title is the metadata Title, else the first line. pdf.js runs in-process
 * (its fake worker), with no eval, no font loading and no network.
 */
type Pdfjs = typeof import('pdfjs-dist/legacy/build/pdf.mjs');
let pdfjs: Promise<Pdfjs> | null = null;

/**
 * pdf.js, loaded with the first PDF: its module costs about 27 MB of memory, which a service that
 * ingests no PDF need not hold (docs/performance.md, "Sixth round").
 */
export function loadPdfjs(): Promise<Pdfjs> {
  pdfjs ??= import('pdfjs-dist/legacy/build/pdf.mjs');
  return pdfjs;
}

/**
 * Opens a PDF with pdf.js in-process (its fake worker): no eval, no font loading, no network,
 * no canvas or image decoder. A file pdf.js cannot open is UnsupportedContentError. The caller
 * destroys the loading task when done.
 */
export async function openPdf(bytes: Uint8Array) {
  const { getDocument, VerbosityLevel } = await loadPdfjs();
  const loadingTask = getDocument({
    // A copy, because pdf.js rejects Node Buffers and may take ownership of the array.
    data: new Uint8Array(bytes),
    isEvalSupported: false,
    disableFontFace: true,
    useSystemFonts: false,
    useWorkerFetch: false,
    disableAutoFetch: true,
    disableStream: true,
    disableRange: true,
    isOffscreenCanvasSupported: false,
    isImageDecoderSupported: false,
    verbosity: VerbosityLevel.ERRORS,
  });
  try {
    return { loadingTask, pdf: await loadingTask.promise };
  } catch (error) {
    await loadingTask.destroy();
    throw new UnsupportedContentError(describeLoadError(error), 'application/pdf', { cause: error });
  }
}

export async function pdfToDocument(bytes: Uint8Array): Promise<ExtractedDocument> {
  const { loadingTask, pdf } = await openPdf(bytes);
  try {
    try {
      const paragraphs: string[] = [];
      for (let pageNumber = 1; pageNumber <= pdf.numPages; pageNumber += 1) {
        const page = await pdf.getPage(pageNumber);
        const content = await page.getTextContent();
        paragraphs.push(...pageParagraphs(content.items.filter(isPositionedText)));
        page.cleanup();
      }
      const text = joinParagraphs(paragraphs);
      const metadata = await pdf.getMetadata().catch(() => null);
      const xmpTitle = metadata?.metadata?.get('dc:title') ?? null;
      // Counted in characters, and never cut inside one: half an emoji (a lone surrogate) is no Unicode.
      const firstLine = headOfRunes(text.split('\n', 1)[0]?.trim() ?? '', MAX_TITLE_CHARS) || null;
      return {
        title: metadataTitle(metadata?.info, typeof xmpTitle === 'string' ? xmpTitle : null) ?? firstLine,
        text,
        markdown: text,
        // A PDF states no publication date; CreationDate is when the file was made.
        publishedAt: null,
        kind: 'pdf',
        images: [],
      };
    } catch (error) {
      throw new UnsupportedContentError(describeLoadError(error), 'application/pdf', { cause: error });
    }
  } finally {
    await loadingTask.destroy();
  }
}
