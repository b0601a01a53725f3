import type { Knex } from 'knex';
import type { AppContext } from '../app/context.js';
import { authorizeRepository } from '../app/access.js';
import { notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { countOf, pageOf, type PageInput } from './paging.js';
import { presentFact, presentSource, type SourceRow } from './present.js';

export const sourceStatuses = ['pending', 'fetching', 'fetched', 'decomposing', 'processed', 'failed'] as const;
export type SourceStatus = (typeof sourceStatuses)[number];

export interface SourceInput {
  repository: string;
  source: string;
}

/** A source row of the repository, or `not_found`. */
export async function loadSource(knex: Knex, repositoryId: string, sourceId: string): Promise<SourceRow> {
  const row: SourceRow | undefined = await knex('sources').where({ id: sourceId, repository_id: repositoryId }).first();
  if (!row) throw notFound('source');
  return row;
}

/** Source queries: a repository's sources, one source, and the facts that came from it. */
export function sourceQueries(deps: Pick<AppContext, 'db'>) {
  const knex = deps.db.knex;
  return {
    /** Newest first, optionally only those in one status. */
    async list(principal: Principal, input: PageInput & { repository: string; status?: SourceStatus }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:read');
      const page = pageOf(input);
      const query = knex('sources').where({ repository_id: repository.id });
      if (input.status) query.where({ status: input.status });
      const total = await countOf(query);
      const rows: SourceRow[] = await query.orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }]).limit(page.limit).offset(page.offset);
      return { items: rows.map(presentSource), total };
    },

    async get(principal: Principal, input: SourceInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:read');
      return presentSource(await loadSource(knex, repository.id, input.source));
    },

    /** The facts extracted from a source, in document order, with the span each came from. */
    async facts(principal: Principal, input: SourceInput & PageInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'facts:read');
      const page = pageOf(input);
      await loadSource(knex, repository.id, input.source);
      const query = knex('fact_sources').join('facts', 'facts.id', 'fact_sources.fact_id').where({ 'fact_sources.source_id': input.source });
      const total = await countOf(query);
      const rows = await query
        .select('facts.*', 'fact_sources.chunk_index', 'fact_sources.source_text')
        .orderBy([{ column: 'fact_sources.chunk_index' }, { column: 'facts.created_at' }, { column: 'facts.id' }])
        .limit(page.limit)
        .offset(page.offset);
      return { items: rows.map(presentFact), total };
    },
  };
}

export type SourceQueries = ReturnType<typeof sourceQueries>;
