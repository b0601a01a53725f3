import type { Logger } from 'pino';
import type { Config } from '../config/types.js';
import { bootstrapAdminFromEnv } from '../config/load.js';
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
    if (admin) await deps.identity.seedDefaultAdmin(admin);
    else deps.log.warn('bootstrap.default_admin is true but SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL/PASSWORD are not both set: no admin seeded');
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
