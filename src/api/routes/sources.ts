import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { sourceDecider } from '../../domain/source/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import { doiToUrl, normalizeDoi } from '../../providers/fetch/doi.js';
import { badRequest, HttpError, notFound } from '../errors.js';
import { requestMetadata, requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, isoDate, pagingQuery, listReply } from '../schemas.js';
import { factSchema, presentFact } from './facts.js';

export const sourceSchema = {
  type: 'object',
  required: ['id', 'repository_id', 'origin', 'status'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    origin: { type: 'string', enum: ['url', 'doi', 'upload'] },
    url: { type: ['string', 'null'] },
    doi: { type: ['string', 'null'] },
    filename: { type: ['string', 'null'] },
    status: { type: 'string', enum: ['pending', 'fetching', 'fetched', 'decomposing', 'processed', 'failed'] },
    failure: { type: ['string', 'null'], description: 'why the source failed, when status is failed' },
    title: { type: ['string', 'null'] },
    published_at: { type: ['string', 'null'] },
    kind: { type: ['string', 'null'], description: 'html, pdf, markdown or text once fetched' },
    content_type: { type: ['string', 'null'] },
    final_url: { type: ['string', 'null'] },
    body_bytes: { type: ['integer', 'null'] },
    fact_count: { type: 'integer' },
    model_id: { type: ['string', 'null'] },
    created_by: { type: 'string' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

type SourceRow = Record<string, unknown> & { document_kind: string | null; created_at: Date; updated_at: Date; body_bytes: string | number | null };

export function presentSource(row: SourceRow) {
  return {
    ...row,
    kind: row.document_kind,
    body_bytes: row.body_bytes === null ? null : Number(row.body_bytes),
    created_at: isoDate(row.created_at),
    updated_at: isoDate(row.updated_at),
  };
}

const UPLOAD_TYPES: Record<string, string> = {
  '.html': 'text/html',
  '.htm': 'text/html',
  '.pdf': 'application/pdf',
  '.md': 'text/markdown',
  '.markdown': 'text/markdown',
  '.txt': 'text/plain',
};
const ACCEPTED_UPLOAD_TYPES = new Set(['text/html', 'application/pdf', 'text/markdown', 'text/x-markdown', 'text/plain']);

/** Sources: add by URL, DOI or upload; list; read; their facts; retry a failed one. */
export const sourceRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['sources'], security: bearerSecurity };
  const repoParams = idParam('repoID');
  const sourceParams = {
    type: 'object',
    required: ['repoID', 'sourceID'],
    properties: { repoID: { type: 'string', minLength: 1 }, sourceID: { type: 'string', format: 'uuid' } },
  } as const;

  async function register(repositoryId: string, command: Parameters<typeof sourceDecider.decide>[0], metadata: ReturnType<typeof requestMetadata>) {
    const sourceId = randomUUID();
    await context.commands.execute(streamName('source', sourceId), sourceDecider, command, metadata);
    return presentSource(await context.db.knex('sources').where({ id: sourceId, repository_id: repositoryId }).first());
  }

  app.post<{ Params: { repoID: string }; Body: { url?: string; doi?: string } }>(
    '/api/v1/repositories/:repoID/sources',
    {
      schema: {
        ...schema,
        params: repoParams,
        body: {
          type: 'object',
          additionalProperties: false,
          minProperties: 1,
          maxProperties: 1,
          properties: { url: { type: 'string', minLength: 1, maxLength: 4096 }, doi: { type: 'string', minLength: 1, maxLength: 512 } },
        },
        response: { 201: sourceSchema, 200: sourceSchema, ...errorReplies },
      },
    },
    async (request, reply) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'sources:create');
      const { url, doi } = request.body;
      let normalized: { url: string | null; doi: string | null };
      if (url !== undefined) {
        let parsed: URL;
        try {
          parsed = new URL(url);
        } catch {
          throw badRequest('url is not a valid absolute URL');
        }
        if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw badRequest('url must use http or https');
        normalized = { url: parsed.toString(), doi: null };
      } else {
        try {
          doiToUrl(doi ?? '', context.config.providers.resolution.doi_resolver);
        } catch (error) {
          throw badRequest((error as Error).message);
        }
        normalized = { url: null, doi: normalizeDoi(doi ?? '') };
      }
      // Adding a URL or DOI the repository already has returns the existing source.
      const existing = await context.db
        .knex('sources')
        .where({ repository_id: repository.id })
        .where(normalized.url ? { url: normalized.url } : { doi: normalized.doi })
        .first();
      if (existing) return reply.status(200).send(presentSource(existing));
      const source = await register(
        repository.id,
        { type: 'RegisterSource', origin: normalized.url ? 'url' : 'doi', url: normalized.url, doi: normalized.doi },
        requestMetadata(request, principal, repository.id),
      );
      return reply.status(201).send(source);
    },
  );

  app.post<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/sources/upload',
    {
      schema: {
        ...schema,
        params: repoParams,
        consumes: ['multipart/form-data'],
        description: 'multipart/form-data with one file part (HTML, PDF, Markdown or plain text)',
        response: { 201: sourceSchema, ...errorReplies },
      },
    },
    async (request, reply) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'sources:create');
      if (!request.isMultipart()) throw badRequest('upload must be multipart/form-data with a file part');
      const file = await request.file();
      if (!file) throw badRequest('no file part in the upload');
      const body = await file.toBuffer();
      if (body.length === 0) throw badRequest('the uploaded file is empty');
      const extension = (/\.[a-z0-9]+$/i.exec(file.filename ?? '')?.[0] ?? '').toLowerCase();
      const declared = (file.mimetype ?? '').split(';')[0].trim().toLowerCase();
      const contentType = ACCEPTED_UPLOAD_TYPES.has(declared) ? declared : UPLOAD_TYPES[extension];
      if (!contentType) {
        throw new HttpError(415, 'unsupported_media_type', `unsupported upload type '${declared || extension || 'unknown'}': use HTML, PDF, Markdown or plain text`);
      }
      const stored = await context.assets.put(body);
      const source = await register(
        repository.id,
        {
          type: 'RegisterSource',
          origin: 'upload',
          filename: file.filename ?? null,
          contentType,
          bodySha256: stored.sha256,
          bodyBytes: stored.bytes,
        },
        requestMetadata(request, principal, repository.id),
      );
      return reply.status(201).send(source);
    },
  );

  app.get<{ Params: { repoID: string }; Querystring: { status?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/sources',
    {
      schema: {
        ...schema,
        params: repoParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { status: sourceSchema.properties.status, ...pagingQuery },
        },
        response: {
          200: listReply(sourceSchema),
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'sources:read');
      const query = context.db.knex('sources').where({ repository_id: repository.id });
      if (request.query.status) query.where({ status: request.query.status });
      const [{ n }] = await query.clone().count<{ n: string }[]>('* as n');
      const rows = await query.orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }]).limit(request.query.limit).offset(request.query.offset);
      return { items: rows.map(presentSource), total: Number(n) };
    },
  );

  async function loadSource(repositoryId: string, sourceId: string) {
    const row = await context.db.knex('sources').where({ id: sourceId, repository_id: repositoryId }).first();
    if (!row) throw notFound('source');
    return row;
  }

  app.get<{ Params: { repoID: string; sourceID: string } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID',
    { schema: { ...schema, params: sourceParams, response: { 200: sourceSchema, ...errorReplies } } },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'sources:read');
      return presentSource(await loadSource(repository.id, request.params.sourceID));
    },
  );

  app.get<{ Params: { repoID: string; sourceID: string }; Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID/facts',
    {
      schema: {
        ...schema,
        params: sourceParams,
        querystring: { type: 'object', additionalProperties: false, properties: pagingQuery },
        response: {
          200: listReply(factSchema),
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'facts:read');
      await loadSource(repository.id, request.params.sourceID);
      const query = context.db
        .knex('fact_sources')
        .join('facts', 'facts.id', 'fact_sources.fact_id')
        .where({ 'fact_sources.source_id': request.params.sourceID });
      const [{ n }] = await query.clone().count<{ n: string }[]>('* as n');
      const rows = await query
        .select('facts.*', 'fact_sources.chunk_index', 'fact_sources.source_text')
        .orderBy([{ column: 'fact_sources.chunk_index' }, { column: 'facts.created_at' }, { column: 'facts.id' }])
        .limit(request.query.limit)
        .offset(request.query.offset);
      return { items: rows.map(presentFact), total: Number(n) };
    },
  );

  app.post<{ Params: { repoID: string; sourceID: string } }>(
    '/api/v1/repositories/:repoID/sources/:sourceID/retry',
    { schema: { ...schema, params: sourceParams, response: { 202: sourceSchema, ...errorReplies } } },
    async (request, reply) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'sources:write');
      const source = await loadSource(repository.id, request.params.sourceID);
      if (source.status !== 'failed') {
        // Fetch and decomposition failures fail the source; a later stage (embedding, dedup,
        // concepts) fails only its task, so retrying the source re-queues those tasks.
        const failed = await context.jobs.list({ repositoryId: repository.id, sourceId: request.params.sourceID, state: 'failed', limit: 1000 });
        const dead = await context.jobs.list({ repositoryId: repository.id, sourceId: request.params.sourceID, state: 'dead', limit: 1000 });
        const retryable = [...failed.jobs, ...dead.jobs];
        if (retryable.length === 0) throw new HttpError(409, 'conflict', `source is ${String(source.status)} and none of its tasks failed: nothing to retry`);
        for (const job of retryable) await context.jobs.retry(job.id);
        context.wakeWorkers();
        return reply.status(202).send(presentSource(source));
      }
      await context.commands.execute(
        streamName('source', request.params.sourceID),
        sourceDecider,
        { type: 'RetrySource' },
        requestMetadata(request, principal, repository.id),
      );
      return reply.status(202).send(presentSource(await loadSource(repository.id, request.params.sourceID)));
    },
  );
};
