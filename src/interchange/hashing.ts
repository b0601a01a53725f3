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
 * Any Unicode whitespace run: ASCII space, tab, newlines, NBSP, the U+2000 spaces,
 * line/paragraph separators, ideographic space and BOM. JavaScript's `\s` is exactly the
 * Unicode White_Space property plus U+FEFF, which is what "whitespace" means to `trim()` too.
 */
const WHITESPACE_RUN = /\s+/gu;

/** The content_hash normalization: trim, collapse whitespace runs to one ASCII space, NFC. */
export function normalizeContent(text: string): string {
  if (typeof text !== 'string') throw new TypeError('normalizeContent expects a string');
  return text.trim().replace(WHITESPACE_RUN, ' ').normalize('NFC');
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
