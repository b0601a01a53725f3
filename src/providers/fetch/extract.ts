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

function plainTextToDocument(text: string): ExtractedDocument {
  const cleaned = joinParagraphs(splitParagraphs(text.replace(/\u0000/g, '')));
  return { title: null, text: cleaned, markdown: cleaned, publishedAt: null, kind: 'text', images: [] };
}

/** A code fence's mark: it may stand three columns at most past the content of the list item it is in (fenceOf). */
const FENCE = /^[ \t]*(`{3,}|~{3,})/;
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

/** A run of inline HTML tags with the spaces after each (on their line), and a tag's name. */
const HTML_TAG_RUN = /(?:<\/?[a-z][^<>]*>[^\S\n]*)+/gi;
const HTML_TAG = /<\/?([a-z][a-z0-9-]*)[^<>]*>/gi;

/**
 * A run of HTML tags in Markdown to the text it leaves: nothing for inline elements
 * (`un<em>sure</em>` is "unsure"), a space where an element is a block, line or cell of its own,
 * so `<p>one</p><p>two</p>` reads "one two", not "onetwo" (none at a line's edge).
 */
function tagRunText(run: string, at: number, text: string): string {
  const separates = [...run.matchAll(HTML_TAG)].some((tag) => separatesWords((tag[1] ?? '').toUpperCase()));
  if (!separates) return run.replace(HTML_TAG, '');
  const end = at + run.length;
  const edge = at === 0 || end === text.length || text[end] === '\n' || /\s/.test(text[at - 1] ?? '');
  return edge ? '' : ' ';
}

/** Text without its HTML comments; by `indexOf`, so an unclosed `<!--` costs one scan, not one per opener. */
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

/** An entity or numeric character reference. */
const CHARACTER_REFERENCE = /&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});/g;
/** What stripCodeAndEmphasis, the step after the references are decoded, reads as markup; a decoded one is escaped, so it stays text. */
const MARKUP_CHARACTER = /[\\`*_]/g;

/**
 * Entity and numeric character references (`&amp;`, `&eacute;`, `&#39;`, `&#x263A;`) in Markdown
 * text, decoded as CommonMark has it: outside code spans and not after a backslash (both held by the
 * caller: `\&amp;` is the text "&amp;"), an unknown name kept as written, a code point that is not a
 * character U+FFFD, and a decoded character is text, never markup (`&#42;a&#42;` is "*a*").
 * The names are HTML's, read by `entities` (the decoder of linkedom's parser) in its strict mode: a
 * whole name with its semicolon, never a known prefix of one (`&notit;` stays as written).
 */
function decodeCharacterReferences(text: string): string {
  if (!text.includes('&')) return text;
  return text.replace(CHARACTER_REFERENCE, (match) => {
    const decoded = decodeHTMLStrict(match);
    return decoded === match ? match : decoded.replace(MARKUP_CHARACTER, '\\$&');
  });
}

/**
 * Inline Markdown (a line, or the lines of one paragraph) to its text. Every pattern is linear in
 * the text: a bracket, parenthesis, angle bracket or delimiter run ends what it may span. Patterns
 * that let `[^\]]*` or `.+?` run to the end cost the square of its length on input such as `[[[[…`
 * or `**a **a …`: a 256 KiB report or upload took seconds to minutes of a thread's time. Code spans
 * and emphasis, which no such pattern reads right when nested or holding a backtick, go by
 * stripCodeAndEmphasis.
 *
 * Backslash escapes follow one rule, CommonMark's: before an ASCII punctuation character, outside a
 * code span, the backslash goes and the character is text (`\*a\*` is "*a*", `\[a\](b)` no link,
 * `\&amp;` the text "&amp;", `\\` one backslash); in a code span, and in code blocks (which are
 * not read here), a backslash is text.
 */
function stripInlineMarkdown(markdown: string): string {
  // Code spans and escapes are held first: what is between backticks, or escaped, is text, links
  // and tags included. References last, so what they decode to is never read as a link or a tag.
  const withoutLinksAndTags = outsideCodeSpans(markdown, (text) =>
    decodeCharacterReferences(
      // Images before links, so a link whose text is an image (a badge) is a link with text.
      withoutHtmlComments(text)
        .replace(MARKDOWN_IMAGE, '$1')
        .replace(/!\[([^[\]]*)\]\[[^[\]]*\]/g, '$1') // reference images
        .replace(MARKDOWN_INLINE_LINK, '$1')
        .replace(/\[([^[\]]+)\]\[[^[\]]*\]/g, '$1') // reference links
        .replace(/\[\^[^[\]]+\]/g, '') // footnote references
        .replace(/<((?:https?|mailto):[^<>\s]+)>/gi, '$1') // autolinks
        .replace(HTML_TAG_RUN, tagRunText)
        .replace(/~~(?=[^\s~])([^~]+?)(?<=\S)~~/g, '$1'), // strikethrough
    ),
  );
  return stripCodeAndEmphasis(withoutLinksAndTags, { unescape: true });
}

/** A list item's marker and the spaces after it (where its content starts), and a task's box after them. */
const LIST_MARKER = /^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+/;
const TASK_BOX = /^\[[ xX]\][ \t]+/;

/** The columns `text` spans, a tab to the next multiple of four (CommonMark's tab stops). */
function columns(text: string, from = 0): number {
  let column = from;
  for (const char of text) column = char === '\t' ? column + 4 - (column % 4) : column + 1;
  return column - from;
}

/** The columns of a line's indentation. */
function indentation(line: string): number {
  return columns(/^[ \t]*/.exec(line)?.[0] ?? '');
}

/**
 * The fence a line opens or closes, where its indentation lets it be one: three columns at most
 * past the content of the innermost list item it is in (`listItems`, the open items' content
 * columns, which grow inward: a binary search, so a deep list costs no pass over it per line).
 */
function fenceOf(line: string, listItems: readonly number[] = []): string | null {
  const fence = FENCE.exec(line)?.[1];
  if (!fence) return null;
  const indent = indentation(line);
  let low = 0;
  let high = listItems.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (listItems[middle]! <= indent) low = middle + 1;
    else high = middle;
  }
  return indent - (listItems[low - 1] ?? 0) <= 3 ? fence : null;
}

/** A line without the first `width` columns of its indentation (what a tab has past them stays as spaces). */
function outdented(line: string, width: number): string {
  let at = 0;
  let column = 0;
  while (column < width && (line[at] === ' ' || line[at] === '\t')) {
    column += columns(line[at]!, column);
    at++;
  }
  return ' '.repeat(column - Math.min(column, width)) + line.slice(at);
}

/**
 * Markdown to plain text: block syntax removed line by line, inline markup read over a whole
 * paragraph, list item or table row (emphasis, a link or a comment may run over a line's end), and
 * code, fenced or indented, kept verbatim.
 */
function markdownToPlainText(markdown: string): string {
  const paragraphs: string[] = [];
  let lines: string[] = [];
  // The lines of the paragraph or list item being read, whose inline markup may run over them.
  let inline: string[] = [];
  let openFence: string | null = null;
  // In an indented code block: the indentation its lines have (four columns past a list item's content).
  let codeIndent: number | null = null;
  // Where the content of each open list item starts, innermost last: a paragraph indented to an item's
  // content, after a blank line, is the item's, and code only four columns further in.
  const listItems: number[] = [];
  // In an HTML comment that started a line and is not closed on it (CommonMark's HTML block 2).
  let inComment = false;
  const finishInline = (): void => {
    if (inline.length > 0) for (const line of stripInlineMarkdown(inline.join('\n')).split('\n')) lines.push(line.trim());
    inline = [];
  };
  const finishParagraph = (): void => {
    finishInline();
    if (lines.length > 0) paragraphs.push(lines.join('\n'));
    lines = [];
  };
  for (const rawLine of markdown.split('\n')) {
    if (inComment) {
      inComment = !rawLine.includes('-->');
      continue;
    }
    const indent = indentation(rawLine);
    const fence = fenceOf(rawLine, listItems);
    if (openFence !== null) {
      if (fence && fence[0] === openFence[0] && fence.length >= openFence.length && rawLine.trim() === fence) {
        openFence = null;
        finishParagraph();
      } else {
        lines.push(rawLine);
      }
      continue;
    }
    const blank = rawLine.trim() === '';
    if (codeIndent !== null) {
      // Blank lines within the block are its own; those after it are left out by joinParagraphs.
      if (blank || indent >= codeIndent) {
        lines.push(blank ? '' : outdented(rawLine, codeIndent));
        continue;
      }
      codeIndent = null;
      finishParagraph();
    }
    if (fence) {
      finishParagraph();
      openFence = fence;
      continue;
    }
    if (blank) {
      finishParagraph();
      continue;
    }
    // An indented line continues an open paragraph; after a blank line or another block it is code.
    const open = inline.length > 0 || lines.length > 0;
    if (!open) {
      while ((listItems.at(-1) ?? 0) > indent) listItems.pop();
      const codeAt = (listItems.at(-1) ?? 0) + 4;
      if (indent >= codeAt) {
        codeIndent = codeAt;
        lines.push(outdented(rawLine, codeAt));
        continue;
      }
    }
    let line = rawLine;
    const comment = HTML_COMMENT_BLOCK.exec(line);
    if (comment && !line.includes('-->', comment[0].length)) {
      finishParagraph();
      inComment = true;
      continue;
    }
    const tableDelimiter = TABLE_DELIMITER_ROW.test(line) && line.includes('|');
    if (REFERENCE_DEFINITION.test(line) || tableDelimiter) continue;
    // A setext underline under text, or a rule on its own: neither is text.
    if ((SETEXT_UNDERLINE.test(line) && open) || THEMATIC_BREAK.test(line)) {
      if (open) finishParagraph();
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
    const item = LIST_MARKER.exec(line);
    if (item) {
      // A new item: its marker, and a task's box, are not text.
      finishInline();
      const markerIndent = indentation(line);
      while ((listItems.at(-1) ?? -1) > markerIndent) listItems.pop();
      listItems.push(columns(item[0]));
      line = line.slice(item[0].length).replace(TASK_BOX, '');
    }
    if (/^\s*\|.*\|\s*$/.test(line)) {
      finishInline();
      lines.push(stripInlineMarkdown(line.trim().replace(/^\||\|$/g, '').split('|').map((cell) => cell.trim()).join(' | ')).trim());
      continue;
    }
    inline.push(line);
  }
  finishParagraph();
  return joinParagraphs(paragraphs);
}

function markdownTitle(markdown: string): string | null {
  let openFence: string | null = null;
  let previous = '';
  for (const line of markdown.split('\n')) {
    const fence = fenceOf(line);
    if (openFence !== null) {
      if (fence && fence[0] === openFence[0]) openFence = null;
      continue;
    }
    if (fence) {
      openFence = fence;
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
function markdownToDocument(markdown: string, url?: string): ExtractedDocument {
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
