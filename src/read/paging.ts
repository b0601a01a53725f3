import type { Knex } from 'knex';
import { invalid } from '../app/errors.js';

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

/** An offset cursor (the tasks' pages): the offset of the next page, opaque to callers so the paging can change. */
export const encodeOffsetCursor = (offset: number): string => Buffer.from(`o:${offset}`).toString('base64url');

export function decodeOffsetCursor(cursor: string | undefined): number {
  if (cursor === undefined || cursor === '') return 0;
  const match = /^o:(\d{1,9})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw invalid('cursor is not one this service returned');
  return Number(match[1]);
}

/**
 * Where a page of a newest-first list (`created_at` descending, then `id`) ended: its last row's
 * time, as the database writes it (microseconds kept), and id. The next page starts after that row
 * whatever was added or deleted meanwhile: by an offset, a row deleted from an earlier page made
 * the next one skip a row, and a row added repeated one.
 */
export interface NewestFirstCursor {
  at: string;
  id: string;
}

export const encodeNewestFirstCursor = (cursor: NewestFirstCursor): string => Buffer.from(`k:${JSON.stringify([cursor.at, cursor.id])}`).toString('base64url');

export function decodeNewestFirstCursor(cursor: string | undefined): NewestFirstCursor | null {
  if (cursor === undefined || cursor === '') return null;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const parsed: unknown = text.startsWith('k:') ? safeJson(text.slice(2)) : null;
  if (!Array.isArray(parsed) || parsed.length !== 2 || typeof parsed[0] !== 'string' || typeof parsed[1] !== 'string' || Number.isNaN(Date.parse(parsed[0]))) {
    throw invalid('cursor is not one this service returned');
  }
  return { at: parsed[0], id: parsed[1] };
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
