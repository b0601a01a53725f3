import { projection, each } from '../src/projection/types.js';
import type { OAuthClientEvent } from '../src/domain/oauthClient/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/** Read model `oauth_clients`: dynamically registered clients, what the authorization and token endpoints look up. */
export const oauthClientsProjection = projection<OAuthClientEvent>({
  name: 'oauth-clients',
  tables: ['oauth_clients'],
  handlers: {
    OAuthClientRegistered: each(async (trx, event) => {
      const { data } = event;
      await trx('oauth_clients')
        .insert({
          client_id: parseStreamName(event.streamId).id,
          client_name: data.client_name,
          redirect_uris: JSON.stringify(data.redirect_uris),
          grant_types: JSON.stringify(data.grant_types),
          application_type: data.application_type,
          client_uri: data.client_uri,
          software_id: data.software_id,
          software_version: data.software_version,
          registered_at: event.occurredAt,
        })
        .onConflict('client_id')
        .ignore();
    }),
  },
});
