/**
 * A `timestamptz` column as text in UTC with microseconds (`2026-11-30T23:10:50.123456Z`), the
 * same whatever the session's TimeZone: what a keyset cursor holds of its last row (src/read/paging.ts).
 */
export const utcMicrosecondsText = (column: string): string => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * A `timestamptz` value as a driver gives it (a Date from pg and PGlite, RFC 3339 text from a
 * JSON result) in ISO 8601, UTC with milliseconds: how events, jobs and the API show a time.
 */
export const isoTimestamp = (value: Date | string): string => (value instanceof Date ? value : new Date(value)).toISOString();

/** isoTimestamp of a nullable column: null stays null. */
export const isoTimestampOrNull = (value: Date | string | null | undefined): string | null => (value === null || value === undefined ? null : isoTimestamp(value));
