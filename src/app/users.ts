import { isKnownRole, REPOSITORY_DOMAIN_PREFIX, scopeOfDomain, SYSTEM_DOMAIN, type Principal } from '../auth/rbac.js';
import { userDecider } from '../domain/user/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { authorizeSystem, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './context.js';
import { conflict, forbidden, invalid, notFound } from './errors.js';
import { withNamedLock } from '../db/namedLock.js';

export interface RoleAssignmentInput {
  user_id: string;
  role: string;
  domain: string;
}

const SYSADMIN = 'sysadmin';

const repositoryOf = (domain: string) => (domain.startsWith(REPOSITORY_DOMAIN_PREFIX) ? domain.slice(REPOSITORY_DOMAIN_PREFIX.length) : null);

/**
 * Appends a role grant or revocation to the user's stream, the caller as its actor. Access is the
 * caller's to check: `role:manage` (administration) or `members:manage` (src/app/members.ts).
 */
export async function changeRole(
  deps: Pick<AppContext, 'commands'>,
  principal: Principal,
  input: RoleAssignmentInput,
  type: 'GrantRole' | 'RevokeRole',
  trace?: Trace,
): Promise<void> {
  await deps.commands.execute(
    streamName('user', input.user_id),
    userDecider,
    { type, role: input.role, domain: input.domain },
    commandMetadata(principal, repositoryOf(input.domain), trace),
  );
}

/** User commands: profile changes (one's own, or anyone's with `user:write`) and role grants (`role:manage`). */
export function userCommands(deps: Pick<AppContext, 'db' | 'identity' | 'commands'>) {
  const knex = deps.db.knex;
  const requireUserRow = async (userId: string) => {
    if (!(await knex('users').where({ id: userId }).first('id'))) throw notFound('user');
  };

  return {
    async updateProfile(principal: Principal, input: { user: string; name?: string; email?: string }) {
      const { user, ...change } = input;
      if (user !== principal.userId) authorizeSystem(principal, 'user:write');
      // The email is what one signs in with: a leaked key or token must not be able to take the account.
      else if (principal.credential.kind !== 'session') throw forbidden('one’s own profile is changed with a signed-in session, not with an API key or OAuth token');
      return deps.identity.updateProfile(principal.userId, user, change);
    },

    /** Grants a role, checked against the catalog and the existing users and repositories. */
    async grantRole(principal: Principal, input: RoleAssignmentInput, trace?: Trace) {
      authorizeSystem(principal, 'role:manage');
      const { user_id, role, domain } = input;
      if (!scopeOfDomain(domain)) throw invalid(`unknown domain '${domain}': use 'system' or 'repository:<id>'`);
      if (!isKnownRole(role, domain)) throw invalid(`role '${role}' does not exist in domain '${domain}'`);
      await requireUserRow(user_id);
      const repositoryId = repositoryOf(domain);
      if (repositoryId !== null && !(await knex('repositories').where({ id: repositoryId }).whereNull('deleted_at').first('id'))) throw notFound('repository');
      await changeRole(deps, principal, input, 'GrantRole', trace);
      return { user_id, role, domain };
    },

    /**
     * Revokes a role. The last holder of `sysadmin` on the system domain keeps it: nothing in the
     * service could grant it again (a 409; grant it to another user first).
     */
    async revokeRole(principal: Principal, input: RoleAssignmentInput, trace?: Trace) {
      authorizeSystem(principal, 'role:manage');
      await requireUserRow(input.user_id);
      if (input.role !== SYSADMIN || input.domain !== SYSTEM_DOMAIN) return changeRole(deps, principal, input, 'RevokeRole', trace);
      // Counted and revoked as one step, so two sysadmins revoking each other at once cannot both succeed.
      await withNamedLock(deps.db, 'factlog.sysadmins', async () => {
        const holders: Array<{ user_id: string }> = await knex('role_assignments').where({ role: SYSADMIN, domain: SYSTEM_DOMAIN }).select('user_id');
        if (holders.length === 1 && holders[0].user_id === input.user_id) {
          throw conflict('this is the last sysadmin: grant the role to another user before revoking it here');
        }
        await changeRole(deps, principal, input, 'RevokeRole', trace);
      });
    },
  };
}

export type UserCommands = ReturnType<typeof userCommands>;
