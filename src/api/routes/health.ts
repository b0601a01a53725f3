import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';

/** Liveness and metrics: `/healthz` answers 200 once the service serves; `/metrics` for Prometheus. */
export const healthRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['health'],
        response: { 200: { type: 'object', properties: { status: { type: 'string' }, head_position: { type: 'integer' } } } },
      },
    },
    async () => ({ status: 'ok', head_position: await context.store.headPosition() }),
  );
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    reply.header('content-type', context.metrics.registry.contentType);
    return context.metrics.registry.metrics();
  });
};
