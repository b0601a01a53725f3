import { headOfRunes, runeLength, tailOfRunes } from './codePoints.js';

/** The most characters of an error message kept where it is shown again and again (a status, a log line per retry). */
export const MAX_KEPT_ERROR_CHARS = 2000;

/** `error`'s message: an Error's `message`, anything else as `String` makes it. */
export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** What stands between the start and the end kept of a message: `leftOut` characters were cut there. */
function cutMarker(leftOut: number): string {
  return ` … (${leftOut} characters left out) … `;
}

/**
 * `error`'s message (a string as it is), at most `max` characters (code points, as JSON Schema's
 * `maxLength` and PostgreSQL count them) with the marker: the one way an error message is bounded
 * for storage (a projection's, a task's, a source's or a report's failure). A longer message keeps
 * its start and its end with `… (N characters left out) …` between them: a failed statement's
 * message is the whole SQL and then the reason (`insert into … values ($1, …), … - bind message
 * has …`), over a megabyte for a large batch, and a model server's or a fetch's error often ends
 * with what went wrong, so the end must stay as well as the start. Cut by code point, an emoji is
 * never halved (a lone surrogate is not Unicode, and jsonb refuses it). A bound too small for the
 * marker keeps the start and `…`.
 */
export function boundedErrorMessage(error: unknown, max: number = MAX_KEPT_ERROR_CHARS): string {
  const message = errorMessage(error);
  if (message.length <= max) return message;
  const length = runeLength(message);
  if (length <= max) return message;
  // The marker's length depends on the count it shows, which depends on what the marker leaves
  // room for: the fewest digits whose marker leaves at most that many digits' worth cut.
  const fixed = cutMarker(0).length - 1;
  for (let digits = 1; ; digits++) {
    const kept = max - fixed - digits;
    if (kept < 2) break;
    const leftOut = length - kept;
    if (String(leftOut).length > digits) continue;
    const headRunes = kept - Math.floor(kept / 2);
    const head = headOfRunes(message, headRunes);
    const tail = tailOfRunes(message, Math.floor(kept / 2));
    return `${head}${cutMarker(leftOut)}${tail}`;
  }
  return max <= 0 ? '' : `${headOfRunes(message, max - 1)}…`;
}
