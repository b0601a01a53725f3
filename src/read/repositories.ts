import type { Knex } from 'knex';
import type { Config } from '../config/types.js';
import type { Database } from '../db/database.js';
import { authorizeRepository, type RepositoryRow } from '../app/access.js';
import { notFound } from '../app/errors.js';
import { ANY_REPOSITORY_DOMAIN, effectivePermissions, REPOSITORY_DOMAIN_PREFIX, repositoryDomain, type Principal } from '../auth/rbac.js';
import { repositoryPresets } from '../domain/repository/presets.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { countOf, pageOf, type PageInput } from './paging.js';

/** A repository as answered, with the caller's roles on it. */
function presentRepository(row: RepositoryRow, principal: Principal) {
  const domain = repositoryDomain(row.id);
  return {
    ...row,
    accepted_promptset_hashes: row.accepted_promptset_hashes ?? [],
    created_at: isoTimestampOrNull(row.created_at),
    updated_at: isoTimestampOrNull(row.updated_at),
    roles: principal.assignments.filter((a) => a.domain === domain).map((a) => a.role),
  };
}

/** A repository by id (deleted ones included, e.g. right after a command), presented for the principal. */
export async function presentRepositoryById(knex: Knex, repositoryId: string, principal: Principal) {
  const row: RepositoryRow | undefined = await knex('repositories').where({ id: repositoryId }).first();
  if (!row) throw notFound('repository');
  return presentRepository(row, principal);
}

/**
 * Repository queries: the presets, the repositories a caller may see, one repository. Their
 * parts named as types rather than picked from AppContext, as the other queries' are: AppContext
 * holds the repository commands' service (src/app/repositories.ts), which presents what it
 * changes with presentRepositoryById above.
 */
export function repositoryQueries(deps: { db: Database; config: Config }) {
  const knex = deps.db.knex;
  return {
    /** The presets a repository can be created with; any signed-in caller may read them. */
    presets(_principal: Principal) {
      return { default: deps.config.default_repository_preset, presets: repositoryPresets };
    },

    /**
     * The live repositories the caller may read (`repositories:read`: any role on it; a sysadmin
     * sees all; a key bound to one repository sees that one). Oldest first, 100 a page by default.
     */
    async list(principal: Principal, input: PageInput = {}) {
      const page = pageOf(input, 100);
      const query = knex('repositories').whereNull('deleted_at');
      const permissions = effectivePermissions(principal);
      if (!permissions.get(ANY_REPOSITORY_DOMAIN)?.has('repositories:read')) {
        const ids = [...permissions]
          .filter(([domain, held]) => domain.startsWith(REPOSITORY_DOMAIN_PREFIX) && held.has('repositories:read'))
          .map(([domain]) => domain.slice(REPOSITORY_DOMAIN_PREFIX.length));
        query.whereIn('id', ids);
      }
      const total = await countOf(query);
      const rows: RepositoryRow[] = await query.orderBy([{ column: 'created_at' }, { column: 'id' }]).limit(page.limit).offset(page.offset);
      return { items: rows.map((row) => presentRepository(row, principal)), total };
    },

    async get(principal: Principal, input: { repository: string }) {
      return presentRepository(await authorizeRepository(knex, principal, input.repository, 'repositories:read'), principal);
    },
  };
}
