import { isKnownRole, scopeOfDomain, SYSTEM_DOMAIN, type Principal } from '../auth/rbac.js';
import { authorizeSystem, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, forbidden, invalid, notFound } from './errors.js';
import { withNamedLock } from '../db/namedLock.js';
import { changeRole, repositoryOf, revokeRepositoryRoles, setRepositoryRole, type RoleAssignmentInput } from './roleChanges.js';

const SYSADMIN = 'sysadmin';

/** User commands: profile changes (one's own, or anyone's with `user:write`) and role grants (`role:manage`). */
export function userCommands(deps: Pick<AppContext, 'db' | 'identity' | 'commands'>) {
  const knex = deps.db.knex;
  const requireUserRow = async (userId: string) => {
    if (!(await knex('users').where({ id: userId }).first('id'))) throw notFound('user');
  };

  /** An administrator's grant or revocation, checked (`role:manage`, the catalog, the user): the repository it is on, or null. */
  const checkedAssignment = async (principal: Principal, { user_id, role, domain }: RoleAssignmentInput): Promise<string | null> => {
    authorizeSystem(principal, 'role:manage');
    if (!scopeOfDomain(domain)) throw invalid(`unknown domain '${domain}': use 'system' or 'repository:<id>'`);
    if (!isKnownRole(role, domain)) throw invalid(`role '${role}' does not exist in domain '${domain}'`);
    await requireUserRow(user_id);
    return repositoryOf(domain);
  };

  return {
    async updateProfile(principal: Principal, input: { user: string; name?: string; email?: string }) {
      const { user, ...change } = input;
      if (user !== principal.userId) authorizeSystem(principal, 'user:write');
      // The email is what one signs in with: a leaked key or token must not be able to take the account.
      else if (principal.credential.kind !== 'session') throw forbidden('one’s own profile is changed with a signed-in session, not with an API key or OAuth token');
      return deps.identity.updateProfile(principal.userId, user, change);
    },

    /**
     * Grants a role, checked against the catalog and the existing users and repositories. On a
     * repository it is the member's one role there (their others are revoked) and the last owner
     * stays one, as through the members route.
     */
    async grantRole(principal: Principal, input: RoleAssignmentInput, trace?: Trace) {
      const repositoryId = await checkedAssignment(principal, input);
      if (repositoryId !== null && !(await knex('repositories').where({ id: repositoryId }).whereNull('deleted_at').first('id'))) throw notFound('repository');
      if (repositoryId !== null) await setRepositoryRole(deps, principal, { repositoryId, userId: input.user_id, role: input.role }, trace);
      else await changeRole(deps, principal, input, 'GrantRole', trace);
      return { user_id: input.user_id, role: input.role, domain: input.domain };
    },

    /**
     * Revokes a role. The last holder of `sysadmin` on the system domain keeps it: nothing in the
     * service could grant it again (a 409; grant it to another user first); so does a
     * repository's last owner.
     */
    async revokeRole(principal: Principal, input: RoleAssignmentInput, trace?: Trace) {
      const repositoryId = await checkedAssignment(principal, input);
      if (repositoryId !== null) return revokeRepositoryRoles(deps, principal, { repositoryId, userId: input.user_id, role: input.role }, trace);
      if (input.role !== SYSADMIN || input.domain !== SYSTEM_DOMAIN) return changeRole(deps, principal, input, 'RevokeRole', trace);
      // Counted and revoked as one step, so two sysadmins revoking each other at once cannot both succeed.
      const revokeUnlessLast = async () => {
        const holders: Array<{ user_id: string }> = await knex('role_assignments').where({ role: SYSADMIN, domain: SYSTEM_DOMAIN }).select('user_id');
        if (holders.length === 1 && holders[0].user_id === input.user_id) {
          throw conflict('this is the last sysadmin: grant the role to another user before revoking it here');
        }
        await changeRole(deps, principal, input, 'RevokeRole', trace);
      };
      await withNamedLock(deps.db, 'factlog.sysadmins', revokeUnlessLast, 'exclusive', ['users']);
    },
  };
}
