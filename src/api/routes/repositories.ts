import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import type { CreateRepositoryInput, RepositoryChange } from '../../app/repositories.js';
import { repositoryPresets } from '../../domain/repository/presets.js';
import { requireUser, traceOf } from '../guard.js';
import { errorReply } from '../errors.js';
import { bearerSecurity, errorReplies, idParam, listReply, pagingQuery } from '../schemas.js';

const repositorySchema = {
  type: 'object',
  required: ['id', 'name', 'slug', 'tier', 'roles'],
  properties: {
    id: { type: 'string' },
    name: { type: 'string' },
    slug: { type: 'string' },
    description: { type: 'string' },
    preset: { type: 'string' },
    tier: { type: 'string' },
    accepted_promptset_hashes: { type: 'array', items: { type: 'string' } },
    registry_id: { type: ['string', 'null'] },
    created_by: { type: 'string' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
    roles: { type: 'array', items: { type: 'string' }, description: "the caller's roles on this repository" },
  },
} as const;

const writableFields = {
  name: { type: 'string', minLength: 1, maxLength: 200 },
  slug: { type: 'string', minLength: 1, maxLength: 64 },
  description: { type: 'string', maxLength: 5000 },
  // A set of hashes: one listed twice is a mistake in the request, not a second entry to keep.
  accepted_promptset_hashes: { type: 'array', maxItems: 100, uniqueItems: true, items: { type: 'string', pattern: '^[0-9a-f]{64}$' } },
} as const;

/** Repositories: create, list, read, update, delete; presets. */
export const repositoryRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['repositories'], security: bearerSecurity };
  const { repositories } = createApplication(context);

  app.get(
    '/api/v1/repositories/presets',
    {
      schema: {
        summary: 'List the repository presets',
        ...schema,
        response: {
          200: {
            description: 'the presets a repository can be created from',
            type: 'object',
            properties: {
              default: { type: 'string' },
              presets: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['id', 'label', 'description', 'providers', 'contexts'],
                  properties: {
                    id: { type: 'string' },
                    label: { type: 'string' },
                    description: { type: 'string' },
                    providers: {
                      type: 'object',
                      properties: { search: { type: 'array', items: { type: 'string' } }, resolution: { type: 'array', items: { type: 'string' } } },
                    },
                    contexts: { type: 'array', items: { type: 'string' } },
                    custom_contexts: { type: 'array', items: { type: 'string' } },
                  },
                },
              },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => repositories.presets(requireUser(request)),
  );

  app.post<{ Body: CreateRepositoryInput }>(
    '/api/v1/repositories',
    {
      schema: {
        summary: 'Create a repository',
        ...schema,
        body: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: {
            ...writableFields,
            preset: { type: 'string', enum: repositoryPresets.map((preset) => preset.id) },
            tier: { type: 'string', enum: ['shared', 'personal'] },
          },
        },
        response: { 201: { ...repositorySchema, description: 'the repository, created' }, ...errorReplies, 409: errorReply('the slug is taken') },
      },
      // A retry whose first answer was lost would make a second repository (a derived slug gets a suffix).
      config: { idempotent: { permission: 'repositories:create' } },
    },
    async (request, reply) => reply.status(201).send(await repositories.create(requireUser(request), request.body, traceOf(request))),
  );

  app.get<{ Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories',
    {
      schema: {
        summary: 'List the repositories the caller holds a role on',
        ...schema,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { limit: { type: 'integer', minimum: 1, maximum: 500, default: 100 }, offset: pagingQuery.offset },
        },
        response: {
          200: { ...listReply(repositorySchema), description: 'a page of the repositories the caller holds a role on' },
          ...errorReplies,
        },
      },
    },
    async (request) => repositories.list(requireUser(request), request.query),
  );

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID',
    { schema: { summary: 'Get a repository by id or slug', ...schema, params: idParam('repoID'), response: { 200: { ...repositorySchema, description: 'the repository' }, ...errorReplies } } },
    async (request) => repositories.get(requireUser(request), { repository: request.params.repoID }),
  );

  app.put<{ Params: { repoID: string }; Body: RepositoryChange }>(
    '/api/v1/repositories/:repoID',
    {
      schema: {
        summary: 'Change a repository',
        ...schema,
        params: idParam('repoID'),
        body: { type: 'object', additionalProperties: false, minProperties: 1, properties: writableFields },
        response: { 200: { ...repositorySchema, description: 'the repository, changed' }, ...errorReplies },
      },
    },
    async (request) => repositories.update(requireUser(request), { ...request.body, repository: request.params.repoID }, traceOf(request)),
  );

  app.delete<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID',
    { schema: { summary: 'Delete a repository', ...schema, params: idParam('repoID'), response: { 204: { type: 'null', description: 'the repository is deleted' }, ...errorReplies } } },
    async (request, reply) => {
      await repositories.remove(requireUser(request), { repository: request.params.repoID }, traceOf(request));
      return reply.status(204).send();
    },
  );
};
