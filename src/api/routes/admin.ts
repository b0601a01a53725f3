import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import type { RoleAssignmentInput } from '../../app/roleChanges.js';
import { requireUser, traceOf } from '../guard.js';
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

/** Administration: users, role assignments and the permission catalog. */
export const adminRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['admin'], security: bearerSecurity };
  const { users } = createApplication(context);

  app.get(
    '/api/v1/admin/users',
    {
      schema: {
        summary: 'List users with their role assignments',
        ...schema,
        response: {
          200: {
            description: 'the users, each with the roles they hold per domain',
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
    async (request) => users.list(requireUser(request)),
  );

  app.put<{ Body: RoleAssignmentInput }>(
    '/api/v1/admin/users/roles',
    { schema: { summary: 'Grant a role to a user in a domain', ...schema, body: assignmentSchema, response: { 200: { ...assignmentSchema, description: 'the role assignment, granted (or already held)' }, ...errorReplies } } },
    async (request) => users.grantRole(requireUser(request), request.body, traceOf(request)),
  );

  app.delete<{ Body: RoleAssignmentInput }>(
    '/api/v1/admin/users/roles',
    { schema: { summary: 'Revoke a role from a user in a domain', ...schema, body: assignmentSchema, response: { 204: { type: 'null', description: 'the role is revoked' }, ...errorReplies } } },
    async (request, reply) => {
      await users.revokeRole(requireUser(request), request.body, traceOf(request));
      return reply.status(204).send();
    },
  );

  app.get(
    '/api/v1/admin/permissions',
    {
      schema: {
        summary: 'List all roles and their permissions',
        ...schema,
        response: {
          200: {
            description: 'every role with the permissions it grants',
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
    async (request) => users.catalog(requireUser(request)),
  );
};
