import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { FactSearchInput } from '../../read/facts.js';
import { requireUser } from '../guard.js';
import {
  bearerSecurity,
  conceptErrorReplies,
  conceptSummarySchema,
  contextParameter,
  errorReplies,
  factSchema,
  idParam,
  repositoryItemParams,
  searchQuerystring,
  searchReply,
  sourceReferenceProperties,
} from '../schemas.js';

const factParams = repositoryItemParams('factID');

/**
 * Facts: search (hybrid or lexical, websearch syntax) narrowed by concepts or a context, one
 * fact with its sources, and the concepts a fact is linked to (src/read/facts.ts).
 */
export const factRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['facts'], security: bearerSecurity };
  const { facts } = createApplication(context);

  app.get<{ Params: { repoID: string }; Querystring: Omit<FactSearchInput, 'repository'> }>(
    '/api/v1/repositories/:repoID/facts',
    {
      schema: {
        summary: 'Search or list the facts of a repository',
        ...schema,
        params: idParam('repoID'),
        querystring: searchQuerystring({
          concept: { type: 'string', minLength: 1, maxLength: 500, description: 'only facts linked to this concept (id or canonical name)' },
          concepts: { type: 'string', minLength: 1, maxLength: 5000, description: 'comma-separated concept ids or names: only facts linked to all of them' },
          context: contextParameter('only facts linked to a concept of this context (with `concept`, the context its name is looked up in)'),
        }),
        response: { 200: { ...searchReply(factSchema), description: 'a page of the facts, best match first when searching' }, ...conceptErrorReplies },
      },
    },
    async (request) => facts.search(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.get<{ Params: { repoID: string; factID: string } }>(
    '/api/v1/repositories/:repoID/facts/:factID/concepts',
    {
      schema: {
        summary: 'List the concepts a fact is linked to',
        ...schema,
        params: factParams,
        response: {
          200: {
            description: 'the concepts linked to the fact',
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
    async (request) => facts.concepts(requireUser(request), { repository: request.params.repoID, fact: request.params.factID }),
  );

  app.get<{ Params: { repoID: string; factID: string } }>(
    '/api/v1/repositories/:repoID/facts/:factID',
    {
      schema: {
        summary: 'Get a fact with its sources',
        ...schema,
        params: factParams,
        response: {
          200: {
            description: 'the fact (the survivor, when the one asked for was merged) with its sources',
            ...factSchema,
            properties: {
              ...factSchema.properties,
              merged_from: { type: ['string', 'null'], description: 'the merged fact that was asked for, when the answer is its survivor' },
              sources: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: {
                    source_id: { type: 'string' },
                    ...sourceReferenceProperties,
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
    async (request) => facts.get(requireUser(request), { repository: request.params.repoID, fact: request.params.factID }),
  );
};
