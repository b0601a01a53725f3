import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { invalid } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { summaries as summaryCollection } from '../search/collections/index.js';
import type { SearchMode } from '../search/hybrid.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { namedContext, presentConcepts, resolveConcept, survivingConcepts, type ConceptInput } from './concepts.js';
import { citationsByLiveFact, liveFacts } from './facts.js';
import { countOf, pageOf, type PageInput } from './paging.js';
import { idListColumn, presentFact } from './present.js';

/**
 * Summaries and syntheses of concepts (docs/pipeline.md, "Summaries and syntheses"): a concept's
 * summary slices in order, its definition (the synthesis with the facts it cites and the images
 * it shows), and search over every slice of a repository.
 */

interface SummaryRow {
  id: string;
  concept_id: string;
  slice_number: number;
  is_open: boolean;
  content: string;
  fact_ids: unknown;
  fact_count: number;
  model_id: string;
  reason: string;
  created_at: Date | string;
  updated_at: Date | string;
}

const summaryColumns = ['id', 'concept_id', 'slice_number', 'is_open', 'content', 'fact_ids', 'fact_count', 'model_id', 'reason', 'created_at', 'updated_at'];

function presentSummary(row: SummaryRow) {
  return {
    id: row.id,
    concept_id: row.concept_id,
    slice_number: Number(row.slice_number),
    is_open: row.is_open === true,
    content: row.content,
    fact_ids: idListColumn(row.fact_ids),
    fact_count: Number(row.fact_count),
    model_id: row.model_id,
    reason: row.reason,
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
  };
}

export interface SummarySearchInput extends PageInput {
  repository: string;
  query?: string;
  /** Only slices of this concept (id or name). */
  concept_id?: string;
  /** The context `concept_id` is looked up in, when it is a name several contexts share. */
  context?: string;
  mode?: SearchMode;
}

export function summaryQueries(deps: Pick<AppContext, 'db' | 'hybrid'>) {
  const knex = deps.db.knex;

  async function load(principal: Principal, input: ConceptInput) {
    const repository = await authorizeRepository(knex, principal, input.repository, 'concepts:read');
    const resolved = await resolveConcept(knex, repository.id, input.concept, input.context);
    const presented = (await presentConcepts(knex, repository.id, [resolved.concept.id])).get(resolved.concept.id);
    return { repository, concept: resolved.concept, presented, redirectedFrom: resolved.redirectedFrom };
  }

  const queries = {
    /** A concept's summary slices in slice order (a merged concept answers with its survivor's). */
    async summaries(principal: Principal, input: ConceptInput & PageInput) {
      const { concept, presented, redirectedFrom } = await load(principal, input);
      const page = pageOf(input);
      const slices = knex('concept_summaries').where({ concept_id: concept.id });
      const rows: SummaryRow[] = await slices.clone().select(summaryColumns).orderBy('slice_number').limit(page.limit).offset(page.offset);
      return { concept: presented, redirected_from: redirectedFrom, items: rows.map(presentSummary), total: await countOf(slices) };
    },

    /**
     * The concept's definition: its synthesis with the facts it cites (in order of first
     * citation) and the images it shows; `synthesis` is null until one is made. The synthesis is
     * kept as written until it is made again, so its citations are read as every read of this
     * service reads an id: a cited fact that merged since is shown as its survivor, once however
     * many citations lead to it, with the cited ids that led there (`merged_from`, the ids the
     * content's links name); one retracted or removed since is left out. A related concept that
     * merged since is shown as its survivor (`redirected_from`), once, and never the concept itself.
     */
    async definition(principal: Principal, input: ConceptInput) {
      const { repository, concept, presented, redirectedFrom } = await load(principal, input);
      const row: Record<string, unknown> | undefined = await knex('concept_syntheses').where({ concept_id: concept.id }).first();
      if (!row) return { concept: presented, redirected_from: redirectedFrom, synthesis: null, facts: [], images: [], related_concepts: [] };
      const factIds = idListColumn(row.fact_ids);
      const imageFactIds = idListColumn(row.image_fact_ids);
      const live = await liveFacts(knex, repository.id, [...factIds, ...imageFactIds]);
      const citedFacts = (ids: string[]) => citationsByLiveFact(ids, (id) => id, live);
      const relatedIds = idListColumn(row.related_concept_ids);
      const survivors = await survivingConcepts(knex, repository.id, relatedIds);
      const related = new Map<string, { id: string; canonical_name: string; context: string; redirected_from: Array<{ id: string; canonical_name: string; context: string }> }>();
      for (const id of relatedIds) {
        const resolved = survivors.get(id);
        // A related concept merged into this one is no longer related to it.
        if (!resolved || resolved.concept.id === concept.id) continue;
        const { id: survivorId, canonical_name, context } = resolved.concept;
        const entry = related.get(survivorId) ?? { id: survivorId, canonical_name, context, redirected_from: [] };
        if (resolved.redirectedFrom && !entry.redirected_from.some((from) => from.id === resolved.redirectedFrom?.id)) entry.redirected_from.push(resolved.redirectedFrom);
        related.set(survivorId, entry);
      }
      return {
        concept: presented,
        redirected_from: redirectedFrom,
        synthesis: {
          id: String(row.id),
          content: String(row.content),
          fact_ids: factIds,
          slice_ids: idListColumn(row.slice_ids),
          model_id: String(row.model_id),
          reason: String(row.reason),
          created_at: isoTimestampOrNull(row.created_at as Date | string),
          updated_at: isoTimestampOrNull(row.updated_at as Date | string),
        },
        facts: citedFacts(factIds).map(({ fact, mergedFrom }): ReturnType<typeof presentFact> & { merged_from: string[] } => ({ ...presentFact(fact), merged_from: mergedFrom })),
        images: citedFacts(imageFactIds).map(({ fact, mergedFrom }) => ({
          fact_id: fact.id,
          image_id: (fact.image_id as string | null) ?? null,
          caption: String(fact.content),
          merged_from: mergedFrom,
        })),
        related_concepts: [...related.values()],
      };
    },

    /** Lexical search over the repository's summary slices (the collection keeps no vectors). */
    async search(principal: Principal, input: SummarySearchInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'concepts:read');
      const { query = '', mode = 'hybrid' } = input;
      const page = pageOf(input);
      if (input.concept_id !== undefined && input.concept_id.trim() === '') throw invalid('concept_id must not be empty');
      const context = namedContext(input.context);
      // A context alone would narrow nothing here: said, not ignored.
      if (context !== undefined && input.concept_id === undefined) throw invalid("context picks the context of concept_id's name: give concept_id too");
      // As the facts' `concept` filter: an unknown concept is not_found, a merged one its survivor, a name several contexts share picked by context.
      const concept = input.concept_id === undefined ? undefined : (await resolveConcept(knex, repository.id, input.concept_id, context)).concept;
      const result = await deps.hybrid.search(summaryCollection, {
        repositoryId: repository.id,
        query,
        ...page,
        mode,
        ...(concept !== undefined ? { filters: { concept_id: concept.id } } : {}),
      });
      // An external index may still hold slices of a concept merged since: the read model decides.
      const ids = result.items.map((item) => item.id);
      const rows: SummaryRow[] = ids.length === 0 ? [] : await knex('concept_summaries').where({ repository_id: repository.id }).whereIn('id', ids).select(summaryColumns);
      const byId = new Map(rows.map((row) => [row.id, row]));
      const concepts = await presentConcepts(knex, repository.id, [...new Set(rows.map((row) => row.concept_id))]);
      const items = result.items.flatMap((item) => {
        const row = byId.get(item.id);
        if (!row) return [];
        const concept = concepts.get(row.concept_id);
        return [{ ...presentSummary(row), concept: concept ? { id: concept.id, canonical_name: concept.canonical_name, context: concept.context } : null, score: item.score }];
      });
      return { items, total: result.total, query, mode: result.mode, fallback_reason: result.fallback_reason };
    },
  };

  return {
    ...queries,

    /**
     * A concept's summary slices and its definition in one answer (MCP's getConceptSummaries):
     * the two reads REST answers apart (`GET .../summaries`, `GET .../definition`), the definition
     * read by the id the summaries resolved, so both halves are of one concept even if a name's
     * meaning changes between the reads. Its `facts` are `cited_facts`.
     */
    async summariesWithDefinition(principal: Principal, input: ConceptInput & PageInput) {
      const summaries = await queries.summaries(principal, input);
      const definition = await queries.definition(principal, { repository: input.repository, concept: summaries.concept?.id ?? input.concept, context: input.context });
      return {
        concept: summaries.concept,
        redirected_from: summaries.redirected_from,
        summaries: summaries.items,
        total: summaries.total,
        synthesis: definition.synthesis,
        cited_facts: definition.facts,
        images: definition.images,
        related_concepts: definition.related_concepts,
      };
    },
  };
}
