import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import { MAX_SOURCE_DOI_CHARS, MAX_SOURCE_URL_CHARS } from '../../domain/source/reference.js';
import type { SourceStatus } from '../../read/sources.js';
import { requireUser, traceOf } from '../guard.js';
import { receiveUpload } from '../uploads.js';
import { errorReply } from '../errors.js';
import { bearerSecurity, errorReplies, factSchema, idParam, listReply, pagingQuery, repositoryItemParams, sourceSchema } from '../schemas.js';

/** Sources: add by URL, DOI or upload; list; read; their facts; retry a failed one (src/read/sources.ts, src/app/sources.ts). */
export const sourceRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['sources'], security: bearerSecurity };
  const repoParams = idParam('repoID');
  const sourceParams = repositoryItemParams('sourceID');
  const { sources } = createApplication(context);
  const named = (params: { repoID: string; sourceID: string }) => ({ repository: params.repoID, source: params.sourceID });

  app.post<{ Params: { repoID: string }; Body: { url?: string; doi?: string } }>(
    '/api/v1/repositories/:repoID/sources',
    {
      schema: {
        summary: 'Add a source by URL or DOI',
        ...schema,
        params: repoParams,
        body: {
          type: 'object',
          additionalProperties: false,
          minProperties: 1,
          maxProperties: 1,
          properties: { url: { type: 'string', minLength: 1, maxLength: MAX_SOURCE_URL_CHARS }, doi: { type: 'string', minLength: 1, maxLength: MAX_SOURCE_DOI_CHARS } },
        },
        response: {
          201: { ...sourceSchema, description: 'the source, registered; its processing runs in the background' },
          200: { ...sourceSchema, description: 'the repository has the URL or DOI already: the existing source' },
          ...errorReplies,
          503: errorReply('the sources read model lags behind the log, so whether the repository has the URL or DOI cannot be told; nothing was added (Retry-After)'),
        },
      },
    },
    async (request, reply) => {
      // Adding a URL or DOI the repository already has answers 200 with the existing source.
      const { created, source } = await sources.add(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request));
      return reply.status(created ? 201 : 200).send(source);
    },
  );

  app.post<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/sources/upload',
    {
      schema: {
        summary: 'Add a source by uploading a document',
        ...schema,
        params: repoParams,
        consumes: ['multipart/form-data'],
        description: 'multipart/form-data with one file part (HTML, PDF, Markdown or plain text)',
        response: { 201: { ...sourceSchema, description: 'the source, registered; its processing runs in the background' }, ...errorReplies },
      },
      // A retried upload would register the document again, as a second source.
      config: { multipartBody: { file: 'the document: HTML, PDF, Markdown or plain text, at most server.body_limit bytes' }, idempotent: { permission: 'sources:create', upload: true } },
    },
    async (request, reply) => {
      // Read only once the caller may add sources.
      const content = async () => (await receiveUpload(request)).content();
      const source = await sources.upload(requireUser(request), { repository: request.params.repoID, content }, traceOf(request));
      return reply.status(201).send(source);
    },
  );

  app.get<{ Params: { repoID: string }; Querystring: { status?: SourceStatus; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/sources',
    {
      schema: {
        summary: 'List sources',
        ...schema,
        params: repoParams,
        querystring: { type: 'object', additionalProperties: false, properties: { status: sourceSchema.properties.status, ...pagingQuery } },
        response: { 200: { ...listReply(sourceSchema), description: 'a page of the sources' }, ...errorReplies },
      },
    },
    async (request) => sources.list(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.get<{ Params: { repoID: string; sourceID: string } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID',
    { schema: { summary: 'Get a source with its status and failure', ...schema, params: sourceParams, response: { 200: { ...sourceSchema, description: 'the source with its status and failure' }, ...errorReplies } } },
    async (request) => sources.get(requireUser(request), named(request.params)),
  );

  app.get<{ Params: { repoID: string; sourceID: string }; Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID/facts',
    {
      schema: {
        summary: 'List the facts of a source in source order',
        ...schema,
        params: sourceParams,
        querystring: { type: 'object', additionalProperties: false, properties: pagingQuery },
        response: { 200: { ...listReply(factSchema), description: 'a page of the facts of the source, in source order' }, ...errorReplies },
      },
    },
    async (request) => sources.facts(requireUser(request), { ...named(request.params), ...request.query }),
  );

  app.delete<{ Params: { repoID: string; sourceID: string }; Querystring: { reason?: string } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID',
    {
      schema: {
        summary: 'Delete a source',
        ...schema,
        description:
          'Deletes the source: gone from every read and investigation at once; the facts no other source has are then ' +
          'retracted (FactRetracted) and what was derived from them is re-made. The events keep `reason` for audit.',
        params: sourceParams,
        querystring: { type: 'object', additionalProperties: false, properties: { reason: { type: 'string', maxLength: 500 } } },
        response: { 204: { type: 'null', description: 'the source is deleted' }, ...errorReplies },
      },
    },
    async (request, reply) => {
      await sources.remove(requireUser(request), { ...named(request.params), reason: request.query.reason }, traceOf(request));
      return reply.status(204).send();
    },
  );

  app.post<{ Params: { repoID: string; sourceID: string } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID/retry',
    { schema: { summary: 'Retry a failed source or its failed tasks', ...schema, params: sourceParams, response: { 202: { ...sourceSchema, description: 'the retry is queued; the source as it stands' }, ...errorReplies, 409: errorReply('neither the source nor any of its tasks failed') } } },
    async (request, reply) => reply.status(202).send(await sources.retry(requireUser(request), named(request.params), traceOf(request))),
  );
};
