import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { AmbiguousConceptError, invalid, notFound, type ConceptCandidate } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { conceptName, conceptNameKey } from '../domain/concept/decider.js';
import { followMergeChain } from '../domain/mergeChain.js';
import { concepts as conceptCollection } from '../search/collections/index.js';
import type { SearchMode } from '../search/hybrid.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { pageOf, countOf, type PageInput } from './paging.js';
import { presentFact, type FactRow } from './present.js';
import { isUuid } from '../util/uuid.js';

/**
 * Concept queries: list and hybrid search, one concept by id or canonical name (a merged one
 * answers with its survivor), its relations in bands (spec "Concept relation (read surface)"),
 * the facts two concepts share, a concept's facts and sources.
 */

export interface ConceptRow {
  id: string;
  repository_id: string;
  canonical_name: string;
  context: string;
  ontology_class: string | null;
  status: 'active' | 'merged';
  merged_into: string | null;
  source_id: string | null;
  fact_count: number;
  embedding_model: string | null;
  created_at: Date | string;
  updated_at: Date | string;
}

const conceptColumns = [
  'id',
  'canonical_name',
  'context',
  'ontology_class',
  'status',
  'merged_into',
  'source_id',
  'fact_count',
  'embedding_model',
  'created_at',
  'updated_at',
];

/** A concept as answered; the canonical name, which the read model keeps among the alias rows, is not listed as an alias. */
function presentConcept(row: ConceptRow, aliases: string[] = []) {
  const { repository_id: _repository, ...rest } = row;
  const name = conceptNameKey(row.canonical_name);
  return {
    ...rest,
    fact_count: Number(row.fact_count),
    aliases: aliases.filter((alias) => conceptNameKey(alias) !== name),
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
  };
}

export type PresentedConcept = ReturnType<typeof presentConcept>;

/** Aliases of each concept, by concept id, in alias order. */
async function aliasesOf(knex: Knex, conceptIds: readonly string[]): Promise<Map<string, string[]>> {
  const result = new Map<string, string[]>(conceptIds.map((id) => [id, []]));
  if (conceptIds.length === 0) return result;
  const rows: { concept_id: string; alias: string }[] = await knex('concept_aliases')
    .whereIn('concept_id', [...conceptIds])
    .orderBy([{ column: 'concept_id' }, { column: 'alias_lower' }])
    .select('concept_id', 'alias');
  for (const row of rows) result.get(row.concept_id)?.push(row.alias);
  return result;
}

/**
 * The repository's facts whose every source was deleted (`facts.unsourced`, see unsourcedFacts in
 * src/read/facts.ts), as a CTE: MATERIALIZED, so it is read first, from the partial index
 * facts_unsourced, and the links are looked up by fact. Nearly always it is empty.
 */
const UNSOURCED_FACTS_CTE = `unsourced AS MATERIALIZED (SELECT id FROM facts WHERE repository_id = ? AND unsourced)`;

/**
 * Per concept of `conceptIds`, how many of its links are to unsourced facts. The read model's
 * `fact_count` and `concept_relations.shared_fact_count` count every link until cleanup_facts
 * retracts the fact (the concepts projection does not know a fact's sources), while every read
 * leaves such facts out from the deletion on: a count a reader shows is the stored one less
 * these. Only the few unsourced facts are read, never a concept's links counted again.
 */
async function unsourcedLinkCounts(knex: Knex, repositoryId: string, conceptIds: readonly string[] | 'all'): Promise<Map<string, number>> {
  if (conceptIds !== 'all' && conceptIds.length === 0) return new Map();
  const { rows } = (await knex.raw(
    `WITH ${UNSOURCED_FACTS_CTE}
     SELECT fc.concept_id, count(*)::integer AS n FROM unsourced JOIN fact_concepts fc ON fc.fact_id = unsourced.id
      ${conceptIds === 'all' ? '' : 'WHERE fc.concept_id = ANY(?::text[])'} GROUP BY fc.concept_id`,
    conceptIds === 'all' ? [repositoryId] : [repositoryId, [...new Set(conceptIds)]],
  )) as { rows: Array<{ concept_id: string; n: number }> };
  return new Map(rows.map((row) => [row.concept_id, Number(row.n)]));
}

/**
 * Per other concept (of `others`, or any), how many unsourced facts it shares with `conceptId`:
 * what a relation's stored shared_fact_count still counts (unsourcedLinkCounts).
 */
async function unsourcedSharedCounts(knex: Knex, repositoryId: string, conceptId: string, others?: readonly string[]): Promise<Map<string, number>> {
  const { rows } = (await knex.raw(
    `WITH ${UNSOURCED_FACTS_CTE}
     SELECT o.concept_id AS other, count(*)::integer AS n FROM unsourced
       JOIN fact_concepts s ON s.fact_id = unsourced.id AND s.concept_id = ?
       JOIN fact_concepts o ON o.fact_id = unsourced.id AND o.concept_id <> s.concept_id
      ${others === undefined ? '' : 'WHERE o.concept_id = ANY(?::text[])'} GROUP BY o.concept_id`,
    others === undefined ? [repositoryId, conceptId] : [repositoryId, conceptId, [...others]],
  )) as { rows: Array<{ other: string; n: number }> };
  return new Map(rows.map((row) => [row.other, Number(row.n)]));
}

/** Counts by id as one JSON parameter, for a join (`jsonb_to_recordset(?::jsonb) AS u(id text, n integer)`). */
const countsParameter = (counts: ReadonlyMap<string, number>): string => JSON.stringify([...counts].map(([id, n]) => ({ id, n })));

/** Concept rows presented with their aliases, their fact_count less their links to unsourced facts (unsourcedLinkCounts). */
async function presentRows(knex: Knex, repositoryId: string, rows: readonly ConceptRow[]): Promise<Map<string, PresentedConcept>> {
  const ids = rows.map((row) => row.id);
  const [aliases, unsourced] = await Promise.all([aliasesOf(knex, ids), unsourcedLinkCounts(knex, repositoryId, ids)]);
  return new Map(rows.map((row) => [row.id, presentConcept({ ...row, fact_count: Number(row.fact_count) - (unsourced.get(row.id) ?? 0) }, aliases.get(row.id) ?? [])]));
}

/** One concept row presented with its aliases (and its fact_count as reads see it: presentRows). */
async function presentOne(knex: Knex, repositoryId: string, row: ConceptRow): Promise<PresentedConcept> {
  const presented = (await presentRows(knex, repositoryId, [row])).get(row.id);
  if (presented === undefined) throw new Error(`concept ${row.id} was not presented`);
  return presented;
}

/** Concept rows by id, presented with their aliases (ids missing from the repository left out); see presentRows. */
export async function presentConcepts(knex: Knex, repositoryId: string, ids: readonly string[]): Promise<Map<string, PresentedConcept>> {
  if (ids.length === 0) return new Map();
  const rows: ConceptRow[] = await knex('concepts').where({ repository_id: repositoryId }).whereIn('id', [...ids]).select([...conceptColumns, 'repository_id']);
  return presentRows(knex, repositoryId, rows);
}

export interface ResolvedConcept {
  concept: ConceptRow;
  /** The merged concept that was asked for, when the answer is its survivor. */
  redirectedFrom: { id: string; canonical_name: string; context: string } | null;
}

/**
 * The active concept a (possibly merged) concept row's merge chain ends at, or null when the
 * chain ends at no active concept: a cycle (two merges that raced, each into the other) or a
 * survivor the read model lacks. Such a concept is not found, as a fact's broken chain is
 * (src/read/facts.ts); answering with the merged row itself showed a concept that is never listed.
 */
async function followToSurvivor(knex: Knex, repositoryId: string, start: ConceptRow): Promise<ResolvedConcept | null> {
  const { node: concept, ended } = await followMergeChain(start, async (current) =>
    current.status === 'merged' && current.merged_into
      ? ((await knex('concepts').where({ repository_id: repositoryId, id: current.merged_into }).first(conceptColumns)) ?? null)
      : null,
  );
  if (!ended || concept.status !== 'active') return null;
  return {
    concept,
    redirectedFrom: concept.id === start.id ? null : { id: start.id, canonical_name: start.canonical_name, context: start.context },
  };
}

/**
 * The active concept each id's merge chain ends at, by the id asked for (the concept itself when
 * it never merged); an id of no concept, or whose chain ends at no active concept, is left out.
 */
export async function survivingConcepts(knex: Knex, repositoryId: string, ids: readonly string[]): Promise<Map<string, ResolvedConcept>> {
  const asked = [...new Set(ids)];
  const rows: ConceptRow[] = asked.length === 0 ? [] : await knex('concepts').where({ repository_id: repositoryId }).whereIn('id', asked).select(conceptColumns);
  const result = new Map<string, ResolvedConcept>();
  for (const row of rows) {
    const resolved = await followToSurvivor(knex, repositoryId, row);
    if (resolved !== null) result.set(row.id, resolved);
  }
  return result;
}

/**
 * A context the caller named (`context`, or the input `name`d so: `other_context`), trimmed as the
 * lookups match it. One of only whitespace names no context: refused, as an empty concept name is,
 * rather than matched against the empty context and answered with nothing found.
 */
export function namedContext(context: string | undefined, name = 'context'): string | undefined {
  if (context === undefined) return undefined;
  const trimmed = context.trim();
  if (trimmed === '') throw invalid(`${name} must not be empty or only whitespace: name a context, or leave ${name} out`);
  return trimmed;
}

/** Whether `context` (matched as the lookups match it: trimmed, without case) is the context of one of `concepts`. */
function inContextOf(context: string, ...concepts: ConceptRow[]): boolean {
  const wanted = context.trim().toLowerCase();
  return concepts.some((concept) => concept.context.toLowerCase() === wanted);
}

/** The concepts a name may mean, by context and then name, as an ambiguous lookup lists them. */
function candidatesOf(concepts: ConceptRow[]): ConceptCandidate[] {
  return concepts
    .map(({ id, canonical_name, context }) => ({ id, canonical_name, context }))
    .sort((a, b) => a.context.localeCompare(b.context) || a.canonical_name.localeCompare(b.canonical_name) || a.id.localeCompare(b.id));
}

/**
 * Finds a concept of the repository by id or by canonical name (case-insensitive; then by an
 * alias), optionally within one context. A merged concept resolves to its survivor. A name
 * several contexts share is ambiguous without a context, and an alias several concepts of one
 * context share is ambiguous in any case: AmbiguousConceptError lists the candidates and names
 * `pickedBy`, the caller's input that gives this name's context. An id is exact: a context given
 * with it must be the concept's own (or its survivor's, after a context migration), else the
 * call is refused, as a context that names another concept is most likely a mistake.
 */
export async function resolveConcept(knex: Knex, repositoryId: string, idOrName: string, pickedContext?: string, pickedBy = 'context'): Promise<ResolvedConcept> {
  // Composed (NFC), as the domain records names and keys aliases: `Zu\u0308rich` finds Zürich.
  const wanted = conceptName(idOrName);
  if (wanted === '') throw invalid('a concept id or name must not be empty');
  const context = namedContext(pickedContext, pickedBy);
  if (isUuid(wanted)) {
    const byId: ConceptRow | undefined = await knex('concepts').where({ repository_id: repositoryId, id: wanted.toLowerCase() }).first(conceptColumns);
    if (byId) {
      const resolved = await followToSurvivor(knex, repositoryId, byId);
      if (resolved === null) throw notFound('concept');
      if (context !== undefined && !inContextOf(context, byId, resolved.concept)) {
        throw invalid(`concept ${byId.id} is in context ${resolved.concept.context}, not ${context}: ${pickedBy}= only picks among concepts that share a name; leave it out with an id`);
      }
      return resolved;
    }
  }
  const inContext = (query: Knex.QueryBuilder, column: string) => (context !== undefined ? query.whereRaw(`lower(${column}) = lower(?)`, [context]) : query);
  const byName: ConceptRow[] = await inContext(
    // By the key the projection stored (conceptNameKey), not SQL lower(), which follows the database's ctype.
    knex('concepts').where({ repository_id: repositoryId, name_key: conceptNameKey(wanted) }),
    'context',
  ).select(conceptColumns);
  let candidates = byName.filter((row) => row.status === 'active');
  if (candidates.length === 0 && byName.length > 0) {
    // Only merged concepts carry the name (e.g. after a context migration): their survivors answer.
    const survivors = (await Promise.all(byName.map((row) => followToSurvivor(knex, repositoryId, row)))).filter((resolved) => resolved !== null);
    const distinct = new Map(survivors.map((resolved) => [resolved.concept.id, resolved]));
    if (distinct.size === 1) return [...distinct.values()][0];
    if (distinct.size > 1) throw new AmbiguousConceptError(wanted, candidatesOf([...distinct.values()].map((resolved) => resolved.concept)), pickedBy);
  }
  if (candidates.length === 0) {
    const byAlias: ConceptRow[] = await inContext(
      knex('concept_aliases as a')
        .join('concepts as c', 'c.id', 'a.concept_id')
        .where({ 'a.repository_id': repositoryId, 'a.alias_lower': conceptNameKey(wanted), 'c.status': 'active' }),
      'c.context',
    ).select(conceptColumns.map((column) => `c.${column}`));
    candidates = [...new Map(byAlias.map((row) => [row.id, row])).values()];
  }
  if (candidates.length === 0) throw notFound('concept');
  if (candidates.length > 1) throw new AmbiguousConceptError(wanted, candidatesOf(candidates), pickedBy);
  return { concept: candidates[0], redirectedFrom: null };
}

export type RelationBand = 'insignificant' | 'weak' | 'stable';

/** The band of a relation (spec "Concept relation"): below min → insignificant; at or above stable → stable; else weak. */
export function relationBand(sharedFactCount: number, thresholds: { minShared: number; stableShared: number }): RelationBand {
  if (sharedFactCount < thresholds.minShared) return 'insignificant';
  if (sharedFactCount >= thresholds.stableShared) return 'stable';
  return 'weak';
}

/** Facts linked to every concept of `conceptIds` (not merged, not unsourced: unsourcedFacts), as a query to select from. */
function sharedFacts(knex: Knex, repositoryId: string, conceptIds: string[]) {
  return knex('facts')
    .where('facts.repository_id', repositoryId)
    .whereNot('facts.status', 'merged')
    .where('facts.unsourced', false)
    .whereIn(
      'facts.id',
      knex('fact_concepts').whereIn('concept_id', conceptIds).groupBy('fact_id').havingRaw('count(DISTINCT concept_id) = ?', [conceptIds.length]).select('fact_id'),
    );
}

/** The newest page of a facts query, presented. */
async function pageOfFacts(query: Knex.QueryBuilder, page: { limit: number; offset: number }) {
  const facts: FactRow[] = await query
    .select('facts.*')
    .orderBy([{ column: 'facts.created_at', order: 'desc' }, { column: 'facts.id' }])
    .limit(page.limit)
    .offset(page.offset);
  return facts.map(presentFact);
}

/** One concept of a repository: by id or canonical name, `context` picking among contexts that share the name. */
export interface ConceptInput {
  repository: string;
  concept: string;
  context?: string;
}

export interface ConceptSearchInput extends PageInput {
  repository: string;
  query?: string;
  /** Also concepts with fewer than `concepts.min_concept_fact_count` facts. */
  show_small?: boolean;
  context?: string;
  mode?: SearchMode;
}

export function conceptQueries(deps: Pick<AppContext, 'db' | 'hybrid' | 'config'>) {
  const knex = deps.db.knex;
  const settings = deps.config.concepts;
  const thresholds = { minShared: settings.min_shared_fact_count, stableShared: settings.stable_shared_fact_count };

  async function load(principal: Principal, input: ConceptInput) {
    const repository = await authorizeRepository(knex, principal, input.repository, 'concepts:read');
    return { repository, ...(await resolveConcept(knex, repository.id, input.concept, input.context)) };
  }

  return {
    /** Hybrid or lexical search over the repository's active concepts, small ones only when asked. */
    async search(principal: Principal, input: ConceptSearchInput) {
      const repository = await authorizeRepository(knex, principal, input.repository, 'concepts:read');
      const { query = '', show_small = false, mode = 'hybrid' } = input;
      const context = namedContext(input.context);
      const page = pageOf(input);
      const minFacts = show_small ? 0 : settings.min_concept_fact_count;
      // The size and context filters are read-model facts (live fact counts): they become the id set the search may return.
      let conceptIds: string[] | undefined;
      if (minFacts > 0 || context !== undefined) {
        // fact_count as reads see it: less the links to unsourced facts (unsourcedLinkCounts).
        const unsourced = minFacts > 0 ? await unsourcedLinkCounts(knex, repository.id, 'all') : new Map<string, number>();
        const eligible = knex('concepts')
          .joinRaw('LEFT JOIN jsonb_to_recordset(?::jsonb) AS u(id text, n integer) ON u.id = concepts.id', [countsParameter(unsourced)])
          .where({ 'concepts.repository_id': repository.id, 'concepts.status': 'active' })
          .whereRaw('concepts.fact_count - COALESCE(u.n, 0) >= ?', [minFacts]);
        if (context !== undefined) eligible.whereRaw('lower(concepts.context) = lower(?)', [context]);
        conceptIds = (await eligible.pluck('concepts.id')) as string[];
      }
      const result = await deps.hybrid.search(conceptCollection, { repositoryId: repository.id, query, ...page, mode, ids: conceptIds });
      const rows = await presentConcepts(knex, repository.id, result.items.map((item) => item.id));
      const items = result.items.flatMap((item) => {
        const row = rows.get(item.id);
        return row ? [{ ...row, score: item.score }] : [];
      });
      return { items, total: result.total, query, mode: result.mode, fallback_reason: result.fallback_reason };
    },

    /** One concept; a merged one answers with its survivor and says which was asked for. */
    async get(principal: Principal, input: ConceptInput) {
      const { repository, concept, redirectedFrom } = await load(principal, input);
      return { ...(await presentOne(knex, repository.id, concept)), redirected_from: redirectedFrom };
    },

    /** The concepts a concept shares facts with, strongest first, with their bands. */
    async relations(principal: Principal, input: ConceptInput & PageInput & { show_insignificant?: boolean }) {
      const { repository, concept, redirectedFrom } = await load(principal, input);
      const page = pageOf(input);
      // The stored count less the unsourced facts the pair shares (unsourcedLinkCounts), in the filters and the order too.
      const unsourced = await unsourcedSharedCounts(knex, repository.id, concept.id);
      const shared = 'r.shared_fact_count - COALESCE(u.n, 0)';
      const relations = knex('concept_relations as r')
        .where('r.repository_id', repository.id)
        .where((query) => query.where('r.concept_a', concept.id).orWhere('r.concept_b', concept.id))
        .joinRaw('JOIN concepts AS o ON o.id = CASE WHEN r.concept_a = ? THEN r.concept_b ELSE r.concept_a END', [concept.id])
        .joinRaw('LEFT JOIN jsonb_to_recordset(?::jsonb) AS u(id text, n integer) ON u.id = o.id', [countsParameter(unsourced)])
        .whereRaw(`${shared} > 0`)
        .where('o.status', 'active');
      if (!input.show_insignificant) relations.whereRaw(`${shared} >= ?`, [thresholds.minShared]);
      const total = await countOf(relations);
      const rows: { other_id: string; shared_fact_count: number }[] = await relations
        .select('o.id as other_id', knex.raw(`${shared} AS shared_fact_count`))
        .orderByRaw(`${shared} DESC, o.canonical_name, o.id`)
        .limit(page.limit)
        .offset(page.offset);
      const others = await presentConcepts(knex, repository.id, rows.map((row) => row.other_id));
      return {
        concept: await presentOne(knex, repository.id, concept),
        redirected_from: redirectedFrom,
        items: rows.map((row) => ({
          concept: others.get(row.other_id),
          shared_fact_count: Number(row.shared_fact_count),
          band: relationBand(Number(row.shared_fact_count), thresholds),
        })),
        total,
      };
    },

    /**
     * The relation between two concepts and the facts they share now. `context` picks the first
     * concept's context and `other_context` the other's: the two names may be of different
     * contexts, so one input cannot pick both.
     */
    async relation(principal: Principal, input: ConceptInput & PageInput & { other: string; other_context?: string }) {
      const { repository, concept, redirectedFrom } = await load(principal, input);
      const page = pageOf(input);
      const { concept: other, redirectedFrom: otherRedirectedFrom } = await resolveConcept(knex, repository.id, input.other, input.other_context, 'other_context');
      if (other.id === concept.id) throw invalid('a concept has no relation to itself');
      const [a, b] = concept.id < other.id ? [concept.id, other.id] : [other.id, concept.id];
      const relation = await knex('concept_relations').where({ repository_id: repository.id, concept_a: a, concept_b: b }).first('shared_fact_count');
      const unsourced = relation ? ((await unsourcedSharedCounts(knex, repository.id, concept.id, [other.id])).get(other.id) ?? 0) : 0;
      const sharedFactCount = relation ? Number(relation.shared_fact_count) - unsourced : 0;
      const shared = sharedFacts(knex, repository.id, [concept.id, other.id]);
      return {
        concept: await presentOne(knex, repository.id, concept),
        redirected_from: redirectedFrom,
        other: await presentOne(knex, repository.id, other),
        other_redirected_from: otherRedirectedFrom,
        shared_fact_count: sharedFactCount,
        band: relationBand(sharedFactCount, thresholds),
        total: await countOf(shared),
        facts: await pageOfFacts(shared, page),
      };
    },

    /** The live facts linked to a concept, newest first. */
    async facts(principal: Principal, input: ConceptInput & PageInput) {
      const { repository, concept } = await load(principal, input);
      const page = pageOf(input);
      const linked = sharedFacts(knex, repository.id, [concept.id]);
      return { concept: await presentOne(knex, repository.id, concept), total: await countOf(linked), items: await pageOfFacts(linked, page) };
    },

    /** The sources a concept's facts came from (merged twins' included), most facts first. */
    async sources(principal: Principal, input: ConceptInput & PageInput) {
      const { repository, concept } = await load(principal, input);
      const page = pageOf(input);
      const sources = knex('sources')
        .join('fact_sources as fs', 'fs.source_id', 'sources.id')
        .whereIn('fs.fact_id', sharedFacts(knex, repository.id, [concept.id]).select('facts.id'))
        .where('sources.repository_id', repository.id)
        .groupBy('sources.id');
      const total = await countOf(knex.from(sources.clone().select('sources.id').as('s')));
      const rows: Record<string, unknown>[] = await sources
        .select('sources.id', 'sources.url', 'sources.doi', 'sources.filename', 'sources.title', 'sources.status')
        .select(knex.raw('count(DISTINCT fs.fact_id)::integer AS fact_count'))
        .orderBy([{ column: 'fact_count', order: 'desc' }, { column: 'sources.id' }])
        .limit(page.limit)
        .offset(page.offset);
      return { concept: await presentOne(knex, repository.id, concept), items: rows, total };
    },
  };
}
