import type { AppContext } from '../app/appContext.js';
import { authorizeSystem } from '../app/access.js';
import { notFound } from '../app/errors.js';
import { effectivePermissions, rolesCatalog, type Principal } from '../auth/rbac.js';
import { isoTimestampOrNull } from '../db/timestamps.js';

/** User queries: profiles (one's own, or anyone's with `user:read`), the user list, permissions. */
export function userQueries(deps: Pick<AppContext, 'db' | 'identity'>) {
  const knex = deps.db.knex;
  return {
    async get(principal: Principal, input: { user: string }) {
      if (input.user !== principal.userId) authorizeSystem(principal, 'user:read');
      const user = await deps.identity.loadUser(input.user);
      if (!user) throw notFound('user');
      return user;
    },

    /** Every user with their role assignments (administration). */
    async list(principal: Principal) {
      authorizeSystem(principal, 'user:read');
      const users: { id: string; email: string; name: string; created_at: Date | string }[] = await knex('users')
        .orderBy('created_at')
        .select('id', 'email', 'name', 'created_at');
      const roles: { user_id: string; role: string; domain: string }[] = await knex('role_assignments').select('user_id', 'role', 'domain').orderBy(['domain', 'role']);
      return {
        users: users.map((user) => ({
          ...user,
          created_at: isoTimestampOrNull(user.created_at),
          roles: roles.filter((r) => r.user_id === user.id).map(({ role, domain }) => ({ role, domain })),
        })),
      };
    },

    /**
     * The caller's roles and permissions per domain (`repository:*` for a sysadmin's rights
     * everywhere); for an API key, what the key may do (its scopes and repository applied).
     */
    permissions(principal: Principal) {
      const domains = [...effectivePermissions(principal).entries()]
        .map(([domain, permissions]) => ({
          domain,
          roles: principal.assignments.filter((a) => a.domain === domain).map((a) => a.role).sort(),
          permissions: [...permissions].sort(),
        }))
        .sort((a, b) => a.domain.localeCompare(b.domain));
      return { user_id: principal.userId, domains };
    },

    /** Every role and permission, and which roles grant which permission. */
    catalog(principal: Principal) {
      authorizeSystem(principal, 'role:read');
      return rolesCatalog();
    },
  };
}
