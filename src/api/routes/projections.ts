import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import type { ProjectionStatus } from '../../projection/types.js';
import { notFound } from '../errors.js';
import { requireSystemPermission } from '../guard.js';
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
  const present = async () =>
    (await context.projections.status()).map(({ lastError, ...status }: ProjectionStatus) => ({ ...status, last_error: lastError }));

  app.get(
    '/api/v1/projections',
    { schema: { ...schema, response: { 200: { type: 'object', properties: { projections: { type: 'array', items: statusSchema } } }, ...errorReplies } } },
    async (request) => {
      requireSystemPermission(request, 'projections:read');
      return { projections: await present() };
    },
  );

  app.post<{ Params: { name: string } }>(
    '/api/v1/projections/:name/rebuild',
    {
      schema: {
        ...schema,
        params: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1, maxLength: 100 } } },
        response: { 202: statusSchema, ...errorReplies },
      },
    },
    async (request, reply) => {
      requireSystemPermission(request, 'projections:manage');
      const status = (await present()).find((projection) => projection.name === request.params.name);
      if (!status) throw notFound('projection');
      // Rebuilds run in the background; progress shows in GET /api/v1/projections.
      context.projections.rebuild(request.params.name).catch((error: unknown) => request.log.error({ err: error }, 'rebuild failed'));
      return reply.status(202).send({ ...status, state: 'rebuilding' });
    },
  );
};
