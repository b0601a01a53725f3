import { REPOSITORY_DOMAIN_PREFIX, repositoryDomain, type Principal } from '../auth/rbac.js';
import { withNamedLock } from '../db/namedLock.js';
import { userDecider } from '../domain/user/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { membersOf } from '../read/members.js';
import { commandMetadata, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, notFound } from './errors.js';

/**
 * Role changes as events, and the rules of a repository's membership that hold whichever route
 * makes them (an owner's `PUT /members`, an administrator's `PUT /admin/users/roles`): a member
 * holds one role on a repository, and a repository keeps at least one owner. Access is the
 * caller's to check: `members:manage` (src/app/members.ts) or `role:manage` (src/app/users.ts).
 */
export interface RoleAssignmentInput {
  user_id: string;
  role: string;
  domain: string;
}

const OWNER = 'owner';

export const repositoryOf = (domain: string) => (domain.startsWith(REPOSITORY_DOMAIN_PREFIX) ? domain.slice(REPOSITORY_DOMAIN_PREFIX.length) : null);

type RoleDeps = Pick<AppContext, 'db' | 'commands'>;

/** Appends a role grant or revocation to the user's stream, the caller as its actor. */
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
    { changesAccess: true },
  );
}

/**
 * The membership of one repository changes one request at a time (across processes on a
 * server), so the last-owner check and the change it allows are one step. `change` gets the
 * roles the user holds there and the repository's owner count. Its commands are one step of the
 * fence too (after the members' lock, in the fence's order): an end of the caller's credential or
 * a loss of its permission lands before all of them or after all of them, never between a grant
 * and the revocations it goes with, which left the member holding both roles.
 */
function changeMembership<T>(
  deps: RoleDeps,
  principal: Principal,
  change: { repositoryId: string; userId: string },
  trace: Trace | undefined,
  apply: (held: string[], owners: number) => Promise<T>,
): Promise<T> {
  const { repositoryId, userId } = change;
  return withNamedLock(
    deps.db,
    `factlog.members.${repositoryId}`,
    () =>
      deps.commands.step(commandMetadata(principal, repositoryId, trace), 'changes', async () => {
        const members = await membersOf(deps.db.knex, repositoryId);
        const held = members.find((member) => member.user_id === userId)?.roles ?? [];
        return apply(held, members.filter((member) => member.roles.includes(OWNER)).length);
      }),
    'exclusive',
    ['users'],
  );
}

const LAST_OWNER = "this is the repository's last owner: make another member owner first";

/**
 * Gives the user exactly `role` on the repository: granted if new, their other roles there
 * revoked. Returns what `andThen` reads while the membership is still held (the member as this
 * change left them, not as a later one did).
 */
export function setRepositoryRole<T = void>(
  deps: RoleDeps,
  principal: Principal,
  change: { repositoryId: string; userId: string; role: string },
  trace?: Trace,
  andThen: () => Promise<T> = async () => undefined as T,
): Promise<T> {
  const { repositoryId, userId, role } = change;
  const domain = repositoryDomain(repositoryId);
  return changeMembership(deps, principal, change, trace, async (held, owners) => {
    if (held.includes(OWNER) && role !== OWNER && owners === 1) throw conflict(LAST_OWNER);
    await changeRole(deps, principal, { user_id: userId, role, domain }, 'GrantRole', trace);
    for (const other of held) if (other !== role) await changeRole(deps, principal, { user_id: userId, role: other, domain }, 'RevokeRole', trace);
    return andThen();
  });
}

/**
 * Revokes `role` (every role, with 'all') on the repository; `not_found` when the user holds none
 * there (for one role, the user's stream says so, as for any domain).
 */
export function revokeRepositoryRoles(deps: RoleDeps, principal: Principal, change: { repositoryId: string; userId: string; role: string | 'all' }, trace?: Trace): Promise<void> {
  const { repositoryId, userId, role } = change;
  const domain = repositoryDomain(repositoryId);
  return changeMembership(deps, principal, change, trace, async (held, owners) => {
    if (role === 'all' && held.length === 0) throw notFound('member');
    const revoked = role === 'all' ? held : [role];
    if (revoked.includes(OWNER) && held.includes(OWNER) && owners === 1) throw conflict(LAST_OWNER);
    for (const each of revoked) await changeRole(deps, principal, { user_id: userId, role: each, domain }, 'RevokeRole', trace);
  });
}
