import { projection, each } from '../src/projection/types.js';
import type { ApiKeyEvent } from '../src/domain/apiKey/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/**
 * Read model `api_keys`: each personal key's owner, name, scopes, repository and lifetime, what
 * authentication and the key list read. The key's hash is service state (`api_key_secrets`).
 */
export const apiKeysProjection = projection<ApiKeyEvent>({
  name: 'api-keys',
  tables: ['api_keys'],
  handlers: {
    ApiKeyCreated: each(async (trx, event) => {
      const { data } = event;
      await trx('api_keys')
        .insert({
          id: parseStreamName(event.streamId).id,
          user_id: data.owner_id,
          name: data.name,
          scopes: JSON.stringify(data.scopes),
          repository_id: data.repository_id,
          expires_at: data.expires_at,
          created_at: event.occurredAt,
        })
        .onConflict('id')
        .ignore();
    }),
    ApiKeyRevoked: each(async (trx, event) => {
      await trx('api_keys').where({ id: parseStreamName(event.streamId).id }).update({ revoked_at: event.occurredAt });
    }),
  },
});
