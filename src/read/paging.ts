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
