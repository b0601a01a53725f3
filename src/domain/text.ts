/**
 * Text measured as people and JSON Schema's `maxLength` count it: in Unicode code points
 * ("runes"), not UTF-16 units, so an emoji is one character and is never cut in half.
 */

/** Length in Unicode code points ("runes"), as `providers.reports.min_sentence_runes` counts. */
export function runeLength(text: string): number {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** `text`, or its first `max - 1` code points and an ellipsis when it has more than `max`. */
export function shortenRunes(text: string, max: number): string {
  const runes = [...text];
  return runes.length > max ? `${runes.slice(0, max - 1).join('')}…` : text;
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
 * A Markdown inline link `[text](destination)` or image `![alt](…)`, with its text in group 1.
 * Linear in its input: the text holds no bracket and the destination no parenthesis, so no
 * attempt runs past the next one (`[^\]]*` ran to the end of `[[[[…`, a cost that grew with the
 * square of the length).
 */
export const MARKDOWN_INLINE_LINK = /!?\[([^[\]]*)\]\([^()]*\)/g;
