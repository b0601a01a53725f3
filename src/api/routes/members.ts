import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import type { MemberReference } from '../../app/members.js';
import { REPOSITORY_ROLE_NAMES } from '../../auth/rbac.js';
import { requireUser, traceOf } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const memberSchema = {
  type: 'object',
  required: ['user_id', 'email', 'name', 'roles'],
  properties: {
    user_id: { type: 'string' },
    email: { type: 'string' },
    name: { type: 'string' },
    roles: { type: 'array', items: { type: 'string', enum: [...REPOSITORY_ROLE_NAMES] } },
  },
} as const;

/** A repository's members: who holds which role on it, set and removed by its owners. */
export const memberRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { members } = createApplication(context);
  const schema = { tags: ['members'], security: bearerSecurity };

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/members',
    {
      schema: {
        summary: 'List the members of a repository with their roles',
        ...schema,
        params: idParam('repoID'),
        response: { 200: { description: 'the members of the repository with their roles', type: 'object', required: ['members'], properties: { members: { type: 'array', items: memberSchema } } }, ...errorReplies },
      },
    },
    async (request) => members.list(requireUser(request), { repository: request.params.repoID }),
  );

  app.put<{ Params: { repoID: string }; Body: MemberReference & { role: string } }>(
    '/api/v1/repositories/:repoID/members',
    {
      schema: {
        summary: "Set a user's role on a repository (adds the member, or changes their role)",
        description: 'The member is named by `user_id` or by `email`, one of the two. Their other roles on the repository are revoked. 409 when it would leave the repository without an owner.',
        ...schema,
        params: idParam('repoID'),
        body: {
          type: 'object',
          required: ['role'],
          additionalProperties: false,
          properties: {
            user_id: { type: 'string', minLength: 1, maxLength: 200 },
            email: { type: 'string', minLength: 1, maxLength: 320 },
            role: { type: 'string', minLength: 1, maxLength: 100, description: REPOSITORY_ROLE_NAMES.join(', ') },
          },
        },
        response: { 200: { ...memberSchema, description: 'the member with the role set' }, ...errorReplies },
      },
    },
    async (request) => members.setMemberRole(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request)),
  );

  app.delete<{ Params: { repoID: string; userID: string } }>(
    '/api/v1/repositories/:repoID/members/:userID',
    {
      schema: {
        summary: 'Remove a member: every role they hold on the repository is revoked',
        description: '404 when the user holds no role there; 409 for the last owner.',
        ...schema,
        params: { type: 'object', required: ['repoID', 'userID'], properties: { repoID: { type: 'string', minLength: 1, maxLength: 200 }, userID: { type: 'string', minLength: 1, maxLength: 200 } } },
        response: { 204: { type: 'null', description: 'the member is removed' }, ...errorReplies },
      },
    },
    async (request, reply) => {
      await members.removeMember(requireUser(request), { repository: request.params.repoID, user_id: request.params.userID }, traceOf(request));
      return reply.status(204).send();
    },
  );
};
