import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { permissionsOf } from '../../auth/rbac.js';
import { requireUser } from '../guard.js';
import { bearerSecurity, errorReplies } from '../schemas.js';

/**
 * GET /api/v1/permissions: the caller's roles and permissions per domain — `system`, each
 * `repository:<id>` it holds a role on, and `repository:*` for a sysadmin's rights everywhere.
 */
export const permissionRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app) => {
  app.get(
    '/api/v1/permissions',
    {
      schema: {
        tags: ['users'],
        security: bearerSecurity,
        response: {
          200: {
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
    async (request) => {
      const principal = requireUser(request);
      const byDomain = permissionsOf(principal.assignments);
      const domains = [...byDomain.entries()]
        .map(([domain, permissions]) => ({
          domain,
          roles: principal.assignments.filter((a) => a.domain === domain).map((a) => a.role).sort(),
          permissions: [...permissions].sort(),
        }))
        .sort((a, b) => a.domain.localeCompare(b.domain));
      return { user_id: principal.userId, domains };
    },
  );
};
