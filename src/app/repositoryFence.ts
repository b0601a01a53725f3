import type { Knex } from 'knex';
import { principalCan, repositoryDomain, SYSTEM_DOMAIN, type Permission, type Principal, type RoleAssignment } from '../auth/rbac.js';
import type { Database } from '../db/database.js';
import { withNamedLock } from '../db/namedLock.js';
import type { EventMetadata } from '../eventstore/envelope.js';
import { findRepository } from './access.js';
import { currentCall } from './callContext.js';
import { forbidden } from './errors.js';

/**
 * A call is allowed to act in a repository when it starts (`authorizeRepository`), and its
 * command appends a moment later. Without a fence, a repository deleted or a role revoked in that
 * moment let the write land after the change, answered as a success: a source registered in a
 * deleted repository, a report created by a member who had just lost the role.
 *
 * So a command a caller makes in a repository holds the repository's lock shared while it appends
 * and its read models catch up, and first checks again, on the read models as they are now,
 * that the repository is live and that the caller still holds each permission the call was
 * granted there. A change of who may act there (a role granted or revoked, the repository
 * deleted) holds it alone. A change that committed first is then seen by the check; one that
 * comes later waits for the commands already appending. The lock is per repository, in this
 * process and across the processes of a server (src/db/namedLock.ts); a sysadmin's rights come
 * from the system domain, whose own lock fences them the same way (SYSTEM_ACCESS_LOCK). A call
 * made with an API key also holds the key's lock shared and checks that the key is not revoked,
 * since its revocation (src/app/apiKeys.ts) holds that lock alone until its read model has it:
 * a write sent with the key beside its revocation either lands first or is refused.
 */
export interface RepositoryFence {
  run<T>(metadata: EventMetadata, access: 'acts' | 'changes', work: () => Promise<T>): Promise<T>;
}

/** A permission a call was allowed, kept on the call so that its command can check it again. */
export interface GrantedPermission {
  principal: Principal;
  domain: string;
  permission: Permission;
}

/**
 * The lock of the system domain's roles: a sysadmin acts in every repository through it, so a
 * command that a system role allowed holds it shared (before the repository's: one order, no
 * deadlock), and a change of a system role holds it alone.
 */
const SYSTEM_ACCESS_LOCK = 'factlog.repository-access.system';

/** The lock of an API key's use: commands made with the key hold it shared, its revocation alone. Taken last (system, repository, key), so the order is one. */
export const apiKeyAccessLock = (keyId: string) => `factlog.api-key-access.${keyId}`;

/** Whether a permission in the repository comes to the caller through a role of the system domain (a sysadmin's). */
function grantedBySystemRole(grant: GrantedPermission): boolean {
  const systemRoles = grant.principal.assignments.filter((assignment) => assignment.domain === SYSTEM_DOMAIN);
  return systemRoles.length > 0 && principalCan({ ...grant.principal, assignments: systemRoles }, grant.domain, grant.permission);
}

export function createRepositoryFence(deps: { db: Database; roleAssignments: (userId: string) => Promise<RoleAssignment[]> }): RepositoryFence {
  const knex: Knex = deps.db.knex;
  return {
    async run(metadata, access, work) {
      const repositoryId = metadata.repositoryId;
      // A change of a system role (sysadmin granted or revoked) concerns every repository.
      if (!repositoryId) return access === 'changes' ? withNamedLock(deps.db, SYSTEM_ACCESS_LOCK, work, 'exclusive') : work();
      const domain = repositoryDomain(repositoryId);
      const granted = (currentCall()?.granted ?? []).filter((grant) => grant.domain === domain && grant.principal.userId === metadata.actor);
      // Commands of the pipeline, and of calls that act through no permission in the repository (creating it), have nothing to re-check.
      if (access === 'acts' && granted.length === 0) return work();
      const credential = granted[0]?.principal.credential;
      const keyId = credential?.kind === 'api_key' ? credential.id : null;
      const checked = async () => {
        if (granted.length > 0) {
          await findRepository(knex, repositoryId);
          const assignments = await deps.roleAssignments(granted[0].principal.userId);
          for (const grant of granted) {
            if (!principalCan({ ...grant.principal, assignments }, grant.domain, grant.permission)) throw forbidden(`permission denied: ${grant.permission}`);
          }
          if (keyId !== null && (await knex('api_keys').where({ id: keyId }).whereNull('revoked_at').first('id')) === undefined) {
            throw forbidden('permission denied: the API key was revoked');
          }
        }
        return work();
      };
      const fenced = () => withNamedLock(
        deps.db,
        `factlog.repository-access.${repositoryId}`,
        keyId === null ? checked : () => withNamedLock(deps.db, apiKeyAccessLock(keyId), checked, 'shared'),
        access === 'acts' ? 'shared' : 'exclusive',
      );
      return access === 'acts' && granted.some(grantedBySystemRole) ? withNamedLock(deps.db, SYSTEM_ACCESS_LOCK, fenced, 'shared') : fenced();
    },
  };
}
