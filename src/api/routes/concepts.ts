import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { ConceptSearchInput } from '../../read/concepts.js';
import { requireUser, traceOf } from '../guard.js';
import {
  bearerSecurity,
  conceptErrorReplies,
  conceptParams,
  conceptSummarySchema,
  type ConceptParams,
  contextParameter,
  errorReplies,
  factSchema,
  idParam,
  jobSchema,
  namedConcept,
  pagingQuery,
  searchQuerystring,
  searchReply,
  sourceReferenceProperties,
} from '../schemas.js';

/** `?context=`: which context's concept a canonical name shared by several contexts means. */
const contextQuery = {
  context: contextParameter("the context a name is looked up in; with a concept id it must be the concept's own (else 400)"),
} as const;

/** The reply of a page of things about one concept: `{concept, items, total}`. */
const conceptPageReply = <Item extends object>(item: Item, extra: Record<string, object> = {}) =>
  ({
    type: 'object',
    required: ['concept', 'items', 'total'],
    properties: { concept: conceptSummarySchema, ...extra, items: { type: 'array', items: item }, total: { type: 'integer' } },
  }) as const;

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

type PageQuery = { context?: string; limit: number; offset: number };

/**
 * Concepts: list and hybrid search, one concept by id or canonical name, its relations (bands of
 * spec "Concept relation (read surface)"), its facts and sources (src/read/concepts.ts), and
 * context migration (src/app/concepts.ts).
 */
export const conceptRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['concepts'], security: bearerSecurity };
  const settings = context.config.concepts;
  const { concepts } = createApplication(context);
  const pageQuerystring = { type: 'object', additionalProperties: false, properties: { ...contextQuery, ...pagingQuery } } as const;

  app.get<{ Params: { repoID: string }; Querystring: Omit<ConceptSearchInput, 'repository'> }>(
    '/api/v1/repositories/:repoID/concepts',
    {
      schema: {
        summary: 'Search or list the concepts of a repository',
        ...schema,
        params: idParam('repoID'),
        querystring: searchQuerystring({
          show_small: { ...booleanQuery, description: `also concepts with fewer than concepts.min_concept_fact_count (${settings.min_concept_fact_count}) facts` },
          context: contextParameter('only concepts of this context'),
        }),
        response: { 200: { ...searchReply(conceptSummarySchema), description: 'a page of the concepts, best match first when searching' }, ...errorReplies },
      },
    },
    async (request) => concepts.search(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.post<{ Params: { repoID: string }; Body: { from_context: string; to_context: string } }>(
    '/api/v1/repositories/:repoID/concepts/migrate-context',
    {
      schema: {
        summary: 'Move concepts from one context to another (background task)',
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
            description: 'the migration task, queued',
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
    async (request, reply) =>
      reply.status(202).send(await concepts.migrateContext(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request))),
  );

  app.get<{ Params: ConceptParams; Querystring: { context?: string } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID',
    {
      schema: {
        summary: 'Get a concept by id, canonical name or alias',
        ...schema,
        params: conceptParams,
        querystring: { type: 'object', additionalProperties: false, properties: contextQuery },
        response: {
          200: { description: 'the concept (the survivor, when the one asked for was merged)', ...conceptSummarySchema, properties: { ...conceptSummarySchema.properties, redirected_from: redirectSchema } },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => concepts.get(requireUser(request), namedConcept(request.params, request.query)),
  );

  app.get<{ Params: ConceptParams; Querystring: PageQuery & { show_insignificant: boolean } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/relations',
    {
      schema: {
        summary: 'List the concepts related to a concept',
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
        response: { 200: { ...conceptPageReply(relationSchema, { redirected_from: redirectSchema }), description: 'a page of the related concepts' }, ...conceptErrorReplies },
      },
    },
    async (request) => concepts.relations(requireUser(request), { ...request.query, ...namedConcept(request.params, request.query) }),
  );

  app.get<{ Params: ConceptParams & { otherID: string }; Querystring: PageQuery & { other_context?: string } }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/relations/:otherID',
    {
      schema: {
        summary: 'Get the relation of two concepts and their shared facts',
        ...schema,
        params: {
          type: 'object',
          required: ['repoID', 'conceptID', 'otherID'],
          properties: { ...conceptParams.properties, otherID: { type: 'string', minLength: 1, maxLength: 500 } },
        },
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            context: contextParameter('the context of conceptID, when it is a name several contexts share'),
            other_context: contextParameter('the context of otherID, when it is a name several contexts share'),
            ...pagingQuery,
          },
        },
        response: {
          200: {
            description: 'the relation of the two concepts and a page of their shared facts',
            type: 'object',
            required: ['concept', 'other', 'shared_fact_count', 'band', 'facts', 'total'],
            properties: {
              concept: conceptSummarySchema,
              redirected_from: redirectSchema,
              other: conceptSummarySchema,
              other_redirected_from: redirectSchema,
              shared_fact_count: { type: 'integer', description: 'as the last relations refresh, or a merge of either concept or a retraction or merge of a fact since, counted (concept_relations), less the facts of deleted sources' },
              band: relationSchema.properties.band,
              facts: { type: 'array', items: factSchema, description: 'the facts both concepts are linked to now' },
              total: { type: 'integer', description: 'number of facts shared now' },
            },
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => concepts.relation(requireUser(request), { ...request.query, ...namedConcept(request.params, request.query), other: request.params.otherID }),
  );

  app.get<{ Params: ConceptParams; Querystring: PageQuery }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/facts',
    { schema: { summary: 'List the facts of a concept', ...schema, params: conceptParams, querystring: pageQuerystring, response: { 200: { ...conceptPageReply(factSchema), description: 'a page of the facts of the concept' }, ...conceptErrorReplies } } },
    async (request) => concepts.facts(requireUser(request), { ...request.query, ...namedConcept(request.params, request.query) }),
  );

  app.get<{ Params: ConceptParams; Querystring: PageQuery }>(
    '/api/v1/repositories/:repoID/concepts/:conceptID/sources',
    {
      schema: {
        summary: 'List the sources of a concept',
        ...schema,
        params: conceptParams,
        querystring: pageQuerystring,
        response: {
          200: {
            description: 'a page of the sources of the concept',
            ...conceptPageReply({
              type: 'object',
              properties: {
                id: { type: 'string' },
                ...sourceReferenceProperties,
                status: { type: 'string' },
                fact_count: { type: 'integer', description: 'facts of this concept that came from the source' },
              },
            }),
          },
          ...conceptErrorReplies,
        },
      },
    },
    async (request) => concepts.sources(requireUser(request), { ...request.query, ...namedConcept(request.params, request.query) }),
  );
};
