import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { jobStates, type JobCounts, type JobRecord } from '../../pipeline/jobs.js';
import type { JobState } from '../../pipeline/types.js';
import { HttpError, notFound } from '../errors.js';
import { requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, pagingQuery } from '../schemas.js';

/**
 * Tasks: the background jobs of a repository (one row per job of the pipeline, docs/pipeline.md),
 * their counts per kind and state, whether a source or report is done, and retrying a failed job.
 */

export const jobSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    kind: { type: 'string' },
    repository_id: { type: ['string', 'null'] },
    subject_id: { type: 'string' },
    source_id: { type: ['string', 'null'] },
    report_id: { type: ['string', 'null'] },
    trigger_event_id: { type: 'string' },
    state: { type: 'string', enum: [...jobStates] },
    attempts: { type: 'integer' },
    max_attempts: { type: 'integer' },
    last_error: { type: ['string', 'null'] },
    next_attempt_at: { type: ['string', 'null'] },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
    finished_at: { type: ['string', 'null'] },
  },
} as const;

export function presentJob(job: JobRecord) {
  return {
    id: job.id,
    kind: job.kind,
    repository_id: job.repositoryId,
    subject_id: job.subjectId,
    source_id: job.sourceId,
    report_id: job.reportId,
    trigger_event_id: job.triggerEventId,
    state: job.state,
    attempts: job.attempts,
    max_attempts: job.maxAttempts,
    last_error: job.lastError,
    next_attempt_at: job.nextAttemptAt,
    created_at: job.createdAt,
    updated_at: job.updatedAt,
    finished_at: job.finishedAt,
  };
}

/** counts: {kind: {state: n}}, every state present. */
const countsSchema = {
  type: 'object',
  description: 'jobs per kind, then per state',
  additionalProperties: {
    type: 'object',
    properties: Object.fromEntries(jobStates.map((state) => [state, { type: 'integer' }])),
  },
} as const;

/** Nothing queued or running among the counted jobs. */
function nothingPending(counts: JobCounts): boolean {
  return Object.values(counts).every((byState) => byState.queued === 0 && byState.running === 0);
}

function totalsByState(counts: JobCounts): Record<JobState, number> {
  const totals = Object.fromEntries(jobStates.map((state) => [state, 0])) as Record<JobState, number>;
  for (const byState of Object.values(counts)) for (const state of jobStates) totals[state] += byState[state] ?? 0;
  return totals;
}

export const taskRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['tasks'], security: bearerSecurity };
  const taskParams = {
    type: 'object',
    required: ['repoID', 'taskID'],
    properties: { repoID: { type: 'string', minLength: 1 }, taskID: { type: 'string', format: 'uuid' } },
  } as const;

  app.get<{
    Params: { repoID: string };
    Querystring: { source_id?: string; report_id?: string; state?: JobState; kind?: string; limit: number; offset: number };
  }>(
    '/api/v1/repositories/:repoID/tasks',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            source_id: { type: 'string', minLength: 1, maxLength: 200 },
            report_id: { type: 'string', minLength: 1, maxLength: 200 },
            state: { type: 'string', enum: [...jobStates] },
            kind: { type: 'string', minLength: 1, maxLength: 100 },
            ...pagingQuery,
          },
        },
        response: {
          200: {
            type: 'object',
            required: ['items', 'total', 'counts', 'complete'],
            properties: {
              items: { type: 'array', items: jobSchema },
              total: { type: 'integer' },
              counts: countsSchema,
              complete: {
                type: 'boolean',
                description: 'nothing queued or running for the source (source_id), the report (report_id), or else the whole repository',
              },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:read');
      const { source_id: sourceId, report_id: reportId, state, kind, limit, offset } = request.query;
      const list = await context.jobs.list({ repositoryId: repository.id, sourceId, reportId, state, kind, limit, offset });
      // Counts and completeness cover the source or report (or repository) whatever the state/kind filters.
      const counts = await context.jobs.countsFor({ repositoryId: repository.id, sourceId, reportId });
      const complete =
        sourceId !== undefined && reportId === undefined
          ? await context.jobs.isComplete({ repositoryId: repository.id, sourceId })
          : nothingPending(counts);
      return { items: list.jobs.map(presentJob), total: list.total, counts, complete };
    },
  );

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/tasks/stats',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        response: {
          200: {
            type: 'object',
            required: ['counts', 'totals', 'complete'],
            properties: {
              counts: countsSchema,
              totals: { type: 'object', properties: Object.fromEntries(jobStates.map((state) => [state, { type: 'integer' }])) },
              complete: { type: 'boolean', description: 'nothing queued or running in the repository' },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:read');
      const counts = await context.jobs.countsFor({ repositoryId: repository.id });
      return { counts, totals: totalsByState(counts), complete: nothingPending(counts) };
    },
  );

  app.get<{ Params: { repoID: string; taskID: string } }>(
    '/api/v1/repositories/:repoID/tasks/:taskID',
    { schema: { ...schema, params: taskParams, response: { 200: jobSchema, ...errorReplies } } },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:read');
      const job = await context.jobs.get(request.params.taskID);
      if (!job || job.repositoryId !== repository.id) throw notFound('task');
      return presentJob(job);
    },
  );

  app.post<{ Params: { repoID: string; taskID: string } }>(
    '/api/v1/repositories/:repoID/tasks/:taskID/retry',
    { schema: { ...schema, params: taskParams, response: { 202: jobSchema, ...errorReplies } } },
    async (request, reply) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:write');
      const job = await context.jobs.get(request.params.taskID);
      if (!job || job.repositoryId !== repository.id) throw notFound('task');
      const result = await context.jobs.retry(job.id);
      if (result.status === 'not_found') throw notFound('task');
      if (result.status === 'not_retryable') throw new HttpError(409, 'conflict', `task is ${result.job.state}; only failed or dead tasks can be retried`);
      context.wakeWorkers();
      return reply.status(202).send(presentJob(result.job));
    },
  );
};
