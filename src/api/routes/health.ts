import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';

/** Liveness and metrics: `/healthz` answers 200 once the service serves; `/metrics` for Prometheus. */
export const healthRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['health'],
        summary: 'Liveness: 200 once the service serves, with the event log head position',
        response: { 200: { type: 'object', properties: { status: { type: 'string' }, head_position: { type: 'integer' } } } },
      },
    },
    async () => ({ status: 'ok', head_position: await context.store.headPosition() }),
  );
  app.get(
    '/metrics',
    {
      schema: {
        tags: ['health'],
        summary: 'Prometheus metrics (text exposition format): requests, appends, projection lag, queue depth',
        produces: ['text/plain'],
        response: { 200: { type: 'string', description: 'Prometheus text exposition format 0.0.4' } },
      },
    }, async (_request, reply) => {
    reply.header('content-type', context.metrics.registry.contentType);
    return context.metrics.registry.metrics();
  });
};
