import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { invalid, notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { followMergeChain } from '../domain/mergeChain.js';
import { isUuid } from '../util/uuid.js';
import { facts as factCollection } from '../search/collections/index.js';
import type { SearchMode } from '../search/hybrid.js';
import { namedContext, presentConcepts, resolveConcept } from './concepts.js';
import { pageOf, type PageInput } from './paging.js';
import { presentFact, type FactRow } from './present.js';

/** Most concepts `concepts` may name (each is resolved, then their fact sets intersected). */
export const MAX_CONCEPT_FILTER = 20;

export interface FactSearchInput extends PageInput {
  repository: string;
  query?: string;
  /** Only facts linked to this concept (id or canonical name). */
  concept?: string;
  /** Comma-separated concept ids or names: only facts linked to all of them. */
  concepts?: string;
  /** Only facts linked to an active concept of this context (and names are looked up in it). */
  context?: string;
  mode?: SearchMode;
}

export interface FactInput {
  repository: string;
  fact: string;
}

/**
 * The fact ids the concept filters allow (facts linked to every named concept, and to any
 * active concept of the context), or undefined when no filter is given.
 */
async function factFilter(knex: Knex, repositoryId: string, filters: Pick<FactSearchInput, 'concept' | 'concepts' | 'context'>): Promise<string[] | undefined> {
  const context = namedContext(filters.context);
  const named = [
    ...(filters.concept !== undefined ? [filters.concept] : []),
    ...(filters.concepts ?? '').split(',').map((part) => part.trim()).filter((part) => part !== ''),
  ];
  if (filters.concepts !== undefined && named.length === (filters.concept !== undefined ? 1 : 0)) throw invalid('concepts must list at least one concept id or name');
  if (named.length > MAX_CONCEPT_FILTER) throw invalid(`concepts may name at most ${MAX_CONCEPT_FILTER} concepts`);
  if (named.length === 0 && context === undefined) return undefined;
  // With a context, a concept name is looked up in that context (it also narrows the facts to it).
  const conceptIds = new Set<string>();
  for (const name of named) conceptIds.add((await resolveConcept(knex, repositoryId, name, context)).concept.id);
  const query = knex('fact_concepts').where('fact_concepts.repository_id', repositoryId);
  if (conceptIds.size > 0) {
    query.whereIn(
      'fact_concepts.fact_id',
      knex('fact_concepts').whereIn('concept_id', [...conceptIds]).groupBy('fact_id').havingRaw('count(DISTINCT concept_id) = ?', [conceptIds.size]).select('fact_id'),
    );
  }
  if (context !== undefined) {
    query.whereIn(
      'fact_concepts.concept_id',
      knex('concepts').where({ repository_id: repositoryId, status: 'active' }).whereRaw('lower(context) = lower(?)', [context]).select('id'),
    );
  }
  return (await query.distinct('fact_concepts.fact_id').pluck('fact_concepts.fact_id')) as string[];
}


/**
 * The facts of a repository whose every source was deleted (`unsourced`): cleanup_facts retracts
 * them, a moment or a backlog later; until then every read leaves them out, as if retracted, from
 * the moment the deletion is acknowledged. Searches hide them (`hide`, on either search adapter:
 * the index does not know a fact's sources); reads of the read models leave them out themselves.
 */
export async function unsourcedFacts(knex: Knex, repositoryId: string): Promise<string[]> {
  return (await knex('facts').where({ repository_id: repositoryId, unsourced: true }).pluck('id')) as string[];
}

/** A fact any read shows: not merged, not unsourced (its every source deleted, see unsourcedFacts). */
const isLive = (row: FactRow | undefined): row is FactRow => row !== undefined && row.status !== 'merged' && row.unsourced !== true;

/**
 * The live fact each id names, by the id asked for; an id whose merge chain ends at no live fact
 * (the fact retracted, removed or unsourced, a cycle) is left out. A merged fact's row goes once
 * cleanup_facts removes it, seconds after the merge; its redirect stays in `fact_redirects`, so
 * an id a report, a synthesis or a client kept still leads to its survivor. The rows are read in
 * one statement; only a merged or missing one walks its chain.
 */
export async function liveFacts(knex: Knex, repositoryId: string, factIds: readonly string[]): Promise<Map<string, FactRow>> {
  const asked = [...new Set(factIds)];
  const rows: FactRow[] = asked.length === 0 ? [] : await knex('facts').where({ repository_id: repositoryId }).whereIn('id', asked).select('*');
  const byId = new Map(rows.map((row) => [row.id, row]));
  const nodeOf = async (id: string) => ({ id, row: (await knex('facts').where({ id, repository_id: repositoryId }).first()) as FactRow | undefined });
  const result = new Map<string, FactRow>();
  for (const id of asked) {
    const { node, ended } = await followMergeChain({ id, row: byId.get(id) }, async ({ id, row }) => {
      if (row && row.status !== 'merged') return null;
      const survivor = (row?.merged_into as string | null | undefined) ?? ((await knex('fact_redirects').where({ fact_id: id, repository_id: repositoryId }).first('survivor_id')) as { survivor_id: string } | undefined)?.survivor_id;
      return survivor && survivor !== id ? nodeOf(survivor) : null;
    });
    if (ended && isLive(node.row)) result.set(id, node.row);
  }
  return result;
}

/**
 * Citations of fact ids grouped by the live fact each leads to (`live`: liveFacts' answer for
 * their ids), in order of first citation: each live fact once, with its citations and the cited
 * ids that merged into it (`mergedFrom`); a citation that leads to no live fact is left out. How a
 * synthesis's and a report's kept citations are shown.
 */
export function citationsByLiveFact<C>(
  citations: readonly C[],
  factIdOf: (citation: C) => string,
  live: ReadonlyMap<string, FactRow>,
): Array<{ fact: FactRow; mergedFrom: string[]; citations: C[] }> {
  const grouped = new Map<string, { fact: FactRow; mergedFrom: string[]; citations: C[] }>();
  for (const citation of citations) {
    const id = factIdOf(citation);
    const fact = live.get(id);
    if (!fact) continue;
    const entry = grouped.get(fact.id) ?? { fact, mergedFrom: [], citations: [] };
    entry.citations.push(citation);
    if (id !== fact.id && !entry.mergedFrom.includes(id)) entry.mergedFrom.push(id);
    grouped.set(fact.id, entry);
  }
  return [...grouped.values()];
}

/**
 * Fact queries: search (hybrid or lexical, websearch syntax) narrowed by concepts or a context,
 * one fact with its sources, and the concepts a fact is linked to.
 */
export function factQueries(deps: Pick<AppContext, 'db' | 'hybrid'>) {
  const knex = deps.db.knex;
  /**
   * The live fact an id names (liveFacts), and the id asked for when a merge led elsewhere. Ids
   * are UUIDs, compared in lower case as PostgreSQL prints them.
   */
  const resolveFact = async (repositoryId: string, factId: string): Promise<{ fact: FactRow; mergedFrom: string | null }> => {
    const asked = isUuid(factId) ? factId.toLowerCase() : factId;
    const fact = (await liveFacts(knex, repositoryId, [asked])).get(asked);
    if (!fact) throw notFound('fact');
    return { fact, mergedFrom: fact.id === asked ? null : asked };
  };

  return {
    async search(principal: Principal, input: FactSearchInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'facts:read');
      const { query = '', mode = 'hybrid' } = input;
      const page = pageOf(input);
      const factIds = await factFilter(knex, repository.id, input);
      const hide = await unsourcedFacts(knex, repository.id);
      const result = await deps.hybrid.search(factCollection, { repositoryId: repository.id, query, ...page, mode, ids: factIds, hide });
      return { items: result.items, total: result.total, query, mode: result.mode, fallback_reason: result.fallback_reason };
    },

    /** One fact with the sources it came from; a merged fact answers with its survivor (`merged_from` = the id asked for). */
    async get(principal: Principal, input: FactInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'facts:read');
      const { fact, mergedFrom } = await resolveFact(repository.id, input.fact);
      const sources = await knex('fact_sources')
        .join('sources', 'sources.id', 'fact_sources.source_id')
        .where({ 'fact_sources.fact_id': fact.id })
        .orderBy('sources.created_at')
        .select('fact_sources.source_id', 'sources.url', 'sources.doi', 'sources.filename', 'sources.title', 'fact_sources.chunk_index', 'fact_sources.source_text');
      return { ...presentFact(fact), merged_from: mergedFrom, sources };
    },

    /** The active concepts a fact is linked to; a merged fact's links moved to its survivor (docs/pipeline.md), which answers. */
    async concepts(principal: Principal, input: FactInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'facts:read');
      const { fact, mergedFrom } = await resolveFact(repository.id, input.fact);
      const conceptIds = (await knex('fact_concepts as fc')
        .join('concepts as c', 'c.id', 'fc.concept_id')
        .where({ 'fc.fact_id': fact.id, 'c.status': 'active' })
        .orderBy([{ column: 'c.canonical_name' }, { column: 'c.context' }, { column: 'c.id' }])
        .pluck('c.id')) as string[];
      const presented = await presentConcepts(knex, repository.id, conceptIds);
      return {
        fact_id: fact.id,
        merged_from: mergedFrom,
        items: conceptIds.flatMap((id) => presented.get(id) ?? []),
        total: conceptIds.length,
      };
    },
  };
}
