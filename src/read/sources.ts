import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { invalid, notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { utcMicrosecondsText } from '../db/timestamps.js';
import { afterNewestFirst, countOf, decodeNewestFirstCursor, encodeNewestFirstCursor, pageOf, type PageInput } from './paging.js';
import { presentFact, presentSource, type SourceRow } from './present.js';
import { runeLength } from '../util/codePoints.js';

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

/** Longest `query` of a source search, in characters. */
export const MAX_SOURCE_QUERY_CHARS = 500;

/** Where searchSources looks. The registry has no search client yet (docs/mcp.md): only the repository's own sources. */
export const SOURCE_SEARCH_PROVIDERS = [
  { id: 'local', name: 'This repository', description: "the repository's own sources, by title, URL, DOI or file name", default: true },
] as const;

export interface SourceSearchInput {
  repository: string;
  query: string;
  /** One of SOURCE_SEARCH_PROVIDERS; `local` when absent. */
  provider?: string;
  limit?: number;
  /** Opaque: the `next_cursor` of the previous page. */
  cursor?: string;
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

    /**
     * The repository's own sources whose title, URL, DOI or file name contains every word of
     * `query` (case-insensitive), newest first; `next_cursor` is null on the last page.
     */
    async search(principal: Principal, input: SourceSearchInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:read');
      if (input.provider !== undefined && !SOURCE_SEARCH_PROVIDERS.some((provider) => provider.id === input.provider)) {
        throw invalid(`unknown search provider '${input.provider}': use one of ${SOURCE_SEARCH_PROVIDERS.map((provider) => provider.id).join(', ')}`);
      }
      const words = input.query.trim().split(/\s+/).filter((word) => word !== '');
      if (words.length === 0) throw invalid('query must contain a word');
      if (runeLength(input.query) > MAX_SOURCE_QUERY_CHARS) throw invalid(`query must be at most ${MAX_SOURCE_QUERY_CHARS} characters`);
      const { limit } = pageOf({ limit: input.limit }, 20, 100);
      const after = decodeNewestFirstCursor(input.cursor);
      const query = knex('sources').where({ repository_id: repository.id });
      for (const word of words) {
        const pattern = `%${word.replace(/[\\%_]/g, (character) => `\\${character}`)}%`;
        query.where((match) =>
          match
            .whereRaw('lower(coalesce(title, \'\')) LIKE lower(?)', [pattern])
            .orWhereRaw('lower(coalesce(url, \'\')) LIKE lower(?)', [pattern])
            .orWhereRaw('lower(coalesce(doi, \'\')) LIKE lower(?)', [pattern])
            .orWhereRaw('lower(coalesce(filename, \'\')) LIKE lower(?)', [pattern]),
        );
      }
      const total = await countOf(query);
      // One row past the page says whether there is a next one.
      const rows: Array<SourceRow & { cursor_at: string }> = await afterNewestFirst(query, after)
        .select('*', knex.raw(`${utcMicrosecondsText('created_at')} AS cursor_at`))
        .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }])
        .limit(limit + 1);
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      const more = rows.length > limit && last !== undefined;
      return { items: page.map(({ cursor_at: _cursorAt, ...row }) => presentSource(row)), total, next_cursor: more ? encodeNewestFirstCursor({ at: last.cursor_at, id: last.id }) : null };
    },

    /** The providers `search` can ask; any signed-in caller may list them. */
    searchProviders(_principal: Principal) {
      return { providers: SOURCE_SEARCH_PROVIDERS };
    },

    async get(principal: Principal, input: SourceInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'sources:read');
      return presentSource(await loadSource(knex, repository.id, input.source));
    },

    /** The facts extracted from a source in the order its decomposition gave them (document order, then image facts), with the span each came from. */
    async facts(principal: Principal, input: SourceInput & PageInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'facts:read');
      const page = pageOf(input);
      await loadSource(knex, repository.id, input.source);
      const query = knex('fact_sources').join('facts', 'facts.id', 'fact_sources.fact_id').where({ 'fact_sources.source_id': input.source });
      const total = await countOf(query);
      const rows = await query
        .select('facts.*', 'fact_sources.chunk_index', 'fact_sources.source_text')
        .orderBy(['fact_sources.extraction_order', 'fact_sources.chunk_index', 'fact_sources.sentence_index', 'facts.id'])
        .limit(page.limit)
        .offset(page.offset);
      return { items: rows.map(presentFact), total };
    },
  };
}
