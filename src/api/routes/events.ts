import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import { requireUser } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const eventSchema = {
  type: 'object',
  properties: {
    event_id: { type: 'string' },
    stream_id: { type: 'string' },
    stream_version: { type: 'integer' },
    global_position: { type: 'integer' },
    type: { type: 'string' },
    schema_version: { type: 'integer' },
    repository_id: { type: ['string', 'null'] },
    actor: { type: 'string' },
    causation_id: { type: ['string', 'null'] },
    correlation_id: { type: ['string', 'null'] },
    occurred_at: { type: 'string' },
    data: { type: 'object', additionalProperties: true },
  },
} as const;

/**
 * History: a repository's events in log order. `from` is exclusive (events after that global
 * position); pass the reply's `next_from` to read on.
 */
export const eventRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { events } = createApplication(context);
  app.get<{ Params: { repoID: string }; Querystring: { from: number; types?: string; stream?: string; limit: number } }>(
    '/api/v1/repositories/:repoID/events',
    {
      schema: {
        summary: 'Read the event log of a repository',
        tags: ['events'],
        security: bearerSecurity,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            from: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, default: 0 },
            types: { type: 'string', maxLength: 2000, description: 'comma-separated event types (docs/events.md); an unknown type, or an empty list or name, is a 400 that says so' },
            stream: { type: 'string', minLength: 1, maxLength: 200, description: 'one stream, `<category>-<id>` (docs/events.md); another name is a 400' },
            limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
          },
        },
        response: {
          200: {
            description: 'a page of the events, in log order',
            type: 'object',
            required: ['events', 'next_from'],
            properties: { events: { type: 'array', items: eventSchema }, next_from: { type: 'integer' } },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { types, ...query } = request.query;
      return events.list(requireUser(request), { repository: request.params.repoID, ...query, types: types === undefined ? undefined : types === '' ? [] : types.split(',') });
    },
  );
};
