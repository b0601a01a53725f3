import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { userDecider } from '../../domain/user/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import { isKnownRole, rolesCatalog, scopeOfDomain } from '../../auth/rbac.js';
import { badRequest, notFound } from '../errors.js';
import { requestMetadata, requireSystemPermission } from '../guard.js';
import { bearerSecurity, errorReplies } from '../schemas.js';

const assignmentSchema = {
  type: 'object',
  required: ['user_id', 'role', 'domain'],
  additionalProperties: false,
  properties: {
    user_id: { type: 'string', minLength: 1, maxLength: 200 },
    role: { type: 'string', minLength: 1, maxLength: 100 },
    domain: { type: 'string', minLength: 1, maxLength: 200 },
  },
} as const;

type Assignment = { user_id: string; role: string; domain: string };

/** Administration: users, role assignments and the permission catalog. */
export const adminRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['admin'], security: bearerSecurity };

  app.get(
    '/api/v1/admin/users',
    {
      schema: {
        ...schema,
        response: {
          200: {
            type: 'object',
            required: ['users'],
            properties: {
              users: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: {
                    id: { type: 'string' },
                    email: { type: 'string' },
                    name: { type: 'string' },
                    created_at: { type: 'string' },
                    roles: { type: 'array', items: { type: 'object', properties: { role: { type: 'string' }, domain: { type: 'string' } } } },
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
      requireSystemPermission(request, 'user:read');
      const users = await context.db.knex('users').orderBy('created_at').select('id', 'email', 'name', 'created_at');
      const roles: { user_id: string; role: string; domain: string }[] = await context.db
        .knex('role_assignments')
        .select('user_id', 'role', 'domain')
        .orderBy(['domain', 'role']);
      return {
        users: users.map((user) => ({
          ...user,
          created_at: new Date(user.created_at).toISOString(),
          roles: roles.filter((r) => r.user_id === user.id).map(({ role, domain }) => ({ role, domain })),
        })),
      };
    },
  );

  /** Validates an assignment against the catalog and the existing users and repositories. */
  async function checkAssignment({ user_id, role, domain }: Assignment) {
    if (!scopeOfDomain(domain)) throw badRequest(`unknown domain '${domain}': use 'system' or 'repository:<id>'`);
    if (!isKnownRole(role, domain)) throw badRequest(`role '${role}' does not exist in domain '${domain}'`);
    if (!(await context.db.knex('users').where({ id: user_id }).first('id'))) throw notFound('user');
    if (domain.startsWith('repository:')) {
      const repositoryId = domain.slice('repository:'.length);
      const exists = await context.db.knex('repositories').where({ id: repositoryId }).whereNull('deleted_at').first('id');
      if (!exists) throw notFound('repository');
    }
  }

  const repositoryOf = (domain: string) => (domain.startsWith('repository:') ? domain.slice('repository:'.length) : null);

  app.put<{ Body: Assignment }>(
    '/api/v1/admin/users/roles',
    { schema: { ...schema, body: assignmentSchema, response: { 200: assignmentSchema, ...errorReplies } } },
    async (request) => {
      const principal = requireSystemPermission(request, 'role:manage');
      await checkAssignment(request.body);
      const { user_id, role, domain } = request.body;
      await context.commands.execute(
        streamName('user', user_id),
        userDecider,
        { type: 'GrantRole', role, domain },
        requestMetadata(request, principal, repositoryOf(domain)),
      );
      return { user_id, role, domain };
    },
  );

  app.delete<{ Body: Assignment }>(
    '/api/v1/admin/users/roles',
    { schema: { ...schema, body: assignmentSchema, response: { 204: { type: 'null' }, ...errorReplies } } },
    async (request, reply) => {
      const principal = requireSystemPermission(request, 'role:manage');
      const { user_id, role, domain } = request.body;
      if (!(await context.db.knex('users').where({ id: user_id }).first('id'))) throw notFound('user');
      await context.commands.execute(
        streamName('user', user_id),
        userDecider,
        { type: 'RevokeRole', role, domain },
        requestMetadata(request, principal, repositoryOf(domain)),
      );
      return reply.status(204).send();
    },
  );

  app.get(
    '/api/v1/admin/permissions',
    {
      schema: {
        ...schema,
        response: {
          200: {
            type: 'object',
            properties: {
              roles: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: {
                    name: { type: 'string' },
                    scope: { type: 'string' },
                    description: { type: 'string' },
                    permissions: { type: 'array', items: { type: 'string' } },
                  },
                },
              },
              permissions: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: {
                    permission: { type: 'string' },
                    scope: { type: 'string' },
                    description: { type: 'string' },
                    roles: { type: 'array', items: { type: 'string' } },
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
      requireSystemPermission(request, 'role:read');
      return rolesCatalog();
    },
  );
};
