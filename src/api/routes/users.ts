import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { requireUser } from '../guard.js';
import { errorReply } from '../errors.js';
import { bearerSecurity, errorReplies, idParam, userSchema } from '../schemas.js';

/** Profiles: one's own, or anyone's with `user:read` / `user:write` on the system domain. */
export const userRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['users'], security: bearerSecurity };
  const { users } = createApplication(context);
  app.get('/api/v1/users/me', { schema: { summary: 'The signed-in user', ...schema, response: { 200: { ...userSchema, description: 'the signed-in user' }, ...errorReplies } } }, async (request) => {
    const principal = requireUser(request);
    return users.get(principal, { user: principal.userId });
  });

  app.get<{ Params: { userID: string } }>(
    '/api/v1/users/:userID',
    { schema: { summary: 'Get a user', ...schema, params: idParam('userID'), response: { 200: { ...userSchema, description: 'the user' }, ...errorReplies } } },
    async (request) => users.get(requireUser(request), { user: request.params.userID }),
  );

  app.put<{ Params: { userID: string }; Body: { name?: string; email?: string } }>(
    '/api/v1/users/:userID',
    {
      schema: {
        summary: 'Change the name or e-mail of a user (`me`: the caller)',
        ...schema,
        params: idParam('userID'),
        body: {
          type: 'object',
          additionalProperties: false,
          minProperties: 1,
          properties: { name: { type: 'string', maxLength: 200 }, email: { type: 'string', minLength: 3, maxLength: 320 } },
        },
        response: { 200: { ...userSchema, description: 'the user, changed' }, ...errorReplies, 409: errorReply('the e-mail address is taken') },
      },
    },
    async (request) => {
      const principal = requireUser(request);
      // `me` names the caller here too, as in GET /users/me.
      const user = request.params.userID === 'me' ? principal.userId : request.params.userID;
      return users.updateProfile(principal, { ...request.body, user });
    },
  );
};
