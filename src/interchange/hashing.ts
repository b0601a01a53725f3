import { createHash } from 'node:crypto';

/**
 * Hashing shared by the interchange formats (decomposition package, graph bundle).
 *
 * The fact `content_hash` contract of the spec: (1) trim leading and trailing whitespace,
 * (2) collapse internal whitespace runs to one space, (3) normalize Unicode to NFC,
 * (4) hex SHA-256 of the result (UTF-8). Equal hashes mean the same fact across services,
 * so these steps must not drift: the tests pin them with independently computed vectors.
 */

/**
 * Any Unicode whitespace run: ASCII space, tab, newlines, NEL, NBSP, the U+2000 spaces,
 * line/paragraph separators, ideographic space and BOM. JavaScript's `\s` (and `trim()`) is the
 * Unicode White_Space property plus U+FEFF but without NEL (U+0085), which producers that use
 * the Unicode property (Go's unicode.IsSpace, Python's str.split) collapse: NEL is added so that
 * their hashes and ours agree.
 */
const WHITESPACE_RUN = /[\s\u0085]+/gu;

/** The content_hash normalization: trim, collapse whitespace runs to one ASCII space, NFC. */
export function normalizeContent(text: string): string {
  if (typeof text !== 'string') throw new TypeError('normalizeContent expects a string');
  // Collapsing first leaves every run at either end one ASCII space, so trim() also drops a NEL it would keep.
  return text.replace(WHITESPACE_RUN, ' ').trim().normalize('NFC');
}

/** Hex SHA-256 of raw bytes, or of a string's UTF-8 encoding (no normalization). */
export function sha256Hex(input: Uint8Array | string): string {
  if (typeof input !== 'string' && !(input instanceof Uint8Array)) {
    throw new TypeError('sha256Hex expects a string or a Uint8Array');
  }
  return createHash('sha256').update(input).digest('hex');
}

/** The spec's fact `content_hash`: hex SHA-256 of the normalized content's UTF-8 bytes. */
export function contentHash(text: string): string {
  return sha256Hex(normalizeContent(text));
}
