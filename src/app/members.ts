import { isKnownRole, repositoryDomain, REPOSITORY_ROLE_NAMES, type Principal } from '../auth/rbac.js';
import { normalizeEmail } from '../domain/user/decider.js';
import { membersOf, type Member } from '../read/members.js';
import { authorizeRepository, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { invalid, notFound } from './errors.js';
import { revokeRepositoryRoles, setRepositoryRole } from './roleChanges.js';

/** Who a member is, by account id or by the email they registered with (one of the two). */
export interface MemberReference {
  user_id?: string;
  email?: string;
}

/**
 * Membership commands of a repository's owners (`members:manage`): one role per member, set or
 * removed. Each change is RoleGranted / RoleRevoked events on the user's stream with the caller as
 * actor, as an administrator's grant is (`PUT /admin/users/roles`), under the same rules
 * (src/app/roleChanges.ts): one role a member, and at least one owner.
 */
export function memberCommands(deps: Pick<AppContext, 'db' | 'commands'>) {
  const knex = deps.db.knex;

  const findUser = async (reference: MemberReference) => {
    if ((reference.user_id === undefined) === (reference.email === undefined)) throw invalid('name the member by user_id or by email, one of the two');
    const where = reference.user_id !== undefined ? { id: reference.user_id } : { email: normalizeEmail(reference.email ?? '') };
    const user: { id: string } | undefined = await knex('users').where(where).first('id');
    if (!user) throw notFound('user');
    return user.id;
  };

  const memberOf = async (repositoryId: string, userId: string): Promise<Member> => {
    const member = (await membersOf(knex, repositoryId)).find((candidate) => candidate.user_id === userId);
    if (!member) throw notFound('member');
    return member;
  };

  return {
    /** Gives a user exactly `role` on the repository: granted if new, their other roles there revoked. */
    async setMemberRole(principal: Principal, input: MemberReference & { repository: string; role: string }, trace?: Trace): Promise<Member> {
      const repository = await authorizeRepository(knex, principal, input.repository, 'members:manage');
      const domain = repositoryDomain(repository.id);
      if (!isKnownRole(input.role, domain)) throw invalid(`role '${input.role}' does not exist on a repository: use ${REPOSITORY_ROLE_NAMES.join(', ')}`);
      const userId = await findUser(input);
      return setRepositoryRole(deps, principal, { repositoryId: repository.id, userId, role: input.role }, trace, () => memberOf(repository.id, userId));
    },

    /** Removes a member: every role they hold on the repository is revoked. */
    async removeMember(principal: Principal, input: { repository: string; user_id: string }, trace?: Trace): Promise<void> {
      const repository = await authorizeRepository(knex, principal, input.repository, 'members:manage');
      const userId = await findUser({ user_id: input.user_id });
      await revokeRepositoryRoles(deps, principal, { repositoryId: repository.id, userId, role: 'all' }, trace);
    },
  };
}
