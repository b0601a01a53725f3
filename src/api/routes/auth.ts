import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { requireUser } from '../guard.js';
import { errorReply, HttpError } from '../errors.js';
import { errorReplies, userSchema, bearerSecurity } from '../schemas.js';

const sessionReply = {
  type: 'object',
  required: ['user', 'token', 'refresh_token'],
  properties: { user: userSchema, token: { type: 'string' }, refresh_token: { type: 'string' } },
} as const;

const credentialsBody = (withName: boolean) =>
  ({
    type: 'object',
    required: ['email', 'password'],
    additionalProperties: false,
    properties: {
      email: { type: 'string', minLength: 3, maxLength: 320 },
      password: { type: 'string', minLength: 1, maxLength: 1024 },
      ...(withName ? { name: { type: 'string', maxLength: 200 } } : {}),
    },
  }) as const;

/**
 * Session API: register, login, logout, refresh. Register, login and refresh take no token, so
 * each lists only the errors its handler gives (not the shared 401/403/404/409 of errorReplies).
 */
export const authRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  // Answers that carry tokens are never stored by a cache on the way (RFC 6749 5.1's rule for
  // token responses; errors too, so no cache keeps one of this plugin's answers at all).
  app.addHook('onRequest', async (_request, reply) => {
    reply.header('cache-control', 'no-store');
  });
  app.post<{ Body: { email: string; password: string; name?: string } }>(
    '/api/v1/auth/register',
    { schema: { summary: 'Register a user and start a session', tags: ['auth'], body: credentialsBody(true), response: {
          201: { ...sessionReply, description: 'the user, registered and signed in' },
          400: errorReply('a body that fails its schema, an e-mail address that is not one, or a password the policy refuses'),
          409: errorReply('the e-mail address is taken'),
        }, } },
    async (request, reply) => reply.status(201).send(await context.identity.register(request.body)),
  );
  app.post<{ Body: { email: string; password: string } }>(
    '/api/v1/auth/login',
    { schema: { summary: 'Sign in with e-mail and password', tags: ['auth'], body: credentialsBody(false), response: { 200: { ...sessionReply, description: 'signed in: a new session' }, 400: errorReplies[400], 401: errorReply('a wrong e-mail address or password') } } },
    async (request) => context.identity.login(request.body),
  );
  app.post(
    '/api/v1/auth/logout',
    { schema: { summary: 'End the current session', tags: ['auth'], security: bearerSecurity, response: { 204: { type: 'null', description: 'the session is ended' }, ...errorReplies, 400: errorReply('the bearer token is an API key or OAuth token, not a session') } } },
    async (request, reply) => {
      const { credential } = requireUser(request);
      if (credential.kind !== 'session') throw new HttpError(400, 'bad_request', 'logout ends a session; revoke an API key or OAuth token instead');
      await context.identity.logout(credential.id);
      return reply.status(204).send();
    },
  );
  app.post<{ Body: { refresh_token: string } }>(
    '/api/v1/auth/refresh',
    {
      schema: {
        summary: 'Rotate a refresh token for a new access token',
        tags: ['auth'],
        body: {
          type: 'object',
          required: ['refresh_token'],
          additionalProperties: false,
          properties: { refresh_token: { type: 'string', minLength: 1, maxLength: 512 } },
        },
        response: {
          200: { description: 'a new access token and the refresh token that replaces the one sent', type: 'object', required: ['token', 'refresh_token'], properties: { token: { type: 'string' }, refresh_token: { type: 'string' } } },
          400: errorReplies[400],
          401: errorReply('an unknown, expired or revoked refresh token, or one used twice (the session is revoked)'),
        },
      },
    },
    async (request) => context.identity.refresh(request.body.refresh_token),
  );
};
