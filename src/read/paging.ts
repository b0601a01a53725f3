import type { Knex } from 'knex';
import { invalid } from '../app/errors.js';
import { isUuid } from '../util/uuid.js';

/** A page of a list: at most `limit` items from `offset`. Transports may omit both (50 from 0). */
export interface PageInput {
  limit?: number;
  offset?: number;
}

export const MAX_PAGE = 500;

/** The largest offset (PostgreSQL takes bigint; this keeps every value a safe integer and every query sane). */
export const MAX_OFFSET = 2_147_483_647;

/** The page asked for, checked: the REST schemas say the same, other transports rely on this. */
export function pageOf(input: PageInput, defaultLimit = 50, maxLimit = MAX_PAGE): { limit: number; offset: number } {
  const { limit = defaultLimit, offset = 0 } = input;
  if (!Number.isInteger(limit) || limit < 1 || limit > maxLimit) throw invalid(`limit must be an integer from 1 to ${maxLimit}`);
  if (!Number.isInteger(offset) || offset < 0 || offset > MAX_OFFSET) throw invalid(`offset must be an integer from 0 to ${MAX_OFFSET}`);
  return { limit, offset };
}

/** How many rows a query selects (the `total` of a page). */
export async function countOf(query: Knex.QueryBuilder): Promise<number> {
  const [{ n }] = await query.clone().count<{ n: string }[]>('* as n');
  return Number(n);
}

/**
 * Where a page of a newest-first list (`created_at` descending, then `id`) ended: its last row's
 * time (UTC with microseconds, src/db/timestamps.ts) and id. The next page starts after that row
 * whatever was added or deleted meanwhile: by an offset, a row deleted from an earlier page made
 * the next one skip a row, and a row added repeated one.
 */
export interface NewestFirstCursor {
  at: string;
  id: string;
}

/** The encoder and decoder of a newest-first cursor under `tag` (so one list's cursor is refused by another) whose ids `isId` checks. */
function newestFirstCursor(tag: string, isId: (id: string) => boolean) {
  return {
    encode: (cursor: NewestFirstCursor): string => encodeKeyset(tag, [cursor.at, cursor.id]),
    decode(cursor: string | undefined): NewestFirstCursor | null {
      const parts = keysetParts(cursor, tag, 2);
      if (parts === null) return null;
      const [at, id] = parts as [string, string];
      if (!isUtcMicroseconds(at) || !isId(id)) throw notOurs();
      return { at, id };
    },
  };
}

const sourcesCursor = newestFirstCursor('k', isUuid);
export const encodeNewestFirstCursor = sourcesCursor.encode;
export const decodeNewestFirstCursor = sourcesCursor.decode;

const UTC_MICROSECONDS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/** A cursor's time as src/db/timestamps.ts writes it, and a day PostgreSQL takes: V8 rolls February 30th over, so it must read back as written. */
function isUtcMicroseconds(at: string): boolean {
  return UTC_MICROSECONDS.test(at) && !Number.isNaN(Date.parse(at)) && new Date(Date.parse(at)).toISOString().slice(0, 23) === at.slice(0, 23);
}

/**
 * Where a page of the tasks' list ended. Their order is newest first as well, but jobs enqueued
 * together share a `created_at` (one statement, one `now()`), so it goes on by the trigger event's
 * position, latest first, and then by id: the cursor holds all three of the last job listed. `at`
 * is UTC with microseconds (`YYYY-MM-DDTHH:MM:SS.ffffffZ`), `position` a bigint in decimal.
 */
export interface TaskCursor {
  at: string;
  position: string;
  id: string;
}

export const encodeTaskCursor = (cursor: TaskCursor): string => encodeKeyset('t', [cursor.at, cursor.position, cursor.id]);

const BIGINT_MAX = 9_223_372_036_854_775_807n;

/** A bigint in decimal digits, no sign or leading zero, from `min` (0 or 1) to PostgreSQL's bigint maximum. */
function isDecimalBigint(text: string, min: 0 | 1): boolean {
  return /^(0|[1-9]\d{0,18})$/.test(text) && BigInt(text) >= BigInt(min) && BigInt(text) <= BIGINT_MAX;
}

/** The task cursor, checked to the last field: each goes into SQL, where a value the database refused would be a 500. */
export function decodeTaskCursor(cursor: string | undefined): TaskCursor | null {
  const parts = keysetParts(cursor, 't', 3);
  if (parts === null) return null;
  const [at, position, id] = parts as [string, string, string];
  const validTime = isUtcMicroseconds(at);
  if (!validTime || !isDecimalBigint(position, 0) || !isUuid(id)) throw notOurs();
  return { at, position, id };
}

/**
 * Where a page of the permission audit ended (newest first: `occurred_at`, then `id`, both
 * descending): its last row's time (UTC with microseconds) and id (a bigint in decimal). The next
 * page starts after that row, so the rows added meanwhile (reading the audit adds one) neither
 * repeat a row as an offset would nor shift the pages.
 */
const auditCursor = newestFirstCursor('a', (id) => isDecimalBigint(id, 1));
export const encodeAuditCursor = auditCursor.encode;
export const decodeAuditCursor = auditCursor.decode;

const notOurs = () => invalid('cursor is not one this service returned');

const encodeKeyset = (kind: string, values: string[]): string => Buffer.from(`${kind}:${JSON.stringify(values)}`).toString('base64url');

/** A keyset cursor's values: `count` strings behind `kind:`; null for no cursor (the first page); `invalid` for anything else (a cursor of another list too). */
function keysetParts(cursor: string | undefined, kind: string, count: number): string[] | null {
  if (cursor === undefined || cursor === '') return null;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const parsed: unknown = text.startsWith(`${kind}:`) ? safeJson(text.slice(kind.length + 1)) : null;
  if (!Array.isArray(parsed) || parsed.length !== count || !parsed.every((value) => typeof value === 'string')) throw notOurs();
  return parsed as string[];
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** Rows after `cursor` in a newest-first list (created_at descending, then id ascending). */
export function afterNewestFirst(query: Knex.QueryBuilder, cursor: NewestFirstCursor | null): Knex.QueryBuilder {
  if (cursor === null) return query;
  return query.where((after) =>
    after.where('created_at', '<', cursor.at).orWhere((same) => same.where('created_at', '=', cursor.at).andWhere('id', '>', cursor.id)),
  );
}
