import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import { can, SYSTEM_DOMAIN } from '../../auth/rbac.js';
import { forbidden, notFound } from '../errors.js';
import { requireUser } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, userSchema } from '../schemas.js';

/** Profiles: one's own, or anyone's with `user:read` / `user:write` on the system domain. */
export const userRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['users'], security: bearerSecurity };
  app.get('/api/v1/users/me', { schema: { ...schema, response: { 200: userSchema, ...errorReplies } } }, async (request) => {
    const principal = requireUser(request);
    const user = await context.identity.loadUser(principal.userId);
    if (!user) throw notFound('user');
    return user;
  });

  app.get<{ Params: { userID: string } }>(
    '/api/v1/users/:userID',
    { schema: { ...schema, params: idParam('userID'), response: { 200: userSchema, ...errorReplies } } },
    async (request) => {
      const principal = requireUser(request);
      const { userID } = request.params;
      if (userID !== principal.userId && !can(principal.assignments, SYSTEM_DOMAIN, 'user:read')) {
        throw forbidden('permission denied: user:read');
      }
      const user = await context.identity.loadUser(userID);
      if (!user) throw notFound('user');
      return user;
    },
  );

  app.put<{ Params: { userID: string }; Body: { name?: string; email?: string } }>(
    '/api/v1/users/:userID',
    {
      schema: {
        ...schema,
        params: idParam('userID'),
        body: {
          type: 'object',
          additionalProperties: false,
          minProperties: 1,
          properties: { name: { type: 'string', maxLength: 200 }, email: { type: 'string', minLength: 3, maxLength: 320 } },
        },
        response: { 200: userSchema, ...errorReplies },
      },
    },
    async (request) => {
      const principal = requireUser(request);
      const { userID } = request.params;
      if (userID !== principal.userId && !can(principal.assignments, SYSTEM_DOMAIN, 'user:write')) {
        throw forbidden('permission denied: user:write');
      }
      return context.identity.updateProfile(principal.userId, userID, request.body);
    },
  );
};
