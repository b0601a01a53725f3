import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { JWT_SECRET_PLACEHOLDER, type Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import { oauthIssuer } from '../../config/derived.js';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import { createIdentityService, type IdentityService } from '../../auth/identity.js';
import { createTokenService, type TokenService } from '../../auth/tokens.js';
import type { CommandBus } from '../commands.js';

const INSTALLATION_SECRET = 'auth.jwt_secret';

/**
 * `config` with the secret tokens and signed cookies are made with. Where `auth.jwt_secret` is
 * left at its placeholder (any profile but production, which refuses to start with it), a random
 * secret is made on the installation's first start and kept in its database: the placeholder is
 * printed in the documentation, so anyone could sign tokens with it; one kept in the database
 * outlives restarts and is the same on every node of a deployment (the first node's insert wins).
 */
export async function withSigningSecret(config: Config, db: Database, log: Pick<Logger, 'info'>, { readOnly = false }: { readOnly?: boolean } = {}): Promise<Config> {
  if (config.auth.jwt_secret !== JWT_SECRET_PLACEHOLDER) return config;
  if (readOnly) {
    // A command that only reads signs nothing and stores nothing: the kept secret if there is
    // one, else a throwaway one (the installation's own is made by the first serve or migrate).
    const kept = await db.knex('installation_secrets').where({ name: INSTALLATION_SECRET }).first('value');
    return { ...config, auth: { ...config.auth, jwt_secret: kept?.value ?? randomBytes(32).toString('base64url') } };
  }
  await db.knex('installation_secrets').insert({ name: INSTALLATION_SECRET, value: randomBytes(32).toString('base64url') }).onConflict('name').ignore();
  const { value } = await db.knex('installation_secrets').where({ name: INSTALLATION_SECRET }).first('value');
  log.info('auth.jwt_secret is not set: tokens are signed with a random secret made for this installation and kept in its database (set AUTH_JWTSECRET to choose one)');
  return { ...config, auth: { ...config.auth, jwt_secret: value } };
}

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
    db: deps.db,
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
