import type { Knex } from 'knex';
import { followMergeChains, MAX_MERGE_CHAIN } from '../src/domain/mergeChain.js';

/**
 * How far the projections follow a chain: the bound the reads and the stages follow too
 * (src/domain/mergeChain.ts), so a chain the API resolves is never cut short in a read model.
 */
const MAX_CHAIN_LENGTH = MAX_MERGE_CHAIN;

/**
 * The final survivor of each id, following `table.from -> table.to` rows (a merged fact or
 * concept to what it merged into) until an id that merged into nothing (followMergeChains).
 * Ids that never merged map to themselves. One query per chain step, for all ids at once; a
 * chain cut at MAX_CHAIN_LENGTH maps to where the walk stopped.
 */
export async function followMerges(
  trx: Knex.Transaction,
  merges: { table: string; from: string; to: string; where?: Record<string, unknown> },
  ids: readonly string[],
): Promise<Map<string, string>> {
  const starts = [...new Set(ids)];
  const chains = await followMergeChains(
    starts,
    async (at) => {
      const rows = (await trx(merges.table)
        .whereIn(merges.from, [...new Set(at)])
        .whereNotNull(merges.to)
        .where(merges.where ?? {})
        .select(merges.from, merges.to)) as Array<Record<string, string>>;
      const next = new Map(rows.map((row) => [row[merges.from], row[merges.to]]));
      return at.map((id) => next.get(id) ?? null);
    },
    MAX_CHAIN_LENGTH,
  );
  return new Map(starts.map((id, index) => [id, chains[index].node]));
}

/**
 * SQL of two CTEs for a statement that moves a merged fact's rows: `chain` follows the
 * redirects of `redirects` (fact_id → survivor_id) from the fact, preferring a redirect already
 * recorded over the new survivor (an earlier merge wins), up to MAX_CHAIN_LENGTH steps; `target`
 * is the final survivor, or no row when the chain leads back to the fact itself. Its parameters
 * are `finalSurvivorParams`, in the place the SQL is put.
 */
export function finalSurvivorSql(redirects: 'fact_redirects' | 'fact_concept_redirects'): string {
  return `chain(id, depth) AS (
       SELECT COALESCE((SELECT survivor_id FROM ${redirects} WHERE fact_id = ? AND survivor_id IS NOT NULL), ?::text), 1
       UNION ALL
       SELECT r.survivor_id, chain.depth + 1 FROM chain JOIN ${redirects} r ON r.fact_id = chain.id
        WHERE r.survivor_id IS NOT NULL AND chain.depth < ?
     ), target AS (
       SELECT id FROM (SELECT id FROM chain ORDER BY depth DESC LIMIT 1) AS last WHERE id <> ?
     )`;
}

export const finalSurvivorParams = (factId: string, survivorId: string): Array<string | number> => [factId, survivorId, MAX_CHAIN_LENGTH, factId];
