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
  return keptEnds(message, length, message, length, length, max) ?? tooSmall(message, max);
}

/** The marker boundedErrorMessage writes where it cut (cutMarker), its count captured. */
const CUT_MARKER = / … \((\d+) characters left out\) … /g;

/**
 * A message stored bounded already (a task's `last_error`, bounded to MAX_TASK_ERROR_CHARS),
 * bounded again to `max` where its original error is gone: as boundedErrorMessage would bound
 * the original. Bounding the stored text as it is would count the characters left out of the
 * shortened text, not of the message, and could keep one marker inside the other; here the count
 * is honest: the characters the stored text's markers say were left out count as left out, the
 * start is taken before its first marker and the end after its last, so no marker stays inside
 * the new one. A text with no marker is bounded as boundedErrorMessage bounds it. (A message
 * that quoted a bounded message is counted as its quote's original: that is what was left out.)
 */
export function reboundedErrorMessage(stored: string, max: number = MAX_KEPT_ERROR_CHARS): string {
  const length = runeLength(stored);
  const markers = length <= max ? [] : [...stored.matchAll(CUT_MARKER)];
  const first = markers[0];
  const last = markers.at(-1);
  if (first === undefined || last === undefined) return boundedErrorMessage(stored, max);
  const before = stored.slice(0, first.index);
  const after = stored.slice(last.index + last[0].length);
  // The markers are ASCII and `…` (one UTF-16 unit each): their length in units is in characters.
  const original = markers.reduce((sum, marker) => sum - marker[0].length + Number(marker[1]), length);
  return keptEnds(before, runeLength(before), after, runeLength(after), original, max) ?? tooSmall(stored, max);
}

/**
 * The start of `before` and the end of `after` (the same message, or the parts before and after
 * a stored text's markers) around a marker counting what is left out of a message of `length`
 * characters: at most `max` characters in all, the marker included. Null when `max` leaves no
 * room for the marker.
 */
function keptEnds(before: string, beforeLength: number, after: string, afterLength: number, length: number, max: number): string | null {
  // The marker's length depends on the count it shows, which depends on what the marker leaves
  // room for: the fewest digits whose marker leaves at most that many digits' worth cut.
  const fixed = cutMarker(0).length - 1;
  for (let digits = 1; ; digits++) {
    const kept = max - fixed - digits;
    if (kept < 2) return null;
    // Half each, the start the odd one; a side shorter than its half gives the rest to the other.
    const headRunes = Math.min(kept - Math.min(Math.floor(kept / 2), afterLength), beforeLength);
    const tailRunes = Math.min(kept - headRunes, afterLength);
    const leftOut = length - headRunes - tailRunes;
    if (String(leftOut).length > digits) continue;
    return `${headOfRunes(before, headRunes)}${cutMarker(leftOut)}${tailOfRunes(after, tailRunes)}`;
  }
}

/** A bound too small for the marker: the start and `…`. */
function tooSmall(message: string, max: number): string {
  return max <= 0 ? '' : `${headOfRunes(message, max - 1)}…`;
}
