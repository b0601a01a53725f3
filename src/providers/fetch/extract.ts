import { decodeHTMLStrict } from 'entities';
import { MARKDOWN_INLINE_LINK, outsideCodeSpans, stripCodeAndEmphasis } from '../../domain/text.js';
import { htmlToDocument, separatesWords } from './html.js';
import { BINARY_CONTROLS, looksBinary, parseContentType, SNIFF_BYTES, startsWithPdfMagic, utf16Label } from './sniff.js';
import { pdfToDocument } from './pdf.js';
import {
  joinParagraphs,
  splitParagraphs,
  toAbsoluteHttpUrl,
  toIsoDate,
  UnsupportedContentError,
  type DocumentImage,
  type DocumentKind,
  type ExtractedDocument,
} from './document.js';

export { UnsupportedContentError, type ExtractedDocument, type DocumentImage, type DocumentKind } from './document.js';

export interface ExtractInput {
  body: Uint8Array;
  /** The Content-Type header or upload type, parameters (charset) included. */
  contentType?: string | null;
  /** Where the body came from: resolves relative links and gives an extension to go by. */
  url?: string | null;
  /** The uploaded file's name, for its extension. */
  filename?: string | null;
}

const HTML_TYPES = new Set(['text/html', 'application/xhtml+xml']);
const PDF_TYPES = new Set(['application/pdf', 'application/x-pdf', 'application/acrobat']);
const MARKDOWN_TYPES = new Set(['text/markdown', 'text/x-markdown']);
// Types that say nothing about the format: the extension or the bytes decide.
const GENERIC_TYPES = new Set([
  'application/octet-stream',
  'binary/octet-stream',
  'application/binary',
  'application/unknown',
  'application/download',
  'application/x-download',
  'application/force-download',
]);
const EXTENSION_KINDS: Readonly<Record<string, DocumentKind>> = {
  html: 'html',
  htm: 'html',
  xhtml: 'html',
  shtml: 'html',
  pdf: 'pdf',
  md: 'markdown',
  markdown: 'markdown',
  mdown: 'markdown',
  mkd: 'markdown',
  txt: 'text',
  text: 'text',
};

function extensionOf(name: string | null | undefined): string | null {
  if (!name) return null;
  let path = name;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(name)) {
    try {
      path = new URL(name).pathname;
    } catch {
      // Not a URL after all: read it as a path.
    }
  }
  const lastSegment = path.split(/[\\/]/).pop() ?? '';
  const dot = lastSegment.lastIndexOf('.');
  return dot > 0 || (dot === 0 && lastSegment.length > 1) ? lastSegment.slice(dot + 1).toLowerCase() : null;
}

function looksLikeHtml(body: Uint8Array): boolean {
  const head = Buffer.from(body.buffer, body.byteOffset, Math.min(body.byteLength, SNIFF_BYTES))
    .toString('latin1')
    .replace(/^\ufeff|^\u00ef\u00bb\u00bf/, '')
    .replace(/^(?:\s|<!--[\s\S]*?-->|<\?xml[^>]*>)*/, '')
    .toLowerCase();
  return /^<(?:!doctype html|html|head|body)[\s>]/.test(head);
}

/** Whether the bytes read as text: valid UTF-8 (or UTF-16 with a BOM) without binary control bytes. */
function looksLikeText(body: Uint8Array): boolean {
  if (body.byteLength === 0) return false;
  if (utf16Label(body)) return true;
  const sample = body.subarray(0, SNIFF_BYTES);
  let decoded: string;
  try {
    // stream: true tolerates a multi-byte character cut at the end of the sample.
    decoded = new TextDecoder('utf-8', { fatal: true }).decode(sample, { stream: true });
  } catch {
    return false;
  }
  return !BINARY_CONTROLS.test(decoded);
}


// WHATWG windows-1252 code points for bytes 0x80-0x9F; the rest of the range is Latin-1.
const WINDOWS_1252_HIGH_CONTROLS = [
  0x20ac, 0x81, 0x201a, 0x192, 0x201e, 0x2026, 0x2020, 0x2021, 0x2c6, 0x2030, 0x160, 0x2039, 0x152, 0x8d, 0x17d, 0x8f,
  0x90, 0x2018, 0x2019, 0x201c, 0x201d, 0x2022, 0x2013, 0x2014, 0x2dc, 0x2122, 0x161, 0x203a, 0x153, 0x9d, 0x17e, 0x178,
];

/**
 * Node 20's TextDecoder mangles windows-1252 (the encoding every `latin1`/`iso-8859-1` label
 * means on the web): it drops or passes through bytes 0x80-0x9F. So that one is decoded here.
 */
function decodeWindows1252(body: Uint8Array): string {
  const parts: string[] = [];
  const chunk: number[] = [];
  for (const byte of body) {
    chunk.push(byte >= 0x80 && byte <= 0x9f ? WINDOWS_1252_HIGH_CONTROLS[byte - 0x80]! : byte);
    if (chunk.length === 8192) parts.push(String.fromCharCode(...chunk.splice(0)));
  }
  parts.push(String.fromCharCode(...chunk));
  return parts.join('');
}

/**
 * Text in its declared charset, else UTF-8 when it is valid UTF-8, else windows-1252: the web's
 * default for text that declares nothing (WHATWG Encoding), which reads the Latin-1 and CP-1252
 * files that are most of the rest. Decoding those as UTF-8 turned "Gödel" into "G\uFFFDdel".
 */
function decodeText(body: Uint8Array, charset: string | null): string {
  const label = utf16Label(body) ?? charset ?? (isValidUtf8(body) ? 'utf-8' : 'windows-1252');
  let decoder: InstanceType<typeof TextDecoder>;
  try {
    decoder = new TextDecoder(label);
  } catch {
    // An unknown charset label: UTF-8 is right far more often than not.
    decoder = new TextDecoder('utf-8');
  }
  const text = decoder.encoding === 'windows-1252' ? decodeWindows1252(body) : decoder.decode(body);
  return text.replace(/\r\n?/g, '\n');
}

function isValidUtf8(body: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(body);
    return true;
  } catch {
    return false;
  }
}

/** An HTML page's own charset declaration (<meta charset> or http-equiv) from its first bytes. */
function declaredHtmlCharset(body: Uint8Array): string | null {
  const head = Buffer.from(body.buffer, body.byteOffset, Math.min(body.byteLength, SNIFF_BYTES)).toString('latin1');
  const match = /<meta[^>]+charset\s*=\s*["']?\s*([a-z0-9_:.-]+)/i.exec(head);
  return match?.[1] ?? null;
}

function describeType(mime: string | null, extension: string | null): string {
  if (mime && !GENERIC_TYPES.has(mime)) return mime;
  if (extension) return `${mime ?? 'untyped'} content with extension .${extension}`;
  return mime ?? 'untyped content';
}

/** Decides the format: the declared type, then the extension, then the bytes themselves. */
function detectKind(input: ExtractInput, mime: string | null): DocumentKind {
  const extension = extensionOf(input.filename) ?? extensionOf(input.url);
  const extensionKind = extension ? EXTENSION_KINDS[extension] : undefined;
  const isPdf = startsWithPdfMagic(input.body);
  // The PDF signature is unambiguous; it beats a wrong label (an HTML type on a PDF happens).
  if (isPdf) return 'pdf';
  if (mime && !GENERIC_TYPES.has(mime)) {
    if (HTML_TYPES.has(mime)) return 'html';
    if (MARKDOWN_TYPES.has(mime)) return 'markdown';
    // A PDF type over an HTML body is a publisher's login or error page.
    if (PDF_TYPES.has(mime)) return looksLikeHtml(input.body) ? 'html' : 'pdf';
    if (mime.startsWith('text/')) return extensionKind === 'markdown' ? 'markdown' : 'text';
    throw new UnsupportedContentError(`unsupported content type ${mime}: only HTML, PDF, Markdown and plain text can be read`, mime);
  }
  if (extensionKind) return extensionKind;
  if (looksLikeHtml(input.body)) return 'html';
  if (looksLikeText(input.body)) return 'text';
  const described = describeType(mime, extension);
  throw new UnsupportedContentError(`unsupported content (${described}): not recognisable as HTML, PDF, Markdown or text`, mime);
}

/**
 * Turns a fetched or uploaded body into text and Markdown. Throws UnsupportedContentError for
 * formats it cannot read and for documents without any text.
 */
export async function extractDocument(input: ExtractInput): Promise<ExtractedDocument> {
  const { mime, charset } = parseContentType(input.contentType);
  const kind = detectKind(input, mime);
  if (kind !== 'pdf' && looksBinary(input.body)) {
    throw new UnsupportedContentError(`binary content, not ${kind === 'text' ? 'plain text' : kind === 'html' ? 'HTML' : 'Markdown'}: ${describeType(mime, extensionOf(input.filename) ?? extensionOf(input.url))} holds control bytes`, mime);
  }
  const url = input.url ?? undefined;
  let document: ExtractedDocument;
  switch (kind) {
    case 'pdf':
      document = await pdfToDocument(input.body);
      break;
    case 'html':
      document = htmlToDocument(decodeText(input.body, charset ?? declaredHtmlCharset(input.body)), url);
      break;
    case 'markdown':
      document = markdownToDocument(decodeText(input.body, charset), url);
      break;
    case 'text':
      document = plainTextToDocument(decodeText(input.body, charset));
      break;
  }
  if (document.text.trim() === '') {
    throw new UnsupportedContentError(`no text: the ${kind} document contains no extractable text`, mime);
  }
  return document;
}

export function plainTextToDocument(text: string): ExtractedDocument {
  const cleaned = joinParagraphs(splitParagraphs(text.replace(/\u0000/g, '')));
  return { title: null, text: cleaned, markdown: cleaned, publishedAt: null, kind: 'text', images: [] };
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const ATX_HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const SETEXT_UNDERLINE = /^ {0,3}(?:=+|-+)[ \t]*$/;
const THEMATIC_BREAK = /^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const REFERENCE_DEFINITION = /^ {0,3}\[[^\]]+\]:\s*\S+/;
const HTML_COMMENT_BLOCK = /^ {0,3}<!--/;
const TABLE_DELIMITER_ROW = /^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?\s*$/;
// Groups: alt text, address, title (the image's caption).
const MARKDOWN_IMAGE = /!\[([^[\]]*)\]\(\s*<?([^()\s<>]+)>?(?:\s+["'(]([^()]*?)["')])?\s*\)/g;

interface FrontMatter {
  body: string;
  fields: Map<string, string>;
}

/** Splits off a YAML front-matter block; only flat `key: value` lines are read. */
function splitFrontMatter(markdown: string): FrontMatter {
  const fields = new Map<string, string>();
  const match = /^---\n([\s\S]*?)\n(?:---|\.\.\.)[ \t]*(?:\n|$)/.exec(markdown);
  if (!match) return { body: markdown, fields };
  for (const line of (match[1] ?? '').split('\n')) {
    const field = /^([A-Za-z_][\w-]*)\s*:\s*(.*)$/.exec(line);
    if (field?.[1] && field[2]) fields.set(field[1].toLowerCase(), field[2].trim().replace(/^["']|["']$/g, ''));
  }
  return { body: markdown.slice(match[0].length), fields };
}

/** A run of inline HTML tags with the spaces after each, and a tag's name. */
const HTML_TAG_RUN = /(?:<\/?[a-z][^<>]*>\s*)+/gi;
const HTML_TAG = /<\/?([a-z][a-z0-9-]*)[^<>]*>/gi;

/**
 * A run of HTML tags in a line of Markdown to the text it leaves: nothing for inline elements
 * (`un<em>sure</em>` is "unsure"), a space where an element is a block, line or cell of its own,
 * so `<p>one</p><p>two</p>` reads "one two", not "onetwo".
 */
function tagRunText(run: string, at: number, line: string): string {
  const separates = [...run.matchAll(HTML_TAG)].some((tag) => separatesWords((tag[1] ?? '').toUpperCase()));
  if (!separates) return run.replace(HTML_TAG, '');
  const edge = at === 0 || at + run.length === line.length || /\s/.test(line[at - 1] ?? '');
  return edge ? '' : ' ';
}

/** A line without its HTML comments; by `indexOf`, so an unclosed `<!--` costs one scan, not one per opener. */
function withoutHtmlComments(line: string): string {
  let text = '';
  let from = 0;
  for (;;) {
    const open = line.indexOf('<!--', from);
    const close = open === -1 ? -1 : line.indexOf('-->', open + 4);
    if (close === -1) return text + line.slice(from);
    text += line.slice(from, open);
    from = close + 3;
  }
}

/** A backslash escape (kept for the last step to undo) or an entity or numeric character reference. */
const ESCAPE_OR_REFERENCE = /\\[!-/:-@[-`{-~]|&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});/g;
/** What the steps after the references are decoded read as markup; a decoded one is escaped, so it stays text. */
const MARKUP_CHARACTER = /[\\`*_{}[\]()#+\-.!|>~]/g;

/**
 * Entity and numeric character references (`&amp;`, `&eacute;`, `&#39;`, `&#x263A;`) in Markdown
 * text, decoded as CommonMark has it: outside code spans (the caller's), not after a backslash
 * (`\&amp;` is the text "&amp;" as written), an unknown name kept as written, a code point that is
 * not a character U+FFFD, and a decoded character is text, never markup (`&#42;a&#42;` is "*a*").
 * The names are HTML's, read by `entities` (the decoder of linkedom's parser) in its strict mode: a
 * whole name with its semicolon, never a known prefix of one (`&notit;` stays as written).
 */
function decodeCharacterReferences(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(ESCAPE_OR_REFERENCE, (match) => {
    if (match.startsWith('\\')) return match;
    const decoded = decodeHTMLStrict(match);
    return decoded === match ? match : decoded.replace(MARKUP_CHARACTER, '\\$&');
  });
}

/**
 * Inline Markdown to its text. Every pattern is linear in the line: a bracket, parenthesis,
 * angle bracket or delimiter run ends what it may span. Patterns that let `[^\]]*` or `.+?` run
 * to the line's end cost the square of its length on input such as `[[[[…` or `**a **a …`: a
 * 256 KiB report or upload took seconds to minutes of a thread's time. Code spans and emphasis,
 * which no such pattern reads right when nested or holding a backtick, go by stripCodeAndEmphasis.
 */
function stripInlineMarkdown(line: string): string {
  // Code spans first: what is between backticks is text, links and tags included.
  // References last, so what they decode to is never read as a link or a tag.
  const withoutLinksAndTags = outsideCodeSpans(line, (text) =>
    decodeCharacterReferences(
      withoutHtmlComments(text)
      .replace(MARKDOWN_IMAGE, '$1')
      .replace(MARKDOWN_INLINE_LINK, '$1')
      .replace(/\[([^[\]]+)\]\[[^[\]]*\]/g, '$1') // reference links
      .replace(/\[\^[^[\]]+\]/g, '') // footnote references
      .replace(/<((?:https?|mailto):[^<>\s]+)>/gi, '$1') // autolinks
      .replace(HTML_TAG_RUN, tagRunText),
    ),
  );
  return stripCodeAndEmphasis(withoutLinksAndTags)
    .replace(/~~(?=[^\s~])([^~]+?)(?<=\S)~~/g, '$1')
    .replace(/\\([\\`*_{}[\]()#+\-.!|>~])/g, '$1');
}

/** Markdown to plain text: block syntax removed line by line, code kept verbatim. */
function markdownToPlainText(markdown: string): string {
  const paragraphs: string[] = [];
  let lines: string[] = [];
  let openFence: string | null = null;
  // In an HTML comment that started a line and is not closed on it (CommonMark's HTML block 2).
  let inComment = false;
  const finishParagraph = (): void => {
    if (lines.length > 0) paragraphs.push(lines.join('\n'));
    lines = [];
  };
  for (const rawLine of markdown.split('\n')) {
    if (inComment) {
      inComment = !rawLine.includes('-->');
      continue;
    }
    const fence = FENCE.exec(rawLine);
    if (openFence !== null) {
      if (fence?.[1] && fence[1][0] === openFence[0] && fence[1].length >= openFence.length && rawLine.trim() === fence[1]) {
        openFence = null;
        finishParagraph();
      } else {
        lines.push(rawLine);
      }
      continue;
    }
    if (fence?.[1]) {
      finishParagraph();
      openFence = fence[1];
      continue;
    }
    let line = rawLine;
    if (line.trim() === '') {
      finishParagraph();
      continue;
    }
    const comment = HTML_COMMENT_BLOCK.exec(line);
    if (comment && !line.includes('-->', comment[0].length)) {
      finishParagraph();
      inComment = true;
      continue;
    }
    const tableDelimiter = TABLE_DELIMITER_ROW.test(line) && line.includes('|');
    if (REFERENCE_DEFINITION.test(line) || tableDelimiter) continue;
    // A setext underline under text, or a rule on its own: neither is text.
    if ((SETEXT_UNDERLINE.test(line) && lines.length > 0) || THEMATIC_BREAK.test(line)) {
      if (lines.length > 0) finishParagraph();
      continue;
    }
    const heading = ATX_HEADING.exec(line);
    if (heading) {
      finishParagraph();
      lines.push(stripInlineMarkdown(heading[2] ?? ''));
      finishParagraph();
      continue;
    }
    line = line.replace(/^ {0,3}(?:>[ \t]?)+/, ''); // blockquote markers
    line = line.replace(/^\s*(?:[-*+]|\d{1,9}[.)])[ \t]+(?:\[[ xX]\][ \t]+)?/, ''); // list markers, task boxes
    if (/^\s*\|.*\|\s*$/.test(line)) {
      line = line.trim().replace(/^\||\|$/g, '').split('|').map((cell) => cell.trim()).join(' | ');
    }
    lines.push(stripInlineMarkdown(line).trim());
  }
  finishParagraph();
  return joinParagraphs(paragraphs);
}

function markdownTitle(markdown: string): string | null {
  let openFence: string | null = null;
  let previous = '';
  for (const line of markdown.split('\n')) {
    const fence = FENCE.exec(line);
    if (openFence !== null) {
      if (fence?.[1] && fence[1][0] === openFence[0]) openFence = null;
      continue;
    }
    if (fence?.[1]) {
      openFence = fence[1];
      continue;
    }
    const heading = ATX_HEADING.exec(line);
    if (heading && heading[1] === '#' && heading[2]) return stripInlineMarkdown(heading[2]).trim() || null;
    if (/^ {0,3}=+[ \t]*$/.test(line) && previous.trim() !== '') return stripInlineMarkdown(previous).trim() || null;
    previous = line;
  }
  return null;
}

function markdownImages(markdown: string, url: string | undefined): DocumentImage[] {
  const images: DocumentImage[] = [];
  const seen = new Set<string>();
  for (const match of markdown.matchAll(MARKDOWN_IMAGE)) {
    const reference = (match[2] ?? '').trim();
    const absolute = reference.startsWith('data:') ? reference : toAbsoluteHttpUrl(reference, url);
    if (!absolute || seen.has(absolute)) continue;
    seen.add(absolute);
    images.push({ url: absolute, altText: (match[1] ?? '').trim(), caption: match[3]?.trim() || null });
  }
  return images;
}

/** A Markdown file: the Markdown is kept (front matter aside), the text is its plain reading. */
export function markdownToDocument(markdown: string, url?: string): ExtractedDocument {
  const { body, fields } = splitFrontMatter(markdown.replace(/\r\n?/g, '\n').replace(/^\ufeff/, ''));
  // Trailing spaces are Markdown (a hard break), so only blank edges go.
  const kept = body.replace(/^(?:[ \t]*\n)+/, '').trimEnd();
  return {
    title: markdownTitle(kept) ?? (fields.get('title') || null),
    text: markdownToPlainText(kept),
    markdown: kept,
    publishedAt: toIsoDate(fields.get('date') ?? fields.get('published') ?? fields.get('published_at')),
    kind: 'markdown',
    images: markdownImages(kept, url),
  };
}
