import type { FastifyPluginAsync } from 'fastify';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import { TASK_KINDS } from '../../config/types.js';
import { jobStates } from '../../pipeline/jobs.js';
import type { TaskListInput } from '../../read/tasks.js';
import { requireUser } from '../guard.js';
import { errorReply } from '../errors.js';
import { bearerSecurity, errorReplies, idParam, jobSchema, pagingQuery, repositoryItemParams } from '../schemas.js';

/** counts: {kind: {state: n}}, every state present. */
const countsSchema = {
  type: 'object',
  description: 'jobs per kind, then per state',
  additionalProperties: {
    type: 'object',
    properties: Object.fromEntries(jobStates.map((state) => [state, { type: 'integer' }])),
  },
} as const;

/**
 * Tasks: the background jobs of a repository, their counts per kind and state, whether a source
 * or report is done (src/read/tasks.ts), and retrying a failed job (src/app/tasks.ts).
 */
export const taskRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['tasks'], security: bearerSecurity };
  const taskParams = repositoryItemParams('taskID');
  const { tasks } = createApplication(context);
  const named = (params: { repoID: string; taskID: string }) => ({ repository: params.repoID, task: params.taskID });

  app.get<{ Params: { repoID: string }; Querystring: Omit<TaskListInput, 'repository'> }>(
    '/api/v1/repositories/:repoID/tasks',
    {
      schema: {
        summary: 'List the tasks (pipeline jobs) of a repository',
        ...schema,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            source_id: { type: 'string', minLength: 1, maxLength: 200 },
            investigation_id: { type: 'string', minLength: 1, maxLength: 200, description: "the tasks of the investigation's sources (not with source_id)" },
            report_id: { type: 'string', minLength: 1, maxLength: 200, description: "the report's annotation tasks (not with source_id or investigation_id: they work for no source)" },
            state: { type: 'string', enum: [...jobStates] },
            kind: { type: 'string', enum: [...TASK_KINDS], description: 'a kind of task this release makes (the registry exchange\'s are not built: a 400)' },
            ...pagingQuery,
          },
        },
        response: {
          200: {
            description: 'a page of the tasks',
            type: 'object',
            required: ['items', 'total', 'counts', 'complete'],
            properties: {
              items: { type: 'array', items: jobSchema },
              total: { type: 'integer' },
              counts: countsSchema,
              complete: {
                type: 'boolean',
                description:
                  'nothing queued or running for the source (source_id), the report (report_id), or else the whole repository; ' +
                  "for an investigation (investigation_id), also every one of its sources processed or failed",
              },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => tasks.list(requireUser(request), { repository: request.params.repoID, ...request.query }),
  );

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/tasks/stats',
    {
      schema: {
        summary: 'Task counts of a repository',
        ...schema,
        params: idParam('repoID'),
        response: {
          200: {
            description: 'the count of the tasks of the repository by state',
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
    async (request) => tasks.stats(requireUser(request), { repository: request.params.repoID }),
  );

  app.get<{ Params: { repoID: string; taskID: string } }>(
    '/api/v1/repositories/:repoID/tasks/:taskID',
    { schema: { summary: 'Get a task', ...schema, params: taskParams, response: { 200: { ...jobSchema, description: 'the task' }, ...errorReplies } } },
    async (request) => tasks.get(requireUser(request), named(request.params)),
  );

  app.post<{ Params: { repoID: string; taskID: string } }>(
    '/api/v1/repositories/:repoID/tasks/:taskID/retry',
    { schema: { summary: 'Retry a failed or dead task', ...schema, params: taskParams, response: { 202: { ...jobSchema, description: 'the task, queued again' }, ...errorReplies, 409: errorReply('the task is neither failed nor dead, a later task took its place, its source failed (retry the source) or was deleted') } } },
    async (request, reply) => reply.status(202).send(await tasks.retry(requireUser(request), named(request.params))),
  );
};
