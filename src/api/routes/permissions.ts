import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { requireUser } from '../guard.js';
import { bearerSecurity, errorReplies } from '../schemas.js';

/**
 * GET /api/v1/permissions: the caller's roles and permissions per domain — `system`, each
 * `repository:<id>` it holds a role on, and `repository:*` for a sysadmin's rights everywhere.
 */
export const permissionRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { users } = createApplication(context);
  app.get(
    '/api/v1/permissions',
    {
      schema: {
        summary: 'The caller\'s roles and permissions per domain',
        tags: ['users'],
        security: bearerSecurity,
        response: {
          200: {
            description: "the caller's roles and permissions per domain",
            type: 'object',
            required: ['user_id', 'domains'],
            properties: {
              user_id: { type: 'string' },
              domains: {
                type: 'array',
                items: {
                  type: 'object',
                  required: ['domain', 'roles', 'permissions'],
                  properties: {
                    domain: { type: 'string' },
                    roles: { type: 'array', items: { type: 'string' } },
                    permissions: { type: 'array', items: { type: 'string' } },
                  },
                },
              },
            },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => users.permissions(requireUser(request)),
  );
};
