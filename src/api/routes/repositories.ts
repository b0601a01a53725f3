import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { repositoryPresets } from '../../domain/repository/presets.js';
import { can, repositoryDomain, SYSTEM_DOMAIN } from '../../auth/rbac.js';
import type { Principal } from '../../auth/identity.js';
import { forbidden } from '../errors.js';
import { requestMetadata, requireRepository, requireSystemPermission, requireUser, type RepositoryRow } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, isoDate, listReply } from '../schemas.js';

export const repositorySchema = {
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
  accepted_promptset_hashes: { type: 'array', maxItems: 100, items: { type: 'string', pattern: '^[0-9a-f]{64}$' } },
} as const;

export function presentRepository(row: RepositoryRow, principal: Principal) {
  const domain = repositoryDomain(row.id);
  return {
    ...row,
    accepted_promptset_hashes: row.accepted_promptset_hashes ?? [],
    created_at: isoDate(row.created_at),
    updated_at: isoDate(row.updated_at),
    roles: principal.assignments.filter((a) => a.domain === domain).map((a) => a.role),
  };
}

/** Repositories: create, list, read, update, delete; presets. */
export const repositoryRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['repositories'], security: bearerSecurity };
  const load = async (id: string, principal: Principal) =>
    presentRepository(await context.db.knex('repositories').where({ id }).first(), principal);

  app.get(
    '/api/v1/repositories/presets',
    {
      schema: {
        ...schema,
        response: {
          200: {
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
    async (request) => {
      requireUser(request);
      return { default: context.config.default_repository_preset, presets: repositoryPresets };
    },
  );

  app.post<{ Body: { name: string; slug?: string; description?: string; preset?: string; tier?: string; accepted_promptset_hashes?: string[] } }>(
    '/api/v1/repositories',
    {
      schema: {
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
        response: { 201: repositorySchema, ...errorReplies },
      },
    },
    async (request, reply) => {
      const principal = requireSystemPermission(request, 'repositories:create');
      const repositoryId = await context.repositories.create(request.body, requestMetadata(request, principal, null), principal.userId);
      // The caller just became owner: show the role in the reply.
      const refreshed = { ...principal, assignments: await context.identity.roleAssignments(principal.userId) };
      return reply.status(201).send(await load(repositoryId, refreshed));
    },
  );

  app.get<{ Querystring: { limit: number; offset: number } }>(
    '/api/v1/repositories',
    {
      schema: {
        ...schema,
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: { limit: { type: 'integer', minimum: 1, maximum: 500, default: 100 }, offset: { type: 'integer', minimum: 0, default: 0 } },
        },
        response: {
          200: listReply(repositorySchema),
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const principal = requireUser(request);
      const query = context.db.knex('repositories').whereNull('deleted_at');
      // Everyone sees the repositories they hold a role on; a sysadmin sees all.
      if (!can(principal.assignments, SYSTEM_DOMAIN, 'role:manage')) {
        const ids = principal.assignments.filter((a) => a.domain.startsWith('repository:')).map((a) => a.domain.slice('repository:'.length));
        query.whereIn('id', ids);
      }
      const [{ n }] = await query.clone().count<{ n: string }[]>('* as n');
      const rows: RepositoryRow[] = await query.orderBy([{ column: 'created_at' }, { column: 'id' }]).limit(request.query.limit).offset(request.query.offset);
      return { items: rows.map((row) => presentRepository(row, principal)), total: Number(n) };
    },
  );

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID',
    { schema: { ...schema, params: idParam('repoID'), response: { 200: repositorySchema, ...errorReplies } } },
    async (request) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'repositories:read');
      return presentRepository(repository, principal);
    },
  );

  app.put<{ Params: { repoID: string }; Body: { name?: string; slug?: string; description?: string; accepted_promptset_hashes?: string[] } }>(
    '/api/v1/repositories/:repoID',
    {
      schema: {
        ...schema,
        params: idParam('repoID'),
        body: { type: 'object', additionalProperties: false, minProperties: 1, properties: writableFields },
        response: { 200: repositorySchema, ...errorReplies },
      },
    },
    async (request) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'repositories:write');
      if (request.body.accepted_promptset_hashes !== undefined && !can(principal.assignments, repositoryDomain(repository.id), 'repositories:manage')) {
        throw forbidden('permission denied: repositories:manage');
      }
      await context.repositories.update(repository.id, request.body, requestMetadata(request, principal, repository.id));
      return load(repository.id, principal);
    },
  );

  app.delete<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID',
    { schema: { ...schema, params: idParam('repoID'), response: { 204: { type: 'null' }, ...errorReplies } } },
    async (request, reply) => {
      const { principal, repository } = await requireRepository(context, request, request.params.repoID, 'repositories:delete');
      await context.repositories.remove(repository.id, requestMetadata(request, principal, repository.id));
      return reply.status(204).send();
    },
  );
};
