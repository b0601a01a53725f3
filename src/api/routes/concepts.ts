import type { FastifyError, FastifyPluginAsync } from 'fastify';
import type { Knex } from 'knex';
import type { AppContext } from '../../app/context.js';
import { repositoryDecider } from '../../domain/repository/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import { isUuid, jobIdFor } from '../../pipeline/jobs.js';
import { errorReplySchema, HttpError, notFound } from '../errors.js';
import { requestMetadata, requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, isoDate, pagingQuery, searchModeQuery, searchReply } from '../schemas.js';
import { factSchema, presentFact } from './facts.js';
import { jobSchema, presentJob } from './tasks.js';

/**
 * Concepts: list and hybrid search, one concept by id or canonical name, its relations (bands of
 * spec "Concept relation (read surface)"), its facts and sources, and context migration.
 */

/** A canonical name in several contexts: 409 with the contexts, so the caller can pick one with `?context=`. */
export class AmbiguousConceptError extends HttpError {
  constructor(
    readonly conceptName: string,
    readonly contexts: string[],
  ) {
    super(409, 'ambiguous_concept', `concept '${conceptName}' exists in several contexts (${contexts.join(', ')}): pass context= to pick one`);
  }
}

/** The 409 reply of routes that resolve a concept by name: `{error, message, contexts}`. */
export const conceptErrorReplies = {
  ...errorReplies,
  409: {
    type: 'object',
    required: ['error', 'message'],
    properties: { ...errorReplySchema.properties, contexts: { type: 'array', items: { type: 'string' } } },
  },
} as const;

export const conceptSummarySchema = {
  type: 'object',
  required: ['id', 'canonical_name', 'context', 'status', 'fact_count'],
  properties: {
    id: { type: 'string' },
    canonical_name: { type: 'string' },
    context: { type: 'string' },
    ontology_class: { type: ['string', 'null'] },
    status: { type: 'string', enum: ['active', 'merged'] },
    merged_into: { type: ['string', 'null'] },
    fact_count: { type: 'integer' },
    aliases: { type: 'array', items: { type: 'string' } },
    source_id: { type: ['string', 'null'] },
    embedding_model: { type: ['string', 'null'] },
    score: { type: 'number', description: 'relevance to the query (search only; fused score in hybrid mode)' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

/** `?context=`: which context's concept a canonical name shared by several contexts means. */
const contextQuery = { context: { type: 'string', minLength: 1, maxLength: 200 } } as const;

/** The reply of a page of things about one concept: `{concept, items, total}`. */
const conceptPageReply = <Item extends object>(item: Item, extra: Record<string, object> = {}) =>
  ({
    type: 'object',
    required: ['concept', 'items', 'total'],
    properties: { concept: conceptSummarySchema, ...extra, items: { type: 'array', items: item }, total: { type: 'integer' } },
  }) as const;

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

/** A concept for the API; the canonical name, which the read model keeps among the alias rows, is not listed as an alias. */
export function presentConcept(row: ConceptRow, aliases: string[] = []) {
  const { repository_id: _repository, ...rest } = row;
  const name = row.canonical_name.toLowerCase();
  return {
    ...rest,
    fact_count: Number(row.fact_count),
    aliases: aliases.filter((alias) => alias.toLowerCase() !== name),
    created_at: isoDate(row.created_at),
    updated_at: isoDate(row.updated_at),
  };
}

/** Aliases of each concept, by concept id, in alias order. */
export async function aliasesOf(knex: Knex, conceptIds: readonly string[]): Promise<Map<string, string[]>> {
  const result = new Map<string, string[]>(conceptIds.map((id) => [id, []]));
  if (conceptIds.length === 0) return result;
  const rows: { concept_id: string; alias: string }[] = await knex('concept_aliases')
    .whereIn('concept_id', [...conceptIds])
    .orderBy([{ column: 'concept_id' }, { column: 'alias_lower' }])
    .select('concept_id', 'alias');
  for (const row of rows) result.get(row.concept_id)?.push(row.alias);
  return result;
}

/** Concept rows by id, presented with their aliases, in the order of `ids` (missing ids left out). */
export async function presentConcepts(knex: Knex, repositoryId: string, ids: readonly string[]) {
  if (ids.length === 0) return new Map<string, ReturnType<typeof presentConcept>>();
  const rows: ConceptRow[] = await knex('concepts').where({ repository_id: repositoryId }).whereIn('id', [...ids]).select([...conceptColumns, 'repository_id']);
  const aliases = await aliasesOf(knex, rows.map((row) => row.id));
  return new Map(rows.map((row) => [row.id, presentConcept(row, aliases.get(row.id) ?? [])]));
}

export interface ResolvedConcept {
  concept: ConceptRow;
  /** The merged concept that was asked for, when the answer is its survivor. */
  redirectedFrom: { id: string; canonical_name: string; context: string } | null;
}

/** Merge chains are short; this bounds a corrupt cycle. */
const MAX_MERGE_CHAIN = 32;

async function followToSurvivor(knex: Knex, repositoryId: string, start: ConceptRow): Promise<ResolvedConcept> {
  let current = start;
  for (let step = 0; current.status === 'merged' && current.merged_into && step < MAX_MERGE_CHAIN; step += 1) {
    const next: ConceptRow | undefined = await knex('concepts').where({ repository_id: repositoryId, id: current.merged_into }).first(conceptColumns);
    if (!next) break;
    current = next;
  }
  return {
    concept: current,
    redirectedFrom: current.id === start.id ? null : { id: start.id, canonical_name: start.canonical_name, context: start.context },
  };
}

/**
 * Finds a concept of the repository by id or by canonical name (case-insensitive; then by an
 * alias), optionally within one context. A merged concept resolves to its survivor. A name
 * several contexts share is ambiguous without a context: AmbiguousConceptError (409).
 */
export async function resolveConcept(knex: Knex, repositoryId: string, idOrName: string, context?: string): Promise<ResolvedConcept> {
  const wanted = idOrName.trim();
  if (wanted === '') throw new HttpError(400, 'bad_request', 'a concept id or name must not be empty');
  if (isUuid(wanted)) {
    const byId: ConceptRow | undefined = await knex('concepts').where({ repository_id: repositoryId, id: wanted.toLowerCase() }).first(conceptColumns);
    if (byId) return followToSurvivor(knex, repositoryId, byId);
  }
  const inContext = (query: Knex.QueryBuilder, column: string) => (context ? query.whereRaw(`lower(${column}) = lower(?)`, [context.trim()]) : query);
  const byName: ConceptRow[] = await inContext(
    knex('concepts').where({ repository_id: repositoryId }).whereRaw('lower(canonical_name) = lower(?)', [wanted]),
    'context',
  ).select(conceptColumns);
  let candidates = byName.filter((row) => row.status === 'active');
  if (candidates.length === 0 && byName.length > 0) {
    // Only merged concepts carry the name (e.g. after a context migration): their survivors answer.
    const survivors = await Promise.all(byName.map((row) => followToSurvivor(knex, repositoryId, row)));
    const distinct = new Map(survivors.map((resolved) => [resolved.concept.id, resolved]));
    if (distinct.size === 1) return [...distinct.values()][0];
    throw new AmbiguousConceptError(wanted, [...new Set(survivors.map((resolved) => resolved.concept.context))].sort());
  }
  if (candidates.length === 0) {
    const byAlias: ConceptRow[] = await inContext(
      knex('concept_aliases as a')
        .join('concepts as c', 'c.id', 'a.concept_id')
        .where({ 'a.repository_id': repositoryId, 'a.alias_lower': wanted.toLowerCase(), 'c.status': 'active' }),
      'c.context',
    ).select(conceptColumns.map((column) => `c.${column}`));
    candidates = [...new Map(byAlias.map((row) => [row.id, row])).values()];
  }
  if (candidates.length === 0) throw notFound('concept');
  if (candidates.length > 1) throw new AmbiguousConceptError(wanted, [...new Set(candidates.map((row) => row.context))].sort());
  return { concept: candidates[0], redirectedFrom: null };
}

export type RelationBand = 'insignificant' | 'weak' | 'stable';

/** The band of a relation (spec "Concept relation"): below min → insignificant; at or above stable → stable; else weak. */
export function relationBand(sharedFactCount: number, thresholds: { minShared: number; stableShared: number }): RelationBand {
  if (sharedFactCount < thresholds.minShared) return 'insignificant';
  if (sharedFactCount >= thresholds.stableShared) return 'stable';
  return 'weak';
}

const booleanQuery = { type: 'boolean', default: false } as const;

const relationSchema = {
  type: 'object',
  required: ['concept', 'shared_fact_count', 'band'],
  properties: {
    concept: conceptSummarySchema,
    shared_fact_count: { type: 'integer' },
    band: { type: 'string', enum: ['insignificant', 'weak', 'stable'] },
  },
} as const;

const redirectSchema = {
  type: ['object', 'null'],
  description: 'the merged concept that was asked for, when the answer is its survivor',
  properties: { id: { type: 'string' }, canonical_name: { type: 'string' }, context: { type: 'string' } },
} as const;

export const conceptRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['concepts'], security: bearerSecurity };
  const knex = context.db.knex;
  const settings = context.config.concepts;
  const thresholds = { minShared: settings.min_shared_fact_count, stableShared: settings.stable_shared_fact_count };
  const conceptParams = {
    type: 'object',
    required: ['repoID', 'conceptID'],
    properties: { repoID: { type: 'string', minLength: 1 }, conceptID: { type: 'string', minLength: 1, maxLength: 500 } },
  } as const;

  // The 409 of an ambiguous name lists the contexts; every other error goes to the app's handler.
  app.setErrorHandler((error: FastifyError | Error, _request, reply) => {
    if (error instanceof AmbiguousConceptError) {
      return reply.status(409).send({ error: error.code, message: error.message, contexts: error.contexts });
    }
    throw error;
  });

  const load = async (repositoryId: string, idOrName: string, conceptContext?: string) => resolveConcept(knex, repositoryId, idOrName, conceptContext);

  app.get<{
    Params: { repoID: string };
    Querystring: { query: string; show_small: boolean; context?: string; mode: 'hybrid' | 'lexical'; limit: number; offset: number };
  }>(
    '/api/v1/repositories/:repoID/concepts',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            query: { type: 'string', maxLength: 1000, default: '' },
            show_small: { ...booleanQuery, description: `also concepts with fewer than concepts.min_concept_fact_count (${settings.min_concept_fact_count}) facts` },
            context: { type: 'string', minLength: 1, maxLength: 200 },
            mode: searchModeQuery,
            ...pagingQuery,
          },
        },
        response: {
          200: searchReply(conceptSummarySchema),
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { query, show_small, context: conceptContext, mode, limit, offset } = request.query;
      const minFacts = show_small ? 0 : settings.min_concept_fact_count;
      // The size and context filters are read-model facts (live fact counts): they become the id set the search may return.
      let conceptIds: string[] | undefined;
      if (minFacts > 0 || conceptContext !== undefined) {
        const eligible = knex('concepts').where({ repository_id: repository.id, status: 'active' }).where('fact_count', '>=', minFacts);
        if (conceptContext !== undefined) eligible.whereRaw('lower(context) = lower(?)', [conceptContext.trim()]);
        conceptIds = (await eligible.pluck('id')) as string[];
      }
      const result = await context.hybrid.searchConcepts({ repositoryId: repository.id, query, limit, offset, mode, conceptIds });
      const rows = await presentConcepts(knex, repository.id, result.items.map((item) => item.id));
      const items = result.items.flatMap((item) => {
        const row = rows.get(item.id);
        return row ? [{ ...row, score: item.score }] : [];
      });
      return { items, total: result.total, query, mode: result.mode, fallback_reason: result.fallback_reason };
    },
  );

  app.post<{ Params: { repoID: string }; Body: { from_context: string; to_context: string } }>(
    '/api/v1/repositories/:repoID/concepts/migrate-context',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['from_context', 'to_context'],
          properties: { from_context: { type: 'string', minLength: 1, maxLength: 200 }, to_context: { type: 'string', minLength: 1, maxLength: 200 } },
        },
        response: {
          202: {
            type: 'object',
            required: ['task_id', 'from_context', 'to_context'],
            properties: {
              task_id: { type: 'string', description: 'the migrate_context task: GET .../tasks/{task_id}' },
              task: { anyOf: [{ type: 'null' }, jobSchema] },
              from_context: { type: 'string' },
              to_context: { type: 'string' },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request, reply) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'concepts:write');
      const repositoryStream = streamName('repository', repository.id);
      const result = await context.commands.execute(
        repositoryStream,
        repositoryDecider,
        { type: 'RequestContextMigration', fromContext: request.body.from_context, toContext: request.body.to_context },
        requestMetadata(request, principal, repository.id),
      );
      if (result.write === null) throw new HttpError(409, 'conflict', 'the migration was not recorded');
      const [requested] = await context.store.readStream(repositoryStream, { fromVersion: result.write.streamVersion, limit: 1 });
      const data = requested.data as { from_context: string; to_context: string };
      // The job id is derived from (kind, subject, trigger), so it is known before intake inserts the row.
      const taskId = jobIdFor('migrate_context', repository.id, requested.eventId);
      const task = await context.jobs.get(taskId);
      return reply.status(202).send({ task_id: taskId, task: task ? presentJob(task) : null, from_context: data.from_context, to_context: data.to_context });
    },
  );

  app.get<{ Params: { repoID: string; conceptID: string }; Querystring: { context?: string } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID',
    {
      schema: {
        ...schema,
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: contextQuery },
        response: {
          200: { ...conceptSummarySchema, properties: { ...conceptSummarySchema.properties, redirected_from: redirectSchema } },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { concept, redirectedFrom } = await load(repository.id, request.params.conceptID, request.query.context);
      const aliases = await aliasesOf(knex, [concept.id]);
      return { ...presentConcept(concept, aliases.get(concept.id) ?? []), redirected_from: redirectedFrom };
    },
  );

  app.get<{ Params: { repoID: string; conceptID: string }; Querystring: { context?: string; show_insignificant: boolean; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/relations',
    {
      schema: {
        ...schema,
        params: conceptParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            ...contextQuery,
            show_insignificant: {
              ...booleanQuery,
              description: `also relations below concepts.min_shared_fact_count (${settings.min_shared_fact_count}) shared facts`,
            },
            ...pagingQuery,
          },
        },
        response: {
          200: conceptPageReply(relationSchema, { redirected_from: redirectSchema }),
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { concept, redirectedFrom } = await load(repository.id, request.params.conceptID, request.query.context);
      const { show_insignificant, limit, offset } = request.query;
      const relations = knex('concept_relations as r')
        .where('r.repository_id', repository.id)
        .where((query) => query.where('r.concept_a', concept.id).orWhere('r.concept_b', concept.id))
        .where('r.shared_fact_count', '>', 0)
        .joinRaw('JOIN concepts AS o ON o.id = CASE WHEN r.concept_a = ? THEN r.concept_b ELSE r.concept_a END', [concept.id])
        .where('o.status', 'active');
      if (!show_insignificant) relations.where('r.shared_fact_count', '>=', thresholds.minShared);
      const [{ n }] = await relations.clone().count<{ n: string }[]>('* as n');
      const rows: { other_id: string; shared_fact_count: number }[] = await relations
        .select('o.id as other_id', 'r.shared_fact_count')
        .orderBy([{ column: 'r.shared_fact_count', order: 'desc' }, { column: 'o.canonical_name' }, { column: 'o.id' }])
        .limit(limit)
        .offset(offset);
      const others = await presentConcepts(knex, repository.id, rows.map((row) => row.other_id));
      const aliases = await aliasesOf(knex, [concept.id]);
      return {
        concept: presentConcept(concept, aliases.get(concept.id) ?? []),
        redirected_from: redirectedFrom,
        items: rows.map((row) => ({
          concept: others.get(row.other_id),
          shared_fact_count: Number(row.shared_fact_count),
          band: relationBand(Number(row.shared_fact_count), thresholds),
        })),
        total: Number(n),
      };
    },
  );

  /** Facts linked to every concept of `conceptIds` (not merged), as a query to select from. */
  const sharedFacts = (repositoryId: string, conceptIds: string[]) =>
    knex('facts')
      .where('facts.repository_id', repositoryId)
      .whereNot('facts.status', 'merged')
      .whereIn(
        'facts.id',
        knex('fact_concepts').whereIn('concept_id', conceptIds).groupBy('fact_id').havingRaw('count(DISTINCT concept_id) = ?', [conceptIds.length]).select('fact_id'),
      );

  app.get<{ Params: { repoID: string; conceptID: string; otherID: string }; Querystring: { context?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/relations/:otherID',
    {
      schema: {
        ...schema,
        params: {
          type: 'object',
          required: ['repoID', 'conceptID', 'otherID'],
          properties: { ...conceptParams.properties, otherID: { type: 'string', minLength: 1, maxLength: 500 } },
        },
        querystring: { type: 'object', additionalProperties: false, properties: { ...contextQuery, ...pagingQuery } },
        response: {
          200: {
            type: 'object',
            required: ['concept', 'other', 'shared_fact_count', 'band', 'facts', 'total'],
            properties: {
              concept: conceptSummarySchema,
              other: conceptSummarySchema,
              shared_fact_count: { type: 'integer', description: 'as the last relations refresh counted (concept_relations)' },
              band: relationSchema.properties.band,
              facts: { type: 'array', items: factSchema, description: 'the facts both concepts are linked to now' },
              total: { type: 'integer', description: 'number of facts shared now' },
            },
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { concept } = await load(repository.id, request.params.conceptID, request.query.context);
      const { concept: other } = await load(repository.id, request.params.otherID);
      if (other.id === concept.id) throw new HttpError(400, 'bad_request', 'a concept has no relation to itself');
      const [a, b] = concept.id < other.id ? [concept.id, other.id] : [other.id, concept.id];
      const relation = await knex('concept_relations').where({ repository_id: repository.id, concept_a: a, concept_b: b }).first('shared_fact_count');
      const sharedFactCount = relation ? Number(relation.shared_fact_count) : 0;
      const shared = sharedFacts(repository.id, [concept.id, other.id]);
      const [{ n }] = await shared.clone().count<{ n: string }[]>('* as n');
      const facts = await shared
        .select('facts.*')
        .orderBy([{ column: 'facts.created_at', order: 'desc' }, { column: 'facts.id' }])
        .limit(request.query.limit)
        .offset(request.query.offset);
      const aliases = await aliasesOf(knex, [concept.id, other.id]);
      return {
        concept: presentConcept(concept, aliases.get(concept.id) ?? []),
        other: presentConcept(other, aliases.get(other.id) ?? []),
        shared_fact_count: sharedFactCount,
        band: relationBand(sharedFactCount, thresholds),
        facts: facts.map(presentFact),
        total: Number(n),
      };
    },
  );

  app.get<{ Params: { repoID: string; conceptID: string }; Querystring: { context?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/facts',
    {
      schema: {
        ...schema,
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: { ...contextQuery, ...pagingQuery } },
        response: {
          200: conceptPageReply(factSchema),
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { concept } = await load(repository.id, request.params.conceptID, request.query.context);
      const linked = sharedFacts(repository.id, [concept.id]);
      const [{ n }] = await linked.clone().count<{ n: string }[]>('* as n');
      const facts = await linked
        .select('facts.*')
        .orderBy([{ column: 'facts.created_at', order: 'desc' }, { column: 'facts.id' }])
        .limit(request.query.limit)
        .offset(request.query.offset);
      return { concept: presentConcept(concept, (await aliasesOf(knex, [concept.id])).get(concept.id) ?? []), items: facts.map(presentFact), total: Number(n) };
    },
  );

  app.get<{ Params: { repoID: string; conceptID: string }; Querystring: { context?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/sources',
    {
      schema: {
        ...schema,
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: { ...contextQuery, ...pagingQuery } },
        response: {
          200: conceptPageReply({
            type: 'object',
            properties: {
              id: { type: 'string' },
              url: { type: ['string', 'null'] },
              doi: { type: ['string', 'null'] },
              filename: { type: ['string', 'null'] },
              title: { type: ['string', 'null'] },
              status: { type: 'string' },
              fact_count: { type: 'integer', description: 'facts of this concept that came from the source' },
            },
          }),
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'concepts:read');
      const { concept } = await load(repository.id, request.params.conceptID, request.query.context);
      // Sources of the concept's facts (every source a fact came from, merged twins' included).
      const sources = knex('sources')
        .join('fact_sources as fs', 'fs.source_id', 'sources.id')
        .whereIn('fs.fact_id', sharedFacts(repository.id, [concept.id]).select('facts.id'))
        .where('sources.repository_id', repository.id)
        .groupBy('sources.id');
      const [{ n }] = await knex.from(sources.clone().select('sources.id').as('s')).count<{ n: string }[]>('* as n');
      const rows: Record<string, unknown>[] = await sources
        .select('sources.id', 'sources.url', 'sources.doi', 'sources.filename', 'sources.title', 'sources.status')
        .select(knex.raw('count(DISTINCT fs.fact_id)::integer AS fact_count'))
        .orderBy([{ column: 'fact_count', order: 'desc' }, { column: 'sources.id' }])
        .limit(request.query.limit)
        .offset(request.query.offset);
      return { concept: presentConcept(concept, (await aliasesOf(knex, [concept.id])).get(concept.id) ?? []), items: rows, total: Number(n) };
    },
  );
};
