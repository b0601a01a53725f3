import type { Logger } from 'pino';
import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import { oauthIssuer } from '../../config/derived.js';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import { createIdentityService, type IdentityService } from '../../auth/identity.js';
import { createTokenService, type TokenService } from '../../auth/tokens.js';
import type { CommandBus } from '../commands.js';

/** The signer and verifier of session and OAuth access tokens (`auth.jwt_secret`, `oauth.issuer`). */
export function createTokens(config: Config): TokenService {
  return createTokenService({
    secret: config.auth.jwt_secret,
    issuer: oauthIssuer(config),
    sessionTtlMs: parseDuration(config.auth.token_ttl),
    accessTtlMs: parseDuration(config.oauth.access_token_ttl),
  });
}

/** Users, sessions and tokens under `auth`, `oauth` and `bootstrap.auto_promote_first_user`. */
export function createIdentity(config: Config, deps: { db: Database; store: EventStore; commands: CommandBus; log: Logger; tokens?: TokenService }): IdentityService {
  return createIdentityService({
    knex: deps.db.knex,
    store: deps.store,
    commands: deps.commands,
    tokens: deps.tokens ?? createTokens(config),
    settings: {
      passwordMinLength: config.auth.password_min_length,
      passwordHashCost: config.auth.password_hash_cost,
      refreshTtlMs: parseDuration(config.auth.refresh_token_ttl),
      autoPromoteFirstUser: config.bootstrap.auto_promote_first_user,
    },
    log: deps.log,
  });
}
