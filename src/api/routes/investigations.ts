import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { InvestigationSourceInput } from '../../app/investigations.js';
import { MAX_INVESTIGATION_TITLE_CHARS, MAX_INVESTIGATION_TOPIC_CHARS } from '../../domain/investigation/decider.js';
import { MAX_SOURCE_DOI_CHARS, MAX_SOURCE_URL_CHARS } from '../../domain/source/reference.js';
import { requireUser, traceOf } from '../guard.js';
import {
  bearerSecurity,
  conceptSummarySchema,
  errorReplies,
  factSchema,
  idParam,
  listReply,
  pagingQuery,
  repositoryItemParams,
  sourceSchema,
} from '../schemas.js';

const investigationSchema = {
  type: 'object',
  required: ['id', 'repository_id', 'title', 'topic', 'source_count'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    title: { type: 'string' },
    topic: { type: 'string', description: 'the question the investigation gathers sources for' },
    source_count: { type: 'integer' },
    created_by: { type: 'string' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

const title = { type: 'string', minLength: 1, maxLength: MAX_INVESTIGATION_TITLE_CHARS } as const;
const topic = { type: 'string', maxLength: MAX_INVESTIGATION_TOPIC_CHARS } as const;

/** Investigations: sources gathered around a question, with their facts and concepts (src/read/investigations.ts, src/app/investigations.ts). */
export const investigationRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['investigations'], security: bearerSecurity };
  const repoParams = idParam('repoID');
  const itemParams = repositoryItemParams('investigationID');
  const { investigations } = createApplication(context);
  const named = (params: { repoID: string; investigationID: string }) => ({ repository: params.repoID, investigation: params.investigationID });
  const page = { type: 'object', additionalProperties: false, properties: pagingQuery } as const;

  app.post<{ Params: { repoID: string }; Body: { title: string; topic?: string } }>(
    '/api/v1/repositories/:repoID/investigations',
    {
      schema: {
        summary: 'Create an investigation',
        ...schema,
        params: repoParams,
        body: { type: 'object', additionalProperties: false, required: ['title'], properties: { title, topic } },
        response: { 201: { ...investigationSchema, description: 'the investigation, created' }, ...errorReplies },
      },
      config: { idempotent: { permission: 'investigations:create' } },
    },
    async (request, reply) =>
      reply.status(201).send(await investigations.create(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request))),
  );

  app.get<{ Params: { repoID: string }; Querystring: { query?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/investigations',
    {
      schema: {
        summary: 'List or search investigations',
        ...schema,
        params: repoParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { query: { type: 'string', maxLength: 1000, description: 'words of the title or topic' }, ...pagingQuery },
        },
        response: { 200: { ...listReply(investigationSchema), description: 'a page of the investigations' }, ...errorReplies },
      },
    },
    async (request) => investigations.list(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.get<{ Params: { repoID: string; investigationID: string } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID',
    { schema: { summary: 'Get an investigation', ...schema, params: itemParams, response: { 200: { ...investigationSchema, description: 'the investigation' }, ...errorReplies } } },
    async (request) => investigations.get(requireUser(request), named(request.params)),
  );

  app.put<{ Params: { repoID: string; investigationID: string }; Body: { title?: string; topic?: string } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID',
    {
      schema: {
        summary: 'Change the title or topic of an investigation',
        ...schema,
        params: itemParams,
        body: { type: 'object', additionalProperties: false, minProperties: 1, properties: { title, topic } },
        response: { 200: { ...investigationSchema, description: 'the investigation, changed' }, ...errorReplies },
      },
    },
    async (request) => investigations.update(requireUser(request), { ...named(request.params), ...request.body }, traceOf(request)),
  );

  app.delete<{ Params: { repoID: string; investigationID: string } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID',
    { schema: { summary: 'Delete an investigation (its sources stay)', ...schema, params: itemParams, response: { 204: { type: 'null', description: 'the investigation is deleted' }, ...errorReplies } } },
    async (request, reply) => {
      await investigations.remove(requireUser(request), named(request.params), traceOf(request));
      return reply.status(204).send();
    },
  );

  app.get<{ Params: { repoID: string; investigationID: string }; Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID/sources',
    { schema: { summary: 'List the sources of an investigation', ...schema, params: itemParams, querystring: page, response: { 200: { ...listReply(sourceSchema), description: 'a page of the sources of the investigation' }, ...errorReplies } } },
    async (request) => investigations.sources(requireUser(request), { ...named(request.params), ...request.query }),
  );

  app.post<{ Params: { repoID: string; investigationID: string }; Body: InvestigationSourceInput }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID/sources',
    {
      schema: {
        summary: 'Add a source to an investigation (by id, URL or DOI)',
        ...schema,
        description:
          'Adds a source: an existing one (`source_id`), or a URL or DOI, which is registered in the repository when new ' +
          '(or the existing source is taken) and processed. 201 when the investigation gained the source, 200 when it had it.',
        params: itemParams,
        body: {
          type: 'object',
          additionalProperties: false,
          minProperties: 1,
          maxProperties: 1,
          properties: {
            source_id: { type: 'string', format: 'uuid' },
            url: { type: 'string', minLength: 1, maxLength: MAX_SOURCE_URL_CHARS },
            doi: { type: 'string', minLength: 1, maxLength: MAX_SOURCE_DOI_CHARS },
          },
        },
        response: {
          ...Object.fromEntries(
            [
              [200, 'the investigation had the source already'],
              [201, 'the investigation gained the source'],
            ].map(([status, description]) => [
              status,
              {
                description,
                type: 'object',
                required: ['added', 'registered', 'source'],
                properties: {
                  added: { type: 'boolean', description: 'the investigation did not have the source before' },
                  registered: { type: 'boolean', description: 'the URL or DOI was new to the repository and was registered' },
                  source: sourceSchema,
                },
              },
            ]),
          ),
          ...errorReplies,
        },
      },
    },
    async (request, reply) => {
      const result = await investigations.addSource(requireUser(request), { ...named(request.params), ...request.body }, traceOf(request));
      return reply.status(result.added ? 201 : 200).send(result);
    },
  );

  app.delete<{ Params: { repoID: string; investigationID: string; sourceID: string } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID/sources/:sourceID',
    {
      schema: {
        summary: 'Remove a source from an investigation',
        ...schema,
        description: 'Removes the source from the investigation; it stays in the repository.',
        params: { ...itemParams, required: [...itemParams.required, 'sourceID'], properties: { ...itemParams.properties, sourceID: { type: 'string', format: 'uuid' } } },
        response: { 204: { type: 'null', description: 'the source is no longer part of the investigation' }, ...errorReplies },
      },
    },
    async (request, reply) => {
      await investigations.removeSource(requireUser(request), { ...named(request.params), source: request.params.sourceID }, traceOf(request));
      return reply.status(204).send();
    },
  );

  app.get<{ Params: { repoID: string; investigationID: string }; Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID/facts',
    { schema: { summary: 'List the facts of the sources of an investigation', ...schema, params: itemParams, querystring: page, response: { 200: { ...listReply(factSchema), description: 'a page of the facts of the sources of the investigation' }, ...errorReplies } } },
    async (request) => investigations.facts(requireUser(request), { ...named(request.params), ...request.query }),
  );

  app.get<{ Params: { repoID: string; investigationID: string }; Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/investigations/:investigationID/concepts',
    {
      schema: {
        summary: 'List the concepts of the facts of an investigation',
        ...schema,
        params: itemParams,
        querystring: page,
        response: {
          200: {
            description: 'a page of the concepts of the facts of the investigation',
            ...listReply({
              ...conceptSummarySchema,
              properties: { ...conceptSummarySchema.properties, investigation_fact_count: { type: 'integer', description: "how many of the investigation's facts the concept covers" } },
            }),
          },
          ...errorReplies,
        },
      },
    },
    async (request) => investigations.concepts(requireUser(request), { ...named(request.params), ...request.query }),
  );
};
