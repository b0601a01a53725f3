import t from 'tap';
import { DomainError } from '../../../src/domain/decider.js';
import { spec } from '../../../src/domain/testing.js';
import { oauthClientDecider, type OAuthClientEvent } from '../../../src/domain/oauthClient/decider.js';
import type { ClientRegistration } from '../../../src/auth/oauth/clientMetadata.js';

const metadata: ClientRegistration = {
  client_name: 'App',
  redirect_uris: ['https://app.example/cb'],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'none',
  application_type: 'web',
  client_uri: null,
  software_id: null,
  software_version: null,
};
const registered: OAuthClientEvent = { type: 'OAuthClientRegistered', data: metadata };

t.test('a client registers once, with at least one redirect URI', async (t) => {
  t.same(spec(oauthClientDecider).given([]).when({ type: 'RegisterOAuthClient', metadata }).events(), [registered]);
  t.equal(spec(oauthClientDecider).given([registered]).when({ type: 'RegisterOAuthClient', metadata }).thenThrows(DomainError).code, 'conflict');
  t.equal(spec(oauthClientDecider).given([]).when({ type: 'RegisterOAuthClient', metadata: { ...metadata, redirect_uris: [] } }).thenThrows(DomainError).code, 'invalid');
});
