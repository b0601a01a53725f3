import { DEFAULT_PASSWORD_HASH_COST } from '../auth/passwords.js';
import { type Config, ConfigError, JWT_SECRET_PLACEHOLDER } from './types.js';

/** Anything with a `warn(message)`: a pino logger, `console`, or a test spy. */
export interface ConfigWarningLog {
  warn(message: string): void;
}

/** HS256 wants a key at least as long as its output (RFC 7518 §3.2). */
export const MIN_JWT_SECRET_BYTES = 32;

/**
 * Checks the settings the spec says must be replaced before production. With profile
 * `production` every problem is collected and thrown as one ConfigError, so the service
 * refuses to start; on any other profile each is logged as a warning and startup goes on,
 * but for a signing secret too short to sign with, which no profile can start with.
 */
export function checkSecrets(config: Config, log: ConfigWarningLog): void {
  const production = config.profile === 'production';
  const refusals: string[] = [];
  const secret = config.auth.jwt_secret;

  // Elsewhere the placeholder is never used to sign: the service makes a secret of its own
  // (withSigningSecret in src/app/wiring/identity.ts). Production wants one chosen.
  if (secret === JWT_SECRET_PLACEHOLDER) {
    if (production) refusals.push('auth.jwt_secret: is the built-in placeholder; set AUTH_JWTSECRET to a random secret of at least 32 bytes');
  } else if (Buffer.byteLength(secret, 'utf8') < MIN_JWT_SECRET_BYTES) {
    // On every profile: the token service cannot sign with it (RFC 7518 §3.2), so say so here,
    // as a configuration error naming the setting, rather than fail later without naming it.
    refusals.push(
      `auth.jwt_secret: is ${Buffer.byteLength(secret, 'utf8')} bytes; use at least ${MIN_JWT_SECRET_BYTES} (AUTH_JWTSECRET), or leave it unset outside production for a secret the service makes`,
    );
  }

  if (production && config.oauth.issuer === '') {
    refusals.push('oauth.issuer: must be set in production to the public issuer URL (SVC_OAUTH_ISSUER)');
  }
  if (production && config.auth.password_hash_cost < DEFAULT_PASSWORD_HASH_COST) {
    refusals.push(`auth.password_hash_cost: is ${config.auth.password_hash_cost}; production needs at least ${DEFAULT_PASSWORD_HASH_COST} (lower costs are for tests)`);
  }
  if (production && config.bootstrap.auto_promote_first_user) {
    log.warn(
      'bootstrap.auto_promote_first_user is true in production: the first account registered becomes sysadmin. ' +
        'Public deployments should set SVC_BOOTSTRAP_AUTO_PROMOTE=false.',
    );
  }

  if (refusals.length > 0) throw new ConfigError(refusals);
}
