import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeInRepository, authorizeRepository } from '../app/access.js';
import { DomainError } from '../domain/decider.js';
import { notFound } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { presentConcepts } from './concepts.js';
import { websearchQueryText } from '../search/port.js';
import { countOf, pageOf, type PageInput } from './paging.js';
import { presentFact, presentSource } from './present.js';

export interface InvestigationInput {
  repository: string;
  investigation: string;
}

export interface InvestigationRow {
  id: string;
  repository_id: string;
  title: string;
  topic: string;
  created_by: string;
  created_at: Date | string;
  updated_at: Date | string;
  deleted_at: Date | string | null;
}

/** An investigation of the repository; a deleted one is `gone`, one of another repository not there. */
export async function loadInvestigation(knex: Knex, repositoryId: string, investigationId: string): Promise<InvestigationRow> {
  const row: InvestigationRow | undefined = await knex('investigations').where({ id: investigationId, repository_id: repositoryId }).first();
  if (!row) throw notFound('investigation');
  if (row.deleted_at !== null) throw new DomainError('gone', 'investigation was deleted');
  return row;
}

function presentInvestigation(row: InvestigationRow, sourceCount: number) {
  return {
    id: row.id,
    repository_id: row.repository_id,
    title: row.title,
    topic: row.topic,
    source_count: sourceCount,
    created_by: row.created_by,
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
  };
}

/** How many live sources the investigation gathers (what its cap counts). */
export async function liveSourceCount(knex: Knex, investigationId: string): Promise<number> {
  return (await sourceCounts(knex, [investigationId])).get(investigationId) ?? 0;
}

/** Source counts of investigations, in one statement. */
async function sourceCounts(knex: Knex, investigationIds: readonly string[]): Promise<Map<string, number>> {
  if (investigationIds.length === 0) return new Map();
  // Live sources only, as the list shows them: a link that a release before withSourceLock
  // (src/app/sources.ts) added as its source was being deleted outlived the deletion's clean-up,
  // and a log keeps it.
  const rows: Array<{ investigation_id: string; n: number }> = await knex('investigation_sources as i')
    .join('sources', 'sources.id', 'i.source_id')
    .whereIn('i.investigation_id', [...investigationIds])
    .groupBy('i.investigation_id')
    .select('i.investigation_id', knex.raw('count(*)::integer AS n'));
  return new Map(rows.map((row) => [row.investigation_id, Number(row.n)]));
}

export async function presentInvestigationById(knex: Knex, repositoryId: string, investigationId: string) {
  const row = await loadInvestigation(knex, repositoryId, investigationId);
  return presentInvestigation(row, (await sourceCounts(knex, [row.id])).get(row.id) ?? 0);
}

/** The ids of an investigation's sources (its tasks are theirs). */
export async function investigationSourceIds(knex: Knex, investigationId: string): Promise<string[]> {
  return (await knex('investigation_sources as i').join('sources', 'sources.id', 'i.source_id').where({ 'i.investigation_id': investigationId }).pluck('i.source_id')) as string[];
}

/** The live facts (new or stable, not merged) extracted from an investigation's sources. */
function investigationFacts(knex: Knex, investigationId: string): Knex.QueryBuilder {
  return knex('facts')
    .whereIn(
      'facts.id',
      knex('fact_sources as fs').join('investigation_sources as i', 'i.source_id', 'fs.source_id').where('i.investigation_id', investigationId).select('fs.fact_id'),
    )
    .whereIn('facts.status', ['new', 'stable']);
}

/**
 * Investigation queries: the list (optionally searched by title and topic), one investigation,
 * and what it gathered: its sources, their facts, and the concepts those facts are linked to.
 */
export function investigationQueries(deps: Pick<AppContext, 'db'>) {
  const knex = deps.db.knex;

  async function load(principal: Principal, input: InvestigationInput, alsoNeeds?: 'sources:read' | 'facts:read' | 'concepts:read') {
    const repository = await authorizeRepository(knex, principal, input.repository, 'investigations:read');
    if (alsoNeeds) authorizeInRepository(principal, repository.id, alsoNeeds);
    return { repository, investigation: await loadInvestigation(knex, repository.id, input.investigation) };
  }

  const queries = {
    /** Newest first; `query` matches words of the title or topic. */
    async list(principal: Principal, input: PageInput & { repository: string; query?: string }) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'investigations:read');
      const page = pageOf(input);
      const query = knex('investigations').where({ repository_id: repository.id }).whereNull('deleted_at');
      const text = input.query?.trim() ?? '';
      if (text !== '') query.whereRaw(`search @@ websearch_to_tsquery('english', ?)`, [websearchQueryText(text)]);
      const total = await countOf(query);
      const rows: InvestigationRow[] = await query
        .select('*')
        .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }])
        .limit(page.limit)
        .offset(page.offset);
      const counts = await sourceCounts(knex, rows.map((row) => row.id));
      return { items: rows.map((row) => presentInvestigation(row, counts.get(row.id) ?? 0)), total };
    },

    async get(principal: Principal, input: InvestigationInput) {
      const { repository } = await load(principal, input);
      return presentInvestigationById(knex, repository.id, input.investigation);
    },

    /** Its sources in the order they were added. */
    async sources(principal: Principal, input: InvestigationInput & PageInput) {
      const { investigation } = await load(principal, input, 'sources:read');
      const page = pageOf(input);
      const query = knex('investigation_sources as i').join('sources', 'sources.id', 'i.source_id').where('i.investigation_id', investigation.id);
      const total = await countOf(query);
      const rows = await query
        .select('sources.*')
        .orderBy([{ column: 'i.position' }, { column: 'sources.id' }])
        .limit(page.limit)
        .offset(page.offset);
      return { items: rows.map(presentSource), total };
    },

    /** The live facts of its sources, oldest first; a fact several of them share is listed once. */
    async facts(principal: Principal, input: InvestigationInput & PageInput) {
      const { investigation } = await load(principal, input, 'facts:read');
      const page = pageOf(input);
      const query = investigationFacts(knex, investigation.id);
      const total = await countOf(query);
      const rows = await query
        .select('facts.*')
        .orderBy([{ column: 'facts.created_at' }, { column: 'facts.id' }])
        .limit(page.limit)
        .offset(page.offset);
      return { items: rows.map(presentFact), total };
    },

    /**
     * The active concepts its facts are linked to, those linked to most of its facts first, each
     * with `investigation_fact_count` (how many of the investigation's facts it covers).
     */
    async concepts(principal: Principal, input: InvestigationInput & PageInput) {
      const { repository, investigation } = await load(principal, input, 'concepts:read');
      const page = pageOf(input);
      const query = knex('fact_concepts as fc')
        .join('concepts as c', 'c.id', 'fc.concept_id')
        .where('c.status', 'active')
        .whereIn('fc.fact_id', investigationFacts(knex, investigation.id).select('facts.id'))
        .groupBy('c.id', 'c.canonical_name');
      const total = Number((await knex.from(query.clone().select('c.id').as('linked')).count<{ n: string }[]>('* as n'))[0].n);
      const rows: Array<{ id: string; n: number }> = await query
        .select('c.id', knex.raw('count(*)::integer AS n'))
        .orderBy([{ column: 'n', order: 'desc' }, { column: 'c.canonical_name' }, { column: 'c.id' }])
        .limit(page.limit)
        .offset(page.offset);
      const presented = await presentConcepts(knex, repository.id, rows.map((row) => row.id));
      return {
        items: rows.flatMap((row) => {
          const concept = presented.get(row.id);
          return concept ? [{ ...concept, investigation_fact_count: Number(row.n) }] : [];
        }),
        total,
      };
    },
  };

  return {
    ...queries,

    /**
     * The investigation with a page of its sources in one answer (MCP's getInvestigation): what
     * `GET .../investigations/{id}` and `GET .../sources` answer apart; it needs `sources:read`
     * as the sources route does.
     */
    async withSources(principal: Principal, input: InvestigationInput & PageInput) {
      const investigation = await queries.get(principal, input);
      const sources = await queries.sources(principal, input);
      return { ...investigation, sources: sources.items };
    },
  };
}
