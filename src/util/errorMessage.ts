/** The most characters of an error message kept where it is shown again and again (a status, a log line per retry). */
export const MAX_KEPT_ERROR_CHARS = 2000;

/**
 * `error`'s message, at most `max` characters: its start and its end, with what lay between
 * counted. A failed statement's message is the whole SQL and then the reason
 * (`insert into … values ($1, …), … - bind message has …`), over a megabyte for a large
 * batch, so the end must stay as well as the start.
 */
export function boundedErrorMessage(error: unknown, max: number = MAX_KEPT_ERROR_CHARS): string {
  const message = error instanceof Error ? error.message : String(error);
  if (message.length <= max) return message;
  const tail = Math.floor(max / 2);
  const head = max - tail;
  return `${message.slice(0, head)} … (${message.length - max} characters left out) … ${message.slice(message.length - tail)}`;
}
