import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import type { Database } from '../../db/database.js';
import type { IdentityService } from '../../auth/identity.js';
import type { TokenService } from '../../auth/tokens.js';
import { createClientDocumentResolver, CLIENT_DOCUMENT_MAX_BYTES, type ClientDocumentFetch } from '../../auth/oauth/clientDocuments.js';
import { createGrantStore } from '../../auth/oauth/grants.js';
import { createHttpFetcher, DEFAULT_FETCH_SETTINGS } from '../../providers/fetch/http.js';
import { addressPolicyFromConfig } from '../../providers/fetch/addressPolicy.js';
import type { CommandBus } from '../commands.js';
import { createOAuthServer, type OAuthServer } from '../oauth.js';
import { revokeFenced } from '../repositoryFence.js';

/**
 * Client ID Metadata Documents are fetched with the service's HTTP fetcher (so its guards on
 * the addresses it connects to apply): one attempt, a short timeout, a small body, and no
 * per-host auto-skip (a client's host failing says nothing about sources). The outbound address
 * policy (`network`) applies as for sources: a metadata document on a private address is refused.
 */
function clientDocumentFetchFromConfig(config: Config): ClientDocumentFetch {
  const fetcher = createHttpFetcher({
    ...DEFAULT_FETCH_SETTINGS,
    timeoutMs: 5_000,
    maxAttempts: 1,
    retry403MaxAttempts: 0,
    maxBodyBytes: CLIENT_DOCUMENT_MAX_BYTES,
    userAgent: config.providers.resolution.fetch.user_agent,
    autoSkip: { ...DEFAULT_FETCH_SETTINGS.autoSkip, enabled: false },
  }, { addressPolicy: addressPolicyFromConfig(config) });
  return async (url) => {
    const fetched = await fetcher.fetch(url);
    return { finalUrl: fetched.finalUrl, status: fetched.status, contentType: fetched.contentType, body: fetched.body };
  };
}

/** The OAuth 2.1 server under `oauth`: grant store, client documents, and the token service it signs with. */
export function createOAuth(
  config: Config,
  deps: { db: Database; commands: CommandBus; tokens: TokenService; identity: IdentityService; clientDocumentFetch?: ClientDocumentFetch },
): OAuthServer {
  return createOAuthServer({
    knex: deps.db.knex,
    commands: deps.commands,
    tokens: deps.tokens,
    identity: deps.identity,
    grants: createGrantStore(deps.db.knex, {
      codeTtlMs: parseDuration(config.oauth.auth_code_ttl),
      refreshTtlMs: parseDuration(config.oauth.refresh_token_ttl),
      // A command made with one of the grant's access tokens lands before the revocation or is refused.
      fenceRevocation: (grantId, revoke) => revokeFenced(deps.db, { kind: 'oauth', id: grantId }, revoke),
    }),
    clientDocuments: createClientDocumentResolver(deps.clientDocumentFetch ?? clientDocumentFetchFromConfig(config)),
  });
}
