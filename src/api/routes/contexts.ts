import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { requireUser, traceOf } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const contextItem = {
  type: 'object',
  required: ['name', 'description', 'kind'],
  properties: {
    name: { type: 'string' },
    description: { type: 'string' },
    kind: { type: 'string', enum: ['built_in', 'custom'], description: 'a built-in ontology level, or a custom context (preset or repository)' },
  },
} as const;

const contextsReply = {
  type: 'object',
  required: ['preset', 'contexts', 'custom_contexts'],
  properties: {
    preset: { type: 'string' },
    contexts: { type: 'array', items: contextItem, description: 'every context concept extraction may assign in this repository' },
    custom_contexts: {
      type: 'array',
      items: { type: 'object', required: ['name', 'description'], properties: { name: { type: 'string' }, description: { type: 'string' } } },
      description: "the repository's own custom contexts",
    },
  },
} as const;

const putBody = {
  type: 'object',
  required: ['custom_contexts'],
  additionalProperties: false,
  properties: {
    custom_contexts: {
      type: 'array',
      maxItems: 50,
      items: {
        type: 'object',
        required: ['name'],
        additionalProperties: false,
        properties: { name: { type: 'string', minLength: 1, maxLength: 63 }, description: { type: 'string', maxLength: 500, default: '' } },
      },
    },
  },
} as const;

/**
 * A repository's concept contexts: the built-in ontology levels its preset allows, the preset's
 * custom contexts, and its own custom contexts, which PUT replaces as a whole (src/read/settings.ts,
 * src/app/settings.ts).
 */
export const contextRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['concepts'], security: bearerSecurity, params: idParam('repoID') };
  const { settings } = createApplication(context);

  app.get<{ Params: { repoID: string } }>(
    '/api/v1/repositories/:repoID/contexts',
    { schema: { summary: 'Get the contexts concept extraction may assign', ...schema, response: { 200: { ...contextsReply, description: 'the contexts of the repository' }, ...errorReplies } } },
    async (request) => settings.contexts(requireUser(request), { repository: request.params.repoID }),
  );

  app.put<{ Params: { repoID: string }; Body: { custom_contexts: { name: string; description?: string }[] } }>(
    '/api/v1/repositories/:repoID/contexts',
    { schema: { summary: 'Replace the repository\'s own contexts', ...schema, body: putBody, response: { 200: { ...contextsReply, description: 'the contexts of the repository' }, ...errorReplies } } },
    async (request) => settings.setContexts(requireUser(request), { repository: request.params.repoID, ...request.body }, traceOf(request)),
  );
};
