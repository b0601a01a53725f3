import type { Logger } from 'pino';
import { type Config, ConfigError } from '../config/types.js';
import { bootstrapAdminFromEnv, BOOTSTRAP_ADMIN_VARIABLES, missingBootstrapAdminVariables } from '../config/load.js';
import { DomainError } from '../domain/decider.js';
import type { Database } from '../db/database.js';
import type { IdentityService } from '../auth/identity.js';
import type { RepositoryService } from './repositories.js';

/** Boot-time bootstrap moves of the spec: default admin first, then the starter repository. */
export async function bootstrap(
  config: Config,
  env: NodeJS.ProcessEnv,
  deps: { identity: IdentityService; repositories: RepositoryService; db: Database; log: Logger },
): Promise<void> {
  if (config.bootstrap.default_admin) {
    const admin = bootstrapAdminFromEnv(env);
    if (admin) {
      try {
        await deps.identity.seedDefaultAdmin(admin);
      } catch (error) {
        // Say where the refused value came from: 'password must be at least 8 characters' alone names no setting.
        if (!(error instanceof DomainError && error.code === 'invalid')) throw error;
        const variables = Object.values(BOOTSTRAP_ADMIN_VARIABLES).join(', ');
        throw new ConfigError(`bootstrap.default_admin: the administrator of ${variables} is refused: ${error.message}`);
      }
    } else {
      const missing = missingBootstrapAdminVariables(env).join(', ');
      deps.log.warn(`bootstrap.default_admin is true but ${missing} ${missing.includes(',') ? 'are' : 'is'} unset or blank: no admin seeded (all three are needed)`);
    }
  }
  if (config.bootstrap.default_repository && !(await deps.db.knex('repositories').first('id'))) {
    await deps.repositories.create(
      { name: 'Starter', slug: 'starter', description: 'A first repository, created at boot (bootstrap.default_repository).' },
      { actor: 'system:bootstrap', causationId: null, correlationId: null },
      null,
    );
    deps.log.info('starter repository created (bootstrap.default_repository)');
  }
}
