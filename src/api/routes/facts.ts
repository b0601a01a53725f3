import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { notFound } from '../errors.js';
import { requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, isoDate, pagingQuery } from '../schemas.js';

export const factSchema = {
  type: 'object',
  required: ['id', 'content', 'content_hash', 'fact_kind', 'status'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    content: { type: 'string' },
    content_hash: { type: 'string' },
    fact_kind: { type: 'string', enum: ['text', 'image'] },
    status: { type: 'string' },
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

/** Facts: lexical search (websearch syntax) and one fact with its sources. */
export const factRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['facts'], security: bearerSecurity };

  app.get<{ Params: { repoID: string }; Querystring: { query: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/facts',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { query: { type: 'string', maxLength: 1000, default: '' }, ...pagingQuery },
        },
        response: {
          200: {
            type: 'object',
            required: ['items', 'total', 'query'],
            properties: { items: { type: 'array', items: factSchema }, total: { type: 'integer' }, query: { type: 'string' }, mode: { type: 'string' } },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'facts:read');
      const { query, limit, offset } = request.query;
      const result = await context.search.searchFacts({ repositoryId: repository.id, query, limit, offset });
      return { ...result, query, mode: 'lexical' };
    },
  );

  app.get<{ Params: { repoID: string; factID: string } }>(
    '/api/v1/repositories/:repoID/facts/:factID',
    {
      schema: {
        ...schema,
        params: {
          type: 'object',
          required: ['repoID', 'factID'],
          properties: { repoID: { type: 'string', minLength: 1 }, factID: { type: 'string', format: 'uuid' } },
        },
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
