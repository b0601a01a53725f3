import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { proveInstance } from '../../db/dataDirLock.js';
import { errorReply } from '../errors.js';

/**
 * How old the head `/healthz` reports may be. The projection runner reads the log at every batch
 * and, when idle, every poll interval (250 ms on PGlite, 50 ms on a server), so on a node that
 * runs projections the head is recent; elsewhere (or before start) it is read.
 */
const HEAD_MAX_AGE_MS = 2000;

/**
 * Liveness and metrics: `/healthz` answers 200 once the service serves; `/metrics` for Prometheus
 * unless `metrics.enabled` is false.
 * Liveness does not wait for the database: on PGlite a statement queues for the one connection
 * behind the pipeline's, so `/healthz` reports the head the event store last learnt in-process.
 */
export const healthRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  app.get(
    '/healthz',
    {
      schema: {
        tags: ['health'],
        summary: 'Liveness: 200 once the service serves, with the event log head position (as last read, at most 2 s ago)',
        response: { 200: { description: 'the service serves', type: 'object', properties: { status: { type: 'string' }, head_position: { type: 'integer' } } } },
      },
    },
    async () => ({
      status: 'ok',
      head_position: context.store.recentHeadPosition?.(HEAD_MAX_AGE_MS) ?? (await context.store.headPosition()),
    }),
  );
  // The CLI asks this before it sends a token to the address a data directory's lock records: only
  // the process that wrote the lock knows the key the proof is made with (src/db/dataDirLock.ts).
  app.get(
    '/healthz/instance',
    {
      schema: {
        tags: ['health'],
        summary: "Proves this process holds the instance key of its data directory's lock: an HMAC-SHA256 of the challenge (the CLI checks it before sending a token)",
        querystring: { type: 'object', required: ['challenge'], properties: { challenge: { type: 'string', minLength: 32, maxLength: 128 } } },
        response: {
          200: { description: 'the proof over the challenge', type: 'object', properties: { proof: { type: 'string' } } },
          400: errorReply('no challenge, or one not 32 to 128 characters long; or a URL that is not valid percent-encoded UTF-8 or holds a NUL character or a lone surrogate'),
        },
      },
    },
    async (request) => ({ proof: proveInstance((request.query as { challenge: string }).challenge) }),
  );
  // metrics.enabled false leaves the route out (a 404): the registry is kept either way, since the
  // instruments are updated all over the service and cost little.
  if (!context.config.metrics.enabled) return;
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
