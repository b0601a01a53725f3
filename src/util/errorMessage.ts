import { headOfUnits, runeLength, tailOfUnits } from './codePoints.js';

/** The most characters of an error message kept where it is shown again and again (a status, a log line per retry). */
export const MAX_KEPT_ERROR_CHARS = 2000;

/**
 * `error`'s message, at most `max` UTF-16 units of it: its start and its end, with what lay
 * between counted in characters. A failed statement's message is the whole SQL and then the
 * reason (`insert into … values ($1, …), … - bind message has …`), over a megabyte for a large
 * batch, so the end must stay as well as the start. Neither cut halves a character (a lone
 * surrogate is not Unicode): a pair the cut would split is left out whole.
 */
export function boundedErrorMessage(error: unknown, max: number = MAX_KEPT_ERROR_CHARS): string {
  const message = error instanceof Error ? error.message : String(error);
  if (message.length <= max) return message;
  const head = headOfUnits(message, max - Math.floor(max / 2));
  const tail = tailOfUnits(message, Math.floor(max / 2));
  const leftOut = runeLength(message.slice(head.length, message.length - tail.length));
  return `${head} … (${leftOut} characters left out) … ${tail}`;
}
