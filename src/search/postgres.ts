import type { Knex } from 'knex';
import type { FactHit, FactQuery, SearchIndex } from './port.js';

/**
 * Lexical search on the read-model database: the `facts.search` tsvector column (english
 * configuration), `websearch_to_tsquery` for the query and `ts_rank_cd` for ranking, ties broken
 * by age so pages are stable.
 */
export function createPostgresSearchIndex(knex: Knex): SearchIndex {
  return {
    async searchFacts({ repositoryId, query, limit, offset }: FactQuery) {
      const text = query.trim();
      const base = knex('facts').where('facts.repository_id', repositoryId);
      const columns = ['id', 'content', 'content_hash', 'fact_kind', 'status', 'created_at'];
      const rows: (Omit<FactHit, 'score' | 'created_at'> & { score: number | string; created_at: Date | string; total: string | number })[] =
        text === ''
          ? await base
              .clone()
              .select(columns)
              .select(knex.raw('0 AS score'), knex.raw('count(*) OVER () AS total'))
              .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }])
              .limit(limit)
              .offset(offset)
          : await base
              .clone()
              .crossJoin(knex.raw(`websearch_to_tsquery('english', ?) AS q`, [text]))
              .whereRaw('facts.search @@ q')
              .select(columns.map((column) => `facts.${column}`))
              .select(knex.raw('ts_rank_cd(facts.search, q) AS score'), knex.raw('count(*) OVER () AS total'))
              .orderBy([{ column: 'score', order: 'desc' }, { column: 'facts.created_at' }, { column: 'facts.id' }])
              .limit(limit)
              .offset(offset);
      let total = rows.length === 0 ? 0 : Number(rows[0].total);
      if (rows.length === 0 && offset > 0) {
        // Past the last page: count separately so the client still learns the total.
        const counted = text === ''
          ? await base.clone().count<{ n: string }[]>('* as n')
          : await base.clone().whereRaw(`facts.search @@ websearch_to_tsquery('english', ?)`, [text]).count<{ n: string }[]>('* as n');
        total = Number(counted[0].n);
      }
      return {
        total,
        items: rows.map(({ total: _total, ...row }) => ({
          ...row,
          score: Number(row.score),
          created_at: new Date(row.created_at).toISOString(),
        })),
      };
    },
  };
}
