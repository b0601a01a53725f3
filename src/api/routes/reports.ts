import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { ReportChildren, ReportFields } from '../../app/reports.js';
import { MAX_REPORT_TITLE_CHARS, MAX_REPORT_TOPIC_CHARS, POSTURES } from '../../domain/report/decider.js';
import { MAX_REPORT_QUERY_CHARS, reportStatuses, type ReportStatus } from '../../read/reports.js';
import { errorReply } from '../errors.js';
import { requireUser, traceOf } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, pagingQuery, repositoryItemParams } from '../schemas.js';
import { receiveUpload } from '../uploads.js';

const nullableString = { type: ['string', 'null'] } as const;

/** A report as answered (src/read/reports.ts, presentReport); lists leave `text` out. */
const reportSchema = {
  type: 'object',
  required: ['id', 'title', 'status', 'children_ids'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    title: { type: 'string' },
    text: { type: 'string', description: 'left out of lists: GET the report for it' },
    text_chars: { type: 'integer' },
    topic: nullableString,
    parent_id: nullableString,
    children_ids: { type: 'array', items: { type: 'string' } },
    status: { type: 'string', enum: [...reportStatuses] },
    failure: nullableString,
    revision: { type: 'integer', description: 'grows with each text change and each annotation request' },
    annotated_revision: { type: ['integer', 'null'], description: 'the revision the last annotation is of (null before the first): its sentences are of that revision\'s text, older than `revision` while an annotation is due' },
    origin: { type: 'string', enum: ['text', 'upload'] },
    filename: nullableString,
    sentence_count: { type: 'integer', description: 'annotated sentences (at least providers.reports.min_sentence_runes runes, a CJK character counting 2 or 3)' },
    fact_count: { type: 'integer', description: 'distinct facts its annotations show: cited facts merged since count as their survivor, retracted ones not at all' },
    model_id: { ...nullableString, description: 'the chat model that judged the postures' },
    created_by: { type: 'string' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
    annotated_at: nullableString,
  },
} as const;

const annotationsSchema = {
  type: 'object',
  required: ['report_id', 'status', 'items', 'total'],
  properties: {
    report_id: { type: 'string' },
    status: { type: 'string', enum: [...reportStatuses] },
    revision: { type: 'integer', description: 'the report\'s current revision' },
    annotated_revision: { type: ['integer', 'null'], description: 'the revision the items annotate: their `start` and `end` point into that revision\'s text (null before the first annotation)' },
    annotated_at: nullableString,
    total: { type: 'integer' },
    items: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index', 'text', 'facts'],
        properties: {
          index: { type: 'integer', description: 'position among all the sentences of the report' },
          text: { type: 'string' },
          start: { type: 'integer', description: 'UTF-16 offset in the report text' },
          end: { type: 'integer' },
          carried: { type: 'boolean', description: 'kept from the previous annotation: the sentence did not change' },
          facts: {
            type: 'array',
            items: {
              type: 'object',
              required: ['fact_id', 'score', 'posture'],
              properties: {
                fact_id: { type: 'string', description: 'the live fact: a cited fact merged since is its survivor, listed once per sentence' },
                content: { type: 'string' },
                status: { type: 'string' },
                score: { type: 'number', description: 'similarity of sentence and fact (the best of the citations that lead to it)' },
                posture: { type: 'string', enum: [...POSTURES] },
                merged_from: { type: 'array', items: { type: 'string' }, description: 'the cited fact ids that merged into this fact; empty when it is cited by its own id only' },
              },
            },
          },
        },
      },
    },
  },
} as const;

const fieldProperties = {
  title: { type: 'string', minLength: 1, maxLength: MAX_REPORT_TITLE_CHARS },
  // The size limit (256 KiB of UTF-8) is checked by the application layer: 413 with the sizes.
  text: { type: 'string' },
  topic: { type: ['string', 'null'], maxLength: MAX_REPORT_TOPIC_CHARS },
  parent_id: { type: ['string', 'null'], maxLength: 200 },
  // As MCP's childrenIds: the listed reports become the report's children, any other child loses it as parent.
  children_ids: {
    type: 'array',
    maxItems: 100,
    items: { type: 'string', maxLength: 200 },
    description: "the report's children, replacing the ones it has: each gets it as parent (checked for cycles and depth before the first moves)",
  },
} as const;

const reportErrorReplies = {
  ...errorReplies,
  413: errorReply('a report text over 256 KiB of UTF-8, or a body over server.body_limit'),
  415: errorReply('an upload that is not Markdown or plain text, or a body in a media type the route does not read'),
} as const;

/** Reports: write, upload, list and search, read, edit, delete, annotate (src/read/reports.ts, src/app/reports.ts). */
export const reportRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['reports'], security: bearerSecurity };
  const repoParams = idParam('repoID');
  const reportParams = repositoryItemParams('reportID');
  const { reports } = createApplication(context);
  const named = (params: { repoID: string; reportID: string }) => ({ repository: params.repoID, report: params.reportID });

  app.post<{ Params: { repoID: string }; Body: ReportFields & ReportChildren & { text: string } }>(
    '/api/v1/repositories/:repoID/reports',
    {
      schema: {
        summary: 'Create a report from text',
        ...schema,
        params: repoParams,
        body: { type: 'object', additionalProperties: false, required: ['text'], properties: fieldProperties },
        response: { 201: { ...reportSchema, description: 'the report, created; its annotation runs in the background' }, ...reportErrorReplies },
      },
      config: { idempotent: { permission: 'reports:create' } },
    },
    async (request, reply) => reply.status(201).send(await reports.create(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request))),
  );

  app.post<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/reports/upload',
    {
      schema: {
        summary: 'Create a report from an uploaded Markdown or text file',
        ...schema,
        params: repoParams,
        consumes: ['multipart/form-data'],
        description: 'multipart/form-data with one file part (Markdown or plain text, UTF-8, at most 256 KiB) and optional fields title, topic, parent_id',
        response: { 201: { ...reportSchema, description: 'the report, created; its annotation runs in the background' }, ...reportErrorReplies },
      },
      config: {
        multipartBody: {
          file: 'the report text: Markdown or plain text, UTF-8, at most 256 KiB',
          fields: {
            title: { description: 'optional; sent before the file' },
            topic: { description: 'optional; sent before the file' },
            parent_id: { description: 'optional id of the parent report; sent before the file' },
          },
        },
        // As POST .../reports: a retried upload would make a second report.
        idempotent: { permission: 'reports:create', upload: true },
      },
    },
    async (request, reply) => {
      const upload = await receiveUpload(request);
      const report = await reports.upload(
        requireUser(request),
        {
          repository: request.params.repoID,
          content: upload.content,
          title: upload.field('title'),
          topic: upload.field('topic'),
          parent_id: upload.field('parent_id'),
        },
        traceOf(request),
      );
      return reply.status(201).send(report);
    },
  );

  app.get<{ Params: { repoID: string }; Querystring: { query?: string; status?: ReportStatus; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/reports',
    {
      schema: {
        summary: 'List or search reports',
        ...schema,
        params: repoParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { query: { type: 'string', maxLength: MAX_REPORT_QUERY_CHARS }, status: { type: 'string', enum: [...reportStatuses] }, ...pagingQuery },
        },
        response: {
          200: {
            description: 'a page of the reports, best match first when searching',
            type: 'object',
            required: ['items', 'total', 'query'],
            properties: { items: { type: 'array', items: reportSchema }, total: { type: 'integer' }, query: { type: 'string' } },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => reports.list(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.get<{ Params: { repoID: string; reportID: string } }>(
    '/api/v1/repositories/:repoID/reports/:reportID',
    { schema: { summary: 'Get a report with its text', ...schema, params: reportParams, response: { 200: { ...reportSchema, description: 'the report with its text' }, ...errorReplies } } },
    async (request) => reports.get(requireUser(request), named(request.params)),
  );

  app.put<{ Params: { repoID: string; reportID: string }; Body: ReportFields & ReportChildren }>(
    '/api/v1/repositories/:repoID/reports/:reportID',
    {
      schema: {
        summary: 'Change a report',
        ...schema,
        params: reportParams,
        body: { type: 'object', additionalProperties: false, minProperties: 1, properties: fieldProperties },
        response: { 200: { ...reportSchema, description: 'the report, changed' }, ...reportErrorReplies },
      },
    },
    async (request) => reports.update(requireUser(request), { ...named(request.params), ...request.body }, traceOf(request)),
  );

  app.delete<{ Params: { repoID: string; reportID: string } }>(
    '/api/v1/repositories/:repoID/reports/:reportID',
    { schema: { summary: 'Delete a report', ...schema, params: reportParams, response: { 204: { type: 'null', description: 'the report is deleted' }, ...errorReplies } } },
    async (request, reply) => {
      await reports.delete(requireUser(request), named(request.params), traceOf(request));
      return reply.status(204).send();
    },
  );

  app.post<{ Params: { repoID: string; reportID: string } }>(
    '/api/v1/repositories/:repoID/reports/:reportID/annotate',
    { schema: { summary: 'Annotate every sentence of a report anew', ...schema, params: reportParams, response: { 202: { ...reportSchema, description: 'the annotation is queued; the report as it stands' }, ...errorReplies } } },
    async (request, reply) => reply.status(202).send(await reports.annotate(requireUser(request), named(request.params), traceOf(request))),
  );

  app.get<{ Params: { repoID: string; reportID: string }; Querystring: { limit?: number; offset: number } }>(
    '/api/v1/repositories/:repoID/reports/:reportID/annotations',
    {
      schema: {
        summary: 'Get the per-sentence fact annotations of a report',
        ...schema,
        params: reportParams,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            limit: { type: 'integer', minimum: 1, maximum: 500, description: 'sentences in the page; without it, every sentence' },
            offset: pagingQuery.offset,
          },
        },
        response: { 200: { ...annotationsSchema, description: 'the annotations of the report, sentence by sentence' }, ...errorReplies },
      },
    },
    async (request) => reports.annotations(requireUser(request), { ...named(request.params), ...request.query }),
  );
};
