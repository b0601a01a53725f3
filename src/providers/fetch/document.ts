/** The parsed form of a fetched or uploaded source, whatever its original format. */
export interface ExtractedDocument {
  title: string | null;
  /** Plain text; paragraphs are separated by one blank line. */
  text: string;
  markdown: string;
  /** Publication date as YYYY-MM-DD, when the document states one. */
  publishedAt: string | null;
  kind: DocumentKind;
  /**
   * Images inline in the document body, in document order: http(s) URLs made absolute and
   * `data:` URIs. Tracking pixels (a declared width or height under 16 px) are left out.
   */
  images: DocumentImage[];
}

export type DocumentKind = 'html' | 'pdf' | 'markdown' | 'text';

export interface DocumentImage {
  /** Absolute http(s) URL, or the `data:` URI of an inline image. */
  url: string;
  altText: string;
  /** The caption of the image's <figure> (or Markdown image title), when any. */
  caption: string | null;
}

/**
 * The content cannot be turned into text: an unsupported type (image, archive, unknown
 * binary), a corrupt file, or a document without any text. Retrying never helps.
 */
export class UnsupportedContentError extends Error {
  override readonly name = 'UnsupportedContentError';
  /** Read by the job runtime: never retry. */
  readonly permanent = true;
  /** The MIME type (or a description of the format) that was rejected, when known. */
  readonly contentType: string | null;

  constructor(message: string, contentType: string | null = null, options?: { cause?: unknown }) {
    super(message, options);
    this.contentType = contentType;
  }
}

const LEADING_DATE = /^\s*(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d])/;
const COMPACT_DATE = /^\s*(\d{4})(\d{2})(\d{2})(?:$|[T\s])/;

/**
 * Reads the calendar date a publisher wrote: `2024-03-01`, `2024/3/1`, `20240301` or an ISO
 * timestamp. A timestamp keeps the date as written in its own zone (a page published late on
 * 1 March in New York says 1 March, not 2 March UTC). Partial dates (`2024`, `2024-03`) and
 * impossible dates give null rather than an invented day.
 */
export function toIsoDate(value: string | null | undefined): string | null {
  if (!value) return null;
  const match = LEADING_DATE.exec(value) ?? COMPACT_DATE.exec(value);
  if (!match) return null;
  const year = Number(match[1]);
  const month = Number(match[2]);
  const day = Number(match[3]);
  const probe = new Date(Date.UTC(year, month - 1, day));
  if (probe.getUTCFullYear() !== year || probe.getUTCMonth() !== month - 1 || probe.getUTCDate() !== day) {
    return null;
  }
  return `${String(year).padStart(4, '0')}-${String(month).padStart(2, '0')}-${String(day).padStart(2, '0')}`;
}

/**
 * Separates paragraphs by exactly one blank line. Trailing whitespace of every line goes, and
 * so do empty lines inside a paragraph and empty paragraphs; leading indentation is kept.
 */
export function joinParagraphs(paragraphs: Iterable<string>): string {
  const kept: string[] = [];
  for (const paragraph of paragraphs) {
    const cleaned = paragraph
      .split('\n')
      .map((line) => line.trimEnd())
      .filter((line) => line.trim() !== '')
      .join('\n');
    if (cleaned !== '') kept.push(cleaned);
  }
  return kept.join('\n\n');
}

/** Splits text on blank lines (after normalising line endings) into paragraphs. */
export function splitParagraphs(text: string): string[] {
  return text.replace(/\r\n?/g, '\n').split(/\n[ \t\f\v]*\n/);
}

/** Resolves `reference` against `base` and keeps it only if it is an http(s) URL. */
export function toAbsoluteHttpUrl(reference: string, base?: string | null): string | null {
  const trimmed = reference.trim();
  if (trimmed === '') return null;
  try {
    const resolved = base ? new URL(trimmed, base) : new URL(trimmed);
    return resolved.protocol === 'http:' || resolved.protocol === 'https:' ? resolved.href : null;
  } catch {
    return null;
  }
}
