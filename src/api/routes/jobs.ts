import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { jobStates, type JobRecord } from '../../pipeline/jobs.js';
import { HttpError, notFound } from '../errors.js';
import { requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, pagingQuery, listReply } from '../schemas.js';

const jobSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    kind: { type: 'string' },
    repository_id: { type: ['string', 'null'] },
    subject_id: { type: 'string' },
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

function presentJob(job: JobRecord) {
  return {
    id: job.id,
    kind: job.kind,
    repository_id: job.repositoryId,
    subject_id: job.subjectId,
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

/** Tasks API: the background jobs of a repository, and retrying a failed one. */
export const jobRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['jobs'], security: bearerSecurity };
  const jobParams = {
    type: 'object',
    required: ['repoID', 'jobID'],
    properties: { repoID: { type: 'string', minLength: 1 }, jobID: { type: 'string', format: 'uuid' } },
  } as const;

  app.get<{ Params: { repoID: string }; Querystring: { kind?: string; state?: JobRecord['state']; subject_id?: string; limit: number; offset: number } }>(
    '/api/v1/repositories/:repoID/jobs',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            kind: { type: 'string', maxLength: 100 },
            state: { type: 'string', enum: [...jobStates] },
            subject_id: { type: 'string', maxLength: 200 },
            ...pagingQuery,
          },
        },
        response: {
          200: listReply(jobSchema),
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:read');
      const { kind, state, subject_id, limit, offset } = request.query;
      const list = await context.jobs.list({ repositoryId: repository.id, kind, state, subjectId: subject_id, limit, offset });
      return { items: list.jobs.map(presentJob), total: list.total };
    },
  );

  app.get<{ Params: { repoID: string; jobID: string } }>(
    '/api/v1/repositories/:repoID/jobs/:jobID',
    { schema: { ...schema, params: jobParams, response: { 200: jobSchema, ...errorReplies } } },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:read');
      const job = await context.jobs.get(request.params.jobID);
      if (!job || job.repositoryId !== repository.id) throw notFound('job');
      return presentJob(job);
    },
  );

  app.post<{ Params: { repoID: string; jobID: string } }>(
    '/api/v1/repositories/:repoID/jobs/:jobID/retry',
    { schema: { ...schema, params: jobParams, response: { 202: jobSchema, ...errorReplies } } },
    async (request, reply) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'jobs:write');
      const job = await context.jobs.get(request.params.jobID);
      if (!job || job.repositoryId !== repository.id) throw notFound('job');
      const result = await context.jobs.retry(job.id);
      if (result.status === 'not_found') throw notFound('job');
      if (result.status === 'not_retryable') throw new HttpError(409, 'conflict', `job is ${result.job.state}; only failed or dead jobs can be retried`);
      context.wakeWorkers();
      return reply.status(202).send(presentJob(result.job));
    },
  );
};
