import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { requireUser } from '../guard.js';
import { errorReply } from '../errors.js';
import { bearerSecurity, errorReplies } from '../schemas.js';

const statusSchema = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    position: { type: 'integer' },
    head: { type: 'integer' },
    lag: { type: 'integer' },
    state: { type: 'string' },
    last_error: { type: ['string', 'null'] },
  },
} as const;

/** Projection health for administrators: positions, lag, and rebuild from position 0. */
export const projectionRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['admin'], security: bearerSecurity };
  const { projections } = createApplication(context);

  app.get(
    '/api/v1/projections',
    { schema: { summary: 'List projections with position, head and lag', ...schema, response: { 200: { description: 'every projection with its position, head and lag', type: 'object', properties: { projections: { type: 'array', items: statusSchema } } }, ...errorReplies } } },
    async (request) => projections.status(requireUser(request)),
  );

  app.post<{ Params: { name: string } }>(
    '/api/v1/projections/:name/rebuild',
    {
      schema: {
        summary: 'Rebuild a projection from the log (background)',
        ...schema,
        params: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 100 } } },
        response: { 202: { ...statusSchema, description: 'the rebuild is started; the projection as it starts' }, ...errorReplies, 404: errorReply('no projection has that name') },
      },
    },
    // Rebuilds run in the background; progress shows in GET /api/v1/projections.
    async (request, reply) => reply.status(202).send(await projections.rebuild(requireUser(request), request.params)),
  );
};
