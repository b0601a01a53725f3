/**
 * A `timestamptz` column as text in UTC with microseconds (`2026-11-30T23:10:50.123456Z`), the
 * same whatever the session's TimeZone: what a keyset cursor holds of its last row (src/read/paging.ts).
 */
export const utcMicrosecondsText = (column: string): string => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
