import { AsyncLocalStorage } from 'node:async_hooks';
import type { Knex } from 'knex';
import { principalCan, repositoryDomain, SYSTEM_DOMAIN, type Credential, type RoleAssignment } from '../auth/rbac.js';
import type { Database } from '../db/database.js';
import { withNamedLock, withNamedLocks, type NamedLockRequest } from '../db/namedLock.js';
import type { EventMetadata } from '../eventstore/envelope.js';
import { findRepository } from './access.js';
import { currentCall, type GrantedPermission } from './callContext.js';
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
 * comes later waits for the commands already appending. A change whose read models lag past its
 * wait leaves the lock a mark, and the next command waits for them before it checks
 * (src/app/lockMarks.ts; the locks name the read models their checks read). The lock is per repository, in this
 * process and across the processes of a server (src/db/namedLock.ts); a sysadmin's rights come
 * from the system domain, whose own lock fences them the same way (SYSTEM_ACCESS_LOCK).
 *
 * The credential the call was made with is fenced the same way: the command also holds the
 * credential's lock shared (`credentialAccessLock`) and checks that the credential is still live
 * (an API key not revoked, an OAuth grant not revoked, a session not ended), and whatever ends a
 * credential holds that lock alone while it does (`revokeFenced`): an API key's revocation
 * (src/app/apiKeys.ts) until its read model has it; an OAuth grant's revocation by the revocation
 * endpoint, by a reused code or by a reused refresh token (src/auth/oauth/grants.ts); a session's
 * logout or the reuse of its refresh token (src/auth/identity.ts). So a write sent with a
 * credential beside its end either lands before the end is answered, or is refused with 403 and
 * nothing written.
 *
 * One order, so that no two holders wait for each other: a call's own lock (a report's parent
 * chain, a repository's roles, a user's profile: taken before the command), then the system
 * roles' lock, the repository's and the credential's, all on one connection (withNamedLocks). A revocation takes
 * its credential's lock only, and never inside a transaction (on PGlite's one connection, a
 * transaction waiting for a lock that a command holds would wait for itself).
 *
 * Commands in no repository (an API key created, a profile changed, a role of the system domain
 * granted or revoked) are fenced by their credential the same way, the credential's lock alone (or
 * after the system roles' lock, for a change of a system role): the credential of the call
 * (`CallContext.principal`) when the command is made for the call's user. The system permissions
 * the call was allowed are checked again under the system roles' lock (held shared by a command
 * that does not change a system role), so an administrator demoted meanwhile is refused. Creating a
 * repository (two commands, the repository's and its owner's role: a check on each could let the
 * first land and refuse the second) is one step in no repository (src/app/repositories.ts). One is
 * not fenced: revoking an API key (`ends`: a refusal would leave live the key its owner asked to
 * end). docs/auth.md, "A credential ended while it is used".
 */
export interface RepositoryFence {
  /**
   * `acts`: a command allowed by who may act; `changes`: it changes who may act (a role, a
   * repository's deletion); `ends`: it ends another credential (an API key's revocation), and is
   * not fenced by the credential of its call.
   */
  run<T>(metadata: EventMetadata, access: FencedAccess, work: () => Promise<T>): Promise<T>;
}

export type FencedAccess = 'acts' | 'changes' | 'ends';

/**
 * The step a fence holds while its work runs: a command of the same caller in the same repository
 * (or in none) made inside it is covered by the step's locks and checks, and takes none of its
 * own. So a change made of several commands (a member's role set: a grant, then revocations) is
 * fenced as one: an end of the credential, a deletion or a change of roles waits for all of it, or
 * comes before any of it. Taking the locks again inside would also wait for itself: a shared lock
 * queues behind an exclusive one already waiting (src/db/namedLock.ts).
 */
interface HeldStep {
  fence: RepositoryFence;
  repositoryId: string | null;
  actor: string;
  access: FencedAccess;
}
const heldStep = new AsyncLocalStorage<HeldStep>();

/** Whether a step held with `outer` covers a command of `inner` access: a change holds its locks alone, so it covers an act too. */
const covers = (outer: FencedAccess, inner: FencedAccess) => outer === inner || (outer === 'changes' && inner === 'acts');

/**
 * The lock of the system domain's roles: a sysadmin acts in every repository through it, so a
 * command that a system role allowed holds it shared (before the repository's: one order, no
 * deadlock), and a change of a system role holds it alone.
 */
const SYSTEM_ACCESS_LOCK = 'factlog.repository-access.system';

/** The prefixes of the credential locks, one per kind: the name of an API key's is the one it always had. */
const CREDENTIAL_LOCK_PREFIX: Record<Credential['kind'], string> = {
  api_key: 'factlog.api-key-access.',
  oauth: 'factlog.oauth-grant-access.',
  session: 'factlog.session-access.',
};

/**
 * The lock of a credential's use: commands made with it hold it shared, whatever ends it holds it
 * alone. Taken last (system, repository, credential), so the order is one. An OAuth credential
 * is its grant (the `sid` of its access tokens), a session its `sid`, an API key its id.
 */
const credentialAccessLock = (credential: Credential) => `${CREDENTIAL_LOCK_PREFIX[credential.kind]}${credential.id}`;

/**
 * The read models the holders of a credential's lock decide on (NamedLockRequest.readModels): an
 * API key's revocation is a read model's row; a grant's or a session's end is written in place.
 */
const credentialReadModels = (credential: Credential): readonly string[] => (credential.kind === 'api_key' ? ['api-keys'] : []);

/** The read models the holders of a repository's or the system's access lock decide on: roles (`users`) and repositories. */
const ACCESS_READ_MODELS = ['users', 'repositories'];

/**
 * Runs `revoke`, which ends `credential`, while no command made with the credential is between
 * its check and its append: it waits for those, and the commands after it see the credential
 * ended. `revoke` must commit before it returns, and must not be called inside a transaction.
 */
export function revokeFenced<T>(db: Database, credential: Credential, revoke: () => Promise<T>): Promise<T> {
  return withNamedLock(db, credentialAccessLock(credential), revoke, 'exclusive', credentialReadModels(credential));
}

/**
 * Whether a credential is still live, as the row that ends it says now: one lookup by primary
 * key. Expiry is not looked at: a credential that expires while its call runs finishes the call.
 */
async function credentialEnded(knex: Knex, credential: Credential): Promise<string | null> {
  const [table, ended] = {
    api_key: ['api_keys', 'the API key was revoked'],
    oauth: ['oauth_grants', 'the authorization of this access token was revoked'],
    session: ['sessions', 'the session has ended'],
  }[credential.kind];
  return (await knex(table).where({ id: credential.id }).whereNull('revoked_at').first('id')) === undefined ? ended : null;
}

/**
 * The credential a command is made with, when a call makes it for its own user: the call's. Not for
 * the pipeline, the CLI or a registration (no credential), nor for a command whose actor is a
 * system one (an OAuth client's registration).
 */
function credentialOfCall(metadata: EventMetadata): Credential | undefined {
  const principal = currentCall()?.principal;
  return principal !== undefined && principal.userId === metadata.actor ? principal.credential : undefined;
}

/** Whether a permission in the repository comes to the caller through a role of the system domain (a sysadmin's). */
function grantedBySystemRole(grant: GrantedPermission): boolean {
  const systemRoles = grant.principal.assignments.filter((assignment) => assignment.domain === SYSTEM_DOMAIN);
  return systemRoles.length > 0 && principalCan({ ...grant.principal, assignments: systemRoles }, grant.domain, grant.permission);
}

export function createRepositoryFence(deps: { db: Database; roleAssignments: (userId: string) => Promise<RoleAssignment[]> }): RepositoryFence {
  const knex: Knex = deps.db.knex;
  const fence: RepositoryFence = {
    async run(metadata, access, rawWork) {
      const repositoryId = metadata.repositoryId;
      const outer = heldStep.getStore();
      if (outer?.fence === fence && outer.repositoryId === (repositoryId ?? null) && outer.actor === metadata.actor && covers(outer.access, access)) return rawWork();
      // Held with locks: the commands the work makes for the same caller there are part of this step.
      const step: HeldStep = { fence, repositoryId: repositoryId ?? null, actor: metadata.actor, access };
      const work = () => heldStep.run(step, rawWork);
      /** Refuses unless the caller still holds each permission it was granted, by its role assignments as they are now. */
      const refuseIfLost = async (grants: GrantedPermission[]) => {
        if (grants.length === 0) return;
        const assignments = await deps.roleAssignments(grants[0].principal.userId);
        for (const grant of grants) {
          if (!principalCan({ ...grant.principal, assignments }, grant.domain, grant.permission)) throw forbidden(`permission denied: ${grant.permission}`);
        }
      };
      const refuseIfEnded = async (credential: Credential) => {
        const ended = await credentialEnded(knex, credential);
        if (ended !== null) throw forbidden(`permission denied: ${ended}`);
      };
      if (!repositoryId) {
        const credential = access === 'ends' ? undefined : credentialOfCall(metadata);
        // The system permissions the call was allowed (role:manage, user:write, apikeys:create) are
        // checked again under the system roles' lock, as a repository's are under the repository's:
        // a sysadmin demoted after the call was allowed no longer grants a role or changes a profile.
        const systemGranted =
          access === 'ends' ? [] : (currentCall()?.granted ?? []).filter((grant) => grant.domain === SYSTEM_DOMAIN && grant.principal.userId === metadata.actor);
        const locks: NamedLockRequest[] = [];
        // A change of a system role (sysadmin granted or revoked) concerns every repository.
        if (access === 'changes') locks.push({ name: SYSTEM_ACCESS_LOCK, mode: 'exclusive', readModels: ACCESS_READ_MODELS });
        else if (systemGranted.length > 0) locks.push({ name: SYSTEM_ACCESS_LOCK, mode: 'shared', readModels: ACCESS_READ_MODELS });
        if (credential !== undefined) locks.push({ name: credentialAccessLock(credential), mode: 'shared', readModels: credentialReadModels(credential) });
        if (locks.length === 0) return rawWork();
        return withNamedLocks(deps.db, locks, async () => {
          await refuseIfLost(systemGranted);
          if (credential !== undefined) await refuseIfEnded(credential);
          return work();
        });
      }
      const domain = repositoryDomain(repositoryId);
      const granted = (currentCall()?.granted ?? []).filter((grant) => grant.domain === domain && grant.principal.userId === metadata.actor);
      // Commands of the pipeline, and of calls that act through no permission in the repository (creating it), have nothing to re-check.
      if (access !== 'changes' && granted.length === 0) return rawWork();
      // A change allowed by a system permission (an administrator's role change on a repository) has its call's credential only.
      const credential = granted[0]?.principal.credential ?? credentialOfCall(metadata);
      const checked = async () => {
        if (granted.length > 0) {
          await findRepository(knex, repositoryId);
          await refuseIfLost(granted);
        }
        if (credential !== undefined) await refuseIfEnded(credential);
        return work();
      };
      const locks: NamedLockRequest[] = [];
      if (access === 'acts' && granted.some(grantedBySystemRole)) locks.push({ name: SYSTEM_ACCESS_LOCK, mode: 'shared', readModels: ACCESS_READ_MODELS });
      locks.push({ name: `factlog.repository-access.${repositoryId}`, mode: access === 'changes' ? 'exclusive' : 'shared', readModels: ACCESS_READ_MODELS });
      if (credential !== undefined) locks.push({ name: credentialAccessLock(credential), mode: 'shared', readModels: credentialReadModels(credential) });
      return withNamedLocks(deps.db, locks, checked);
    },
  };
  return fence;
}
