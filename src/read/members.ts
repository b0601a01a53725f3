import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository } from '../app/access.js';
import { repositoryDomain, REPOSITORY_ROLE_NAMES, type Principal } from '../auth/rbac.js';

/** A member of a repository: a user holding at least one role on it. */
export interface Member {
  user_id: string;
  email: string;
  name: string;
  /** Roles on this repository, in the catalog's order (owner, editor, reader). */
  roles: string[];
}

/** The members of one repository (its domain), by email. */
export async function membersOf(knex: Knex, repositoryId: string): Promise<Member[]> {
  const rows: Array<{ user_id: string; email: string; name: string; role: string }> = await knex('role_assignments as r')
    .join('users as u', 'u.id', 'r.user_id')
    .where('r.domain', repositoryDomain(repositoryId))
    .orderBy('u.email')
    .select('r.user_id', 'u.email', 'u.name', 'r.role');
  const members = new Map<string, Member>();
  for (const { user_id, email, name, role } of rows) {
    const member = members.get(user_id) ?? { user_id, email, name, roles: [] };
    member.roles.push(role);
    members.set(user_id, member);
  }
  for (const member of members.values()) member.roles.sort((a, b) => REPOSITORY_ROLE_NAMES.indexOf(a) - REPOSITORY_ROLE_NAMES.indexOf(b));
  return [...members.values()];
}

/** Who holds which role on a repository (`members:read`: its owners, and sysadmins). */
export function memberQueries(deps: Pick<AppContext, 'db'>) {
  return {
    async list(principal: Principal, input: { repository: string }) {
      const repository = await authorizeRepository(deps.db.knex, principal, input.repository, 'members:read');
      return { members: await membersOf(deps.db.knex, repository.id) };
    },
  };
}
