import { DomainError, type Decider } from '../decider.js';
import type { ClientRegistration } from '../../auth/oauth/clientMetadata.js';

/**
 * A dynamically registered OAuth client (RFC 7591), stream `oauthclient-<client_id>`. The
 * metadata is public: public clients have no secret, so nothing secret enters the log.
 * Clients known by a metadata document URL are not registered and have no stream.
 */
export type OAuthClientEvent = { type: 'OAuthClientRegistered'; data: ClientRegistration };

export type OAuthClientCommand = { type: 'RegisterOAuthClient'; metadata: ClientRegistration };

export type OAuthClientState = { status: 'none' } | { status: 'registered'; metadata: ClientRegistration };

export const oauthClientDecider: Decider<OAuthClientState, OAuthClientCommand, OAuthClientEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    if (state.status !== 'none') throw new DomainError('conflict', 'client is already registered');
    if (command.metadata.redirect_uris.length === 0) throw new DomainError('invalid', 'a client needs at least one redirect URI');
    return [{ type: 'OAuthClientRegistered', data: command.metadata }];
  },

  evolve(_state, event) {
    return { status: 'registered', metadata: event.data };
  },
};
