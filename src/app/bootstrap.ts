import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config/types.js';
import { bootstrapAdminFromEnv, BOOTSTRAP_ADMIN_VARIABLES, missingBootstrapAdminVariables, type BootstrapAdmin } from '../config/load.js';
import type { Database } from '../db/database.js';
import { signUpRefusal, type IdentityService } from '../auth/identity.js';
import type { RepositoryService } from './repositories.js';

/**
 * The administrator `bootstrap.default_admin` would seed from the SVC_BOOTSTRAP_DEFAULT_ADMIN_*
 * variables: null when the setting is off, when a variable is unset or blank (a warning names
 * it), or when a user exists (the seed is for a first start). Values the sign-up rules refuse
 * are a ConfigError naming the variables. It only reads, so `serve` runs it before it listens
 * (AppContext.checkBootstrap): a refusal comes before the port opens.
 */
export async function defaultAdminToSeed(config: Config, env: NodeJS.ProcessEnv, deps: { db: Database; log: Logger }): Promise<BootstrapAdmin | null> {
  if (!config.bootstrap.default_admin) return null;
  const admin = bootstrapAdminFromEnv(env);
  if (!admin) {
    const missing = missingBootstrapAdminVariables(env).join(', ');
    deps.log.warn(`bootstrap.default_admin is true but ${missing} ${missing.includes(',') ? 'are' : 'is'} unset or blank: no admin seeded (all three are needed)`);
    return null;
  }
  if (await deps.db.knex('credentials').first('user_id')) return null;
  const refusal = signUpRefusal(admin, config.auth.password_min_length);
  // Say where the refused value came from: 'password must be at least 8 characters' alone names no setting.
  if (refusal) throw new ConfigError(`bootstrap.default_admin: the administrator of ${Object.values(BOOTSTRAP_ADMIN_VARIABLES).join(', ')} is refused: ${refusal}`);
  return admin;
}

/**
 * Boot-time bootstrap moves of the spec: the default admin first (as defaultAdminToSeed found
 * it), then the starter repository.
 */
export async function bootstrap(
  config: Config,
  defaultAdmin: BootstrapAdmin | null,
  deps: { identity: IdentityService; repositories: RepositoryService; db: Database; log: Logger },
): Promise<void> {
  if (defaultAdmin) await deps.identity.seedDefaultAdmin(defaultAdmin);
  if (config.bootstrap.default_repository && !(await deps.db.knex('repositories').first('id'))) {
    await deps.repositories.create(
      { name: 'Starter', slug: 'starter', description: 'A first repository, created at boot (bootstrap.default_repository).' },
      { actor: 'system:bootstrap', causationId: null, correlationId: null },
      null,
    );
    deps.log.info('starter repository created (bootstrap.default_repository)');
  }
}
