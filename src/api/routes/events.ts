import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/context.js';
import type { RecordedEvent } from '../../eventstore/envelope.js';
import { requireRepository } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

export const eventSchema = {
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

export function presentEvent(event: RecordedEvent) {
  return {
    event_id: event.eventId,
    stream_id: event.streamId,
    stream_version: event.streamVersion,
    global_position: event.globalPosition,
    type: event.type,
    schema_version: event.schemaVersion,
    repository_id: event.repositoryId,
    actor: event.actor,
    causation_id: event.causationId,
    correlation_id: event.correlationId,
    occurred_at: event.occurredAt,
    data: event.data,
  };
}

/**
 * History: a repository's events in log order. `from` is exclusive (events after that global
 * position); pass the reply's `next_from` to read on.
 */
export const eventRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  app.get<{ Params: { repoID: string }; Querystring: { from: number; types?: string; stream?: string; limit: number } }>(
    '/api/v1/repositories/:repoID/events',
    {
      schema: {
        tags: ['events'],
        security: bearerSecurity,
        params: idParam('repoID'),
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            from: { type: 'integer', minimum: 0, default: 0 },
            types: { type: 'string', pattern: '^[A-Za-z]+(,[A-Za-z]+)*$', description: 'comma-separated event types' },
            stream: { type: 'string', minLength: 1, maxLength: 200 },
            limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
          },
        },
        response: {
          200: {
            type: 'object',
            required: ['events', 'next_from'],
            properties: { events: { type: 'array', items: eventSchema }, next_from: { type: 'integer' } },
          },
          ...errorReplies,
        },
      },
    },
    async (request) => {
      const { repository } = await requireRepository(context, request, request.params.repoID, 'events:read');
      const { from, types, stream, limit } = request.query;
      const events = await context.store.readAll({
        after: from,
        limit,
        repositoryId: repository.id,
        types: types ? types.split(',') : undefined,
        streamId: stream,
      });
      return { events: events.map(presentEvent), next_from: events.length ? events[events.length - 1].globalPosition : from };
    },
  );
};
