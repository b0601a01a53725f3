/**
 * The longest duration the service waits with a timer. Node keeps a setTimeout or setInterval
 * delay in 32 bits: past 2^31-1 ms (about 24.8 days) it fires after 1 ms instead, so a
 * `task.job_timeout` of 30d timed every job out at once. 24d is the round bound below that.
 */
export const MAX_TIMER_MS = 24 * 86_400_000;

/**
 * The shortest interval of a periodic job (`task.refresh_concept_relations_interval`,
 * `providers.dedup.catchup_interval`): the scheduler cuts its buckets in whole seconds and refuses less.
 */
export const MIN_PERIODIC_INTERVAL_MS = 1_000;

/**
 * The shortest token lifetime (`auth.*_ttl`, `oauth.*_ttl`): a signed token states its expiry in
 * whole seconds, so the token service refuses less, and a sub-second lifetime is never meant.
 */
export const MIN_TOKEN_TTL_MS = 1_000;

const MILLISECONDS_PER_UNIT: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

// `ms` precedes `m` in the alternation so `5ms` is never read as 5 minutes plus a stray `s`.
const DURATION_PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

/**
 * Parses a duration such as `15s`, `250ms`, `10m`, `24h`, `7d` or `1h30m` into milliseconds.
 * `0s` is zero. A bare number, a negative value or an unknown unit is an error, because a
 * missing unit in configuration is almost always a mistake (is `30` seconds or minutes?).
 */
export function parseDuration(text: string): number {
  if (typeof text !== 'string') {
    throw new TypeError(`invalid duration ${JSON.stringify(text)}: expected a string such as "15s"`);
  }
  const trimmed = text.trim();
  if (trimmed === '') throw new RangeError('invalid duration "": expected a value such as "15s", "10m" or "1h30m"');
  let total = 0;
  DURATION_PART.lastIndex = 0;
  while (DURATION_PART.lastIndex < trimmed.length) {
    const at = DURATION_PART.lastIndex;
    const match = DURATION_PART.exec(trimmed);
    if (!match) {
      throw new RangeError(
        `invalid duration ${JSON.stringify(text)} at "${trimmed.slice(at)}": ` +
          'expected <number><unit> parts with unit ms, s, m, h or d, e.g. "15s", "10m", "1h30m"',
      );
    }
    total += Number(match[1]) * MILLISECONDS_PER_UNIT[match[2]];
  }
  return Math.round(total);
}

/** Whether `text` is a duration `parseDuration` accepts. */
export function isDuration(text: unknown): text is string {
  if (typeof text !== 'string') return false;
  try {
    parseDuration(text);
    return true;
  } catch {
    return false;
  }
}
