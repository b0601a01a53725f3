import { DomainError } from './decider.js';
import { runeLength } from '../util/codePoints.js';

/**
 * Text measured as people and JSON Schema's `maxLength` count it: in Unicode code points
 * ("runes"), not UTF-16 units, so an emoji is one character and is never cut in half (the
 * measure and the pair-safe cut: src/util/codePoints.ts).
 */

/** `text`, or its first `max - 1` code points and an ellipsis when it has more than `max`. */
export function shortenRunes(text: string, max: number): string {
  const runes = [...text];
  return runes.length > max ? `${runes.slice(0, max - 1).join('')}…` : text;
}

/** C0 and C1 control characters (tabs and line breaks among them): none belongs in a one-line title. */
const CONTROL_CHARACTER = /[\u0000-\u001F\u007F-\u009F]/u;
const CONTROL_CHARACTER_RUNS = new RegExp(`${CONTROL_CHARACTER.source}+`, 'gu');

/** `text` as one line: each run of control characters (a tab, a line break) becomes a space. */
export function oneLine(text: string): string {
  return text.replace(CONTROL_CHARACTER_RUNS, ' ');
}

/**
 * A one-line title as stored: trimmed, and refused (`invalid`, naming `what`) when empty, over
 * `max` characters, or holding a control character (a title of only a BEL was accepted and shown
 * as nothing).
 */
export function checkedTitle(title: string, max: number, what: string): string {
  const trimmed = title.trim();
  if (trimmed === '') throw new DomainError('invalid', `the ${what} is empty`);
  if (runeLength(trimmed) > max) throw new DomainError('invalid', `the ${what} is longer than ${max} characters`);
  const control = CONTROL_CHARACTER.exec(trimmed)?.[0];
  if (control !== undefined) {
    throw new DomainError('invalid', `the ${what} holds a control character (U+${control.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}): a title is one line of text`);
  }
  return trimmed;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Why a string cannot be stored or searched: a NUL byte (PostgreSQL text refuses it) or a lone
 * UTF-16 surrogate (not valid Unicode, so not encodable as UTF-8). Null when the string is fine.
 */
export function unsafeTextReason(text: string): string | null {
  if (text.includes('\u0000')) return 'contains a NUL character';
  if (LONE_SURROGATE.test(text)) return 'contains a lone surrogate (not valid Unicode)';
  return null;
}

/**
 * Control characters (C0 with NUL, tab and line breaks; DEL; C1), the line and paragraph
 * separators, and the bidirectional marks, embeddings, overrides and isolates (U+200E, U+200F,
 * U+061C among them: a mark reorders the characters around it as an override does).
 */
const UNSHOWABLE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

/** The most characters of a file name kept (common file systems' limit). */
export const MAX_FILE_NAME_CHARS = 255;

/**
 * A file name a client sent, as it is kept and shown: without control characters (a NUL cannot be
 * stored; a line break or tab forges a line of a listing) and the bidirectional controls that
 * make `report\u202Etxt.exe` read as `reportexe.txt`; lone surrogates as U+FFFD; trimmed, at most
 * MAX_FILE_NAME_CHARS characters. Null when nothing is left.
 */
export function cleanFileName(name: string | null | undefined): string | null {
  if (!name) return null;
  const clean = shortenRunes(name.replace(UNSHOWABLE, '').replace(LONE_SURROGATES, '\ufffd').trim(), MAX_FILE_NAME_CHARS);
  return clean === '' ? null : clean;
}

/**
 * A Markdown inline link `[text](destination)` or image `![alt](…)`, with its text in group 1. The
 * destination may hold balanced parentheses one level deep, as addresses of Wikipedia's do
 * (`[Mercury](https://en.wikipedia.org/wiki/Mercury_(planet))`). Linear in its input: the text holds
 * no bracket and the destination ends at the first parenthesis that closes it or pairs with none,
 * so no attempt runs past the next bracket or stray parenthesis (`[^\]]*` ran to the end of `[[[[…`,
 * a cost that grew with the square of the length). Brackets escaped in the text
 * (`[\[1\]](#cite_note-1)`) are for the caller to hold (outsideCodeSpans).
 */
export const MARKDOWN_INLINE_LINK = /!?\[([^[\]]*)\]\((?:[^()]|\([^()]*\))*\)/g;

/** A run of `*` or `_` that may open or close emphasis, as CommonMark's delimiter stack holds it. */
interface DelimiterRun {
  char: '*' | '_';
  /** Delimiters left unmatched; `length` is the run's length as written (the rule of 3 reads it). */
  count: number;
  length: number;
  canOpen: boolean;
  canClose: boolean;
  previous: DelimiterRun | null;
  next: DelimiterRun | null;
}

const UNICODE_WHITESPACE = /\s/u;
const UNICODE_PUNCTUATION = /[\p{P}\p{S}]/u;
const ASCII_PUNCTUATION = /[!-/:-@[-`{-~]/;

/** CommonMark's flanking rules for the delimiter run at [start, end) of `text`. */
function delimiterRun(text: string, start: number, end: number): DelimiterRun {
  const char = text[start] === '_' ? '_' : '*';
  const before = text[start - 1] ?? ' ';
  const after = text[end] ?? ' ';
  const spaceBefore = UNICODE_WHITESPACE.test(before);
  const spaceAfter = UNICODE_WHITESPACE.test(after);
  const punctuationBefore = UNICODE_PUNCTUATION.test(before);
  const punctuationAfter = UNICODE_PUNCTUATION.test(after);
  const left = !spaceAfter && (!punctuationAfter || spaceBefore || punctuationBefore);
  const right = !spaceBefore && (!punctuationBefore || spaceAfter || punctuationAfter);
  return {
    char,
    count: end - start,
    length: end - start,
    // `_` opens and closes only at a word's edge: snake_case is a word.
    canOpen: char === '*' ? left : left && (!right || punctuationBefore),
    canClose: char === '*' ? right : right && (!left || punctuationAfter),
    previous: null,
    next: null,
  };
}

/** A code span of a line: [start, end) with its backticks, and its text. */
export interface CodeSpan {
  start: number;
  end: number;
  code: string;
}

/**
 * The code spans of a line of Markdown, by CommonMark's rules: a run of backticks that no backslash
 * escapes opens a span that the next run of the same length closes (``` ``a`b`` ``` is "a`b"); a
 * run without a closer is literal. Linear in the line: each run is passed once by the per-length
 * closer search.
 */
export function codeSpans(line: string): CodeSpan[] {
  // Where each run of backticks starts, by length: a span's closer is the next run of its length.
  const runsOfLength = new Map<number, { starts: number[]; next: number }>();
  for (let i = 0; i < line.length; ) {
    if (line[i] !== '`') {
      i++;
      continue;
    }
    let end = i;
    while (line[end] === '`') end++;
    const runs = runsOfLength.get(end - i) ?? { starts: [], next: 0 };
    runs.starts.push(i);
    runsOfLength.set(end - i, runs);
    i = end;
  }
  /** Where the first run of `length` backticks after `after` starts; -1 when none. Asked in line order, so each list is passed once. */
  const closerAfter = (length: number, after: number): number => {
    const runs = runsOfLength.get(length);
    if (!runs) return -1;
    while (runs.next < runs.starts.length && runs.starts[runs.next]! <= after) runs.next++;
    return runs.starts[runs.next] ?? -1;
  };
  const spans: CodeSpan[] = [];
  for (let i = 0; i < line.length; ) {
    if (line[i] === '\\' && ASCII_PUNCTUATION.test(line[i + 1] ?? '')) {
      i += 2;
      continue;
    }
    if (line[i] !== '`') {
      i++;
      continue;
    }
    let end = i;
    while (line[end] === '`') end++;
    const closer = closerAfter(end - i, i);
    if (closer === -1) {
      i = end;
      continue;
    }
    let code = line.slice(end, closer);
    // One space each side is padding when both are there and the span is not all spaces.
    if (code.length >= 2 && code.startsWith(' ') && code.endsWith(' ') && code.trim() !== '') code = code.slice(1, -1);
    spans.push({ start: i, end: closer + (end - i), code });
    i = closer + (end - i);
  }
  return spans;
}

/** Stands for a piece held aside in outsideCodeSpans: private-use characters no pattern reads. */
const HELD = /\uE000(\d+)\uE001/g;

/**
 * `outside` applied to a line with its code spans and backslash escapes held aside, then both put
 * back as written. CommonMark's code spans bind tighter than links, images and tags, so `[a](b)` or
 * `<p>` between backticks is the span's text, while a link's text may hold a whole span; and an
 * escaped ASCII punctuation character is text, never markup, outside code spans: `\[a\](b)` is no
 * link, `\<b>` no tag, `\&amp;` no character reference, and `[\[1\]](#n)` a link whose text is
 * `\[1\]` (a backslash in a code span is the span's text). The placeholders' own characters, where
 * the line has them, are held as well, so every line is read by the same rule. One pass.
 */
export function outsideCodeSpans(line: string, outside: (text: string) => string): string {
  const spans = codeSpans(line);
  const held: string[] = [];
  let text = '';
  let from = 0;
  const hold = (start: number, end: number): void => {
    text += `${line.slice(from, start)}\uE000${held.length}\uE001`;
    held.push(line.slice(start, end));
    from = end;
  };
  let nextSpan = 0;
  for (let i = 0; i < line.length; ) {
    const span = spans[nextSpan];
    if (span?.start === i) {
      hold(i, span.end);
      nextSpan++;
      i = span.end;
    } else if (line[i] === '\\' && ASCII_PUNCTUATION.test(line[i + 1] ?? '')) {
      hold(i, i + 2);
      i += 2;
    } else if (line[i] === '\uE000' || line[i] === '\uE001') {
      hold(i, i + 1);
      i++;
    } else {
      i++;
    }
  }
  if (held.length === 0) return outside(line);
  return outside(text + line.slice(from)).replace(HELD, (placeholder, n: string) => held[Number(n)] ?? placeholder);
}

/**
 * A line of Markdown with its code spans as their text and its emphasis (`*`, `**`, `_`, `__`,
 * nested) without its marks, by CommonMark's rules: code spans as codeSpans finds them; emphasis
 * is matched on a delimiter stack, so `**bold *and italic* text**` and `*a **b** c*` lose every
 * mark. Unmatched backticks and delimiters stay as written. A backslash escape is never a delimiter
 * or a backtick; it stays as written for the caller to read, or, with `unescape`, it is the
 * character it escapes (`\*a\*` is "*a*"), as CommonMark renders it; in a code span a backslash is
 * the span's text either way. Linear in the line: codeSpans is, each delimiter is removed from the
 * stack at most once, and a closer's search for an opener stops where the last failed search of its
 * kind did (CommonMark's openers_bottom).
 */
export function stripCodeAndEmphasis(line: string, options: { unescape?: boolean } = {}): string {
  const spans = codeSpans(line);
  let nextSpan = 0;
  const pieces: Array<string | DelimiterRun> = [];
  let top: DelimiterRun | null = null;
  let bottom: DelimiterRun | null = null;
  let text = '';
  const flush = (): void => {
    if (text !== '') pieces.push(text);
    text = '';
  };
  for (let i = 0; i < line.length; ) {
    const char = line[i]!;
    if (char === '\\' && ASCII_PUNCTUATION.test(line[i + 1] ?? '')) {
      text += options.unescape ? line[i + 1] : line.slice(i, i + 2);
      i += 2;
      continue;
    }
    const span = spans[nextSpan];
    if (span?.start === i) {
      text += span.code;
      nextSpan++;
      i = span.end;
      continue;
    }
    if (char === '*' || char === '_') {
      let end = i;
      while (line[end] === char) end++;
      flush();
      const run = delimiterRun(line, i, end);
      pieces.push(run);
      run.previous = top;
      if (top) top.next = run;
      else bottom = run;
      top = run;
      i = end;
      continue;
    }
    text += char;
    i++;
  }
  flush();

  const unlink = (run: DelimiterRun): void => {
    if (run.previous) run.previous.next = run.next;
    else bottom = run.next;
    if (run.next) run.next.previous = run.previous;
    else top = run.previous;
  };
  // Where the last search for an opener of this kind stopped: a later one stops there too.
  const openersBottom = new Map<string, DelimiterRun | null>();
  let closer: DelimiterRun | null = bottom;
  while (closer) {
    if (!closer.canClose) {
      closer = closer.next;
      continue;
    }
    const kind = `${closer.char}${closer.canOpen ? 1 : 0}${closer.length % 3}`;
    const stopAt = openersBottom.get(kind) ?? null;
    let opener: DelimiterRun | null = closer.previous;
    while (opener && opener !== stopAt) {
      const oddMatch = (closer.canOpen || opener.canClose) && closer.length % 3 !== 0 && (opener.length + closer.length) % 3 === 0;
      if (opener.char === closer.char && opener.canOpen && !oddMatch) break;
      opener = opener.previous;
    }
    if (opener && opener !== stopAt) {
      const used = opener.count >= 2 && closer.count >= 2 ? 2 : 1;
      opener.count -= used;
      closer.count -= used;
      for (let between = opener.next; between && between !== closer; between = between.next) unlink(between);
      if (opener.count === 0) unlink(opener);
      if (closer.count === 0) {
        const next: DelimiterRun | null = closer.next;
        unlink(closer);
        closer = next;
      }
    } else {
      openersBottom.set(kind, closer.previous);
      const next: DelimiterRun | null = closer.next;
      if (!closer.canOpen) unlink(closer);
      closer = next;
    }
  }
  // A run keeps the marks left unmatched; one taken off the stack unmatched keeps them all.
  return pieces.map((piece) => (typeof piece === 'string' ? piece : piece.char.repeat(piece.count))).join('');
}
