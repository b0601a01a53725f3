import type { FastifyError, FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { badRequest, notFound } from '../errors.js';
import { requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, isoDate, pagingQuery, searchModeQuery, searchReply } from '../schemas.js';
import { AmbiguousConceptError, conceptErrorReplies, conceptSummarySchema, presentConcepts, resolveConcept } from './concepts.js';

const factParams = {
  type: 'object',
  required: ['repoID', 'factID'],
  properties: { repoID: { type: 'string', minLength: 1 }, factID: { type: 'string', format: 'uuid' } },
} as const;

export const factSchema = {
  type: 'object',
  required: ['id', 'content', 'content_hash', 'fact_kind', 'status'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    content: { type: 'string' },
    content_hash: { type: 'string' },
    fact_kind: { type: 'string', enum: ['text', 'image'] },
    status: { type: 'string', enum: ['new', 'stable', 'merged'] },
    merged_into: { type: ['string', 'null'] },
    image_id: { type: ['string', 'null'] },
    promptset_hash: { type: 'string' },
    model_id: { type: ['string', 'null'] },
    score: { type: 'number', description: 'relevance to the query (search only)' },
    chunk_index: { type: 'integer', description: 'chunk of the source it came from (per-source lists only)' },
    source_text: { type: 'string', description: 'the original span (per-source lists only)' },
    created_at: { type: 'string' },
  },
} as const;

export function presentFact(row: Record<string, unknown> & { created_at: Date | string }) {
  return { ...row, created_at: isoDate(row.created_at) };
}

/** Most concepts `concepts=` may name (each is resolved, then their fact sets intersected). */
const MAX_CONCEPT_FILTER = 20;

/**
 * Facts: search (hybrid or lexical, websearch syntax) narrowed by concepts or a context, one
 * fact with its sources, and the concepts a fact is linked to.
 */
export const factRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['facts'], security: bearerSecurity };
  const knex = context.db.knex;

  // The 409 of an ambiguous concept name lists the contexts; every other error goes to the app's handler.
  app.setErrorHandler((error: FastifyError | Error, _request, reply) => {
    if (error instanceof AmbiguousConceptError) {
      return reply.status(409).send({ error: error.code, message: error.message, contexts: error.contexts });
    }
    throw error;
  });

  /**
   * The fact ids the concept filters allow (facts linked to every named concept, and to any
   * active concept of the context), or undefined when no filter is given.
   */
  async function factFilter(repositoryId: string, filters: { concept?: string; concepts?: string; context?: string }): Promise<string[] | undefined> {
    const named = [
      ...(filters.concept !== undefined ? [filters.concept] : []),
      ...(filters.concepts ?? '').split(',').map((part) => part.trim()).filter((part) => part !== ''),
    ];
    if (filters.concepts !== undefined && named.length === (filters.concept !== undefined ? 1 : 0)) throw badRequest('concepts must list at least one concept id or name');
    if (named.length > MAX_CONCEPT_FILTER) throw badRequest(`concepts may name at most ${MAX_CONCEPT_FILTER} concepts`);
    if (named.length === 0 && filters.context === undefined) return undefined;
    // With a context, a concept name is looked up in that context (it also narrows the facts to it).
    const conceptIds = new Set<string>();
    for (const name of named) conceptIds.add((await resolveConcept(knex, repositoryId, name, filters.context)).concept.id);
    const query = knex('fact_concepts').where('fact_concepts.repository_id', repositoryId);
    if (conceptIds.size > 0) {
      query
        .whereIn('fact_concepts.fact_id', knex('fact_concepts').whereIn('concept_id', [...conceptIds]).groupBy('fact_id').havingRaw('count(DISTINCT concept_id) = ?', [conceptIds.size]).select('fact_id'));
    }
    if (filters.context !== undefined) {
      query.whereIn(
        'fact_concepts.concept_id',
        knex('concepts').where({ repository_id: repositoryId, status: 'active' }).whereRaw('lower(context) = lower(?)', [filters.context.trim()]).select('id'),
      );
    }
    return (await query.distinct('fact_concepts.fact_id').pluck('fact_concepts.fact_id')) as string[];
  }

  app.get<{
    Params: { repoID: string };
    Querystring: { query: string; concept?: string; concepts?: string; context?: string; mode: 'hybrid' | 'lexical'; limit: number; offset: number };
  }>(
    '/api/v1/repositories/:repoID/facts',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            query: { type: 'string', maxLength: 1000, default: '' },
            concept: { type: 'string', minLength: 1, maxLength: 500, description: 'only facts linked to this concept (id or canonical name)' },
            concepts: { type: 'string', minLength: 1, maxLength: 5000, description: 'comma-separated concept ids or names: only facts linked to all of them' },
            context: { type: 'string', minLength: 1, maxLength: 200, description: 'only facts linked to a concept of this context' },
            mode: searchModeQuery,
            ...pagingQuery,
          },
        },
        response: {
          200: searchReply(factSchema),
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'facts:read');
      const { query, concept, concepts, context: conceptContext, mode, limit, offset } = request.query;
      const factIds = await factFilter(repository.id, { concept, concepts, context: conceptContext });
      const result = await context.hybrid.searchFacts({ repositoryId: repository.id, query, limit, offset, mode, factIds });
      return { items: result.items, total: result.total, query, mode: result.mode, fallback_reason: result.fallback_reason };
    },
  );

  app.get<{ Params: { repoID: string; factID: string } }>(
    '/api/v1/repositories/:repoID/facts/:factID/concepts',
    {
      schema: {
        ...schema,
        params: factParams,
        response: {
          200: {
            type: 'object',
            required: ['fact_id', 'items', 'total'],
            properties: {
              fact_id: { type: 'string', description: 'the fact whose links are listed: the survivor when the fact asked for was merged' },
              merged_from: { type: ['string', 'null'], description: 'the merged fact that was asked for' },
              items: { type: 'array', items: conceptSummarySchema },
              total: { type: 'integer' },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'facts:read');
      let fact = await knex('facts').where({ id: request.params.factID, repository_id: repository.id }).first('id', 'status', 'merged_into');
      if (!fact) throw notFound('fact');
      // Links of a merged fact moved to its survivor (docs/pipeline.md): answer with the survivor's.
      const asked = fact.id as string;
      for (let step = 0; fact && fact.status === 'merged' && fact.merged_into && step < 32; step += 1) {
        const next = await knex('facts').where({ id: fact.merged_into, repository_id: repository.id }).first('id', 'status', 'merged_into');
        if (!next) break;
        fact = next;
      }
      const conceptIds = (await knex('fact_concepts as fc')
        .join('concepts as c', 'c.id', 'fc.concept_id')
        .where({ 'fc.fact_id': fact.id, 'c.status': 'active' })
        .orderBy([{ column: 'c.canonical_name' }, { column: 'c.context' }, { column: 'c.id' }])
        .pluck('c.id')) as string[];
      const presented = await presentConcepts(knex, repository.id, conceptIds);
      return {
        fact_id: fact.id,
        merged_from: fact.id === asked ? null : asked,
        items: conceptIds.flatMap((id) => presented.get(id) ?? []),
        total: conceptIds.length,
      };
    },
  );

  app.get<{ Params: { repoID: string; factID: string } }>(
    '/api/v1/repositories/:repoID/facts/:factID',
    {
      schema: {
        ...schema,
        params: factParams,
        response: {
          200: {
            ...factSchema,
            properties: {
              ...factSchema.properties,
              sources: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: {
                    source_id: { type: 'string' },
                    url: { type: ['string', 'null'] },
                    doi: { type: ['string', 'null'] },
                    filename: { type: ['string', 'null'] },
                    title: { type: ['string', 'null'] },
                    chunk_index: { type: 'integer' },
                    source_text: { type: 'string' },
                  },
                },
              },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'facts:read');
      const fact = await context.db.knex('facts').where({ id: request.params.factID, repository_id: repository.id }).first();
      if (!fact) throw notFound('fact');
      const sources = await context.db
        .knex('fact_sources')
        .join('sources', 'sources.id', 'fact_sources.source_id')
        .where({ 'fact_sources.fact_id': fact.id })
        .orderBy('sources.created_at')
        .select('fact_sources.source_id', 'sources.url', 'sources.doi', 'sources.filename', 'sources.title', 'fact_sources.chunk_index', 'fact_sources.source_text');
      return { ...presentFact(fact), sources };
    },
  );
};
