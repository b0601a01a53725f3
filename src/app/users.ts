import { isKnownRole, REPOSITORY_DOMAIN_PREFIX, scopeOfDomain, type Principal } from '../auth/rbac.js';
import { userDecider } from '../domain/user/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { authorizeSystem, commandMetadata, type Trace } from './access.js';
import type { AppContext } from './context.js';
import { invalid, notFound } from './errors.js';

export interface RoleAssignmentInput {
  user_id: string;
  role: string;
  domain: string;
}

const repositoryOf = (domain: string) => (domain.startsWith(REPOSITORY_DOMAIN_PREFIX) ? domain.slice(REPOSITORY_DOMAIN_PREFIX.length) : null);

/** User commands: profile changes (one's own, or anyone's with `user:write`) and role grants (`role:manage`). */
export function userCommands(deps: Pick<AppContext, 'db' | 'identity' | 'commands'>) {
  const knex = deps.db.knex;
  const requireUserRow = async (userId: string) => {
    if (!(await knex('users').where({ id: userId }).first('id'))) throw notFound('user');
  };
  const roleCommand = async (principal: Principal, input: RoleAssignmentInput, type: 'GrantRole' | 'RevokeRole', trace?: Trace) => {
    await deps.commands.execute(
      streamName('user', input.user_id),
      userDecider,
      { type, role: input.role, domain: input.domain },
      commandMetadata(principal, repositoryOf(input.domain), trace),
    );
  };

  return {
    async updateProfile(principal: Principal, input: { user: string; name?: string; email?: string }) {
      const { user, ...change } = input;
      if (user !== principal.userId) authorizeSystem(principal, 'user:write');
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
      await roleCommand(principal, input, 'GrantRole', trace);
      return { user_id, role, domain };
    },

    async revokeRole(principal: Principal, input: RoleAssignmentInput, trace?: Trace) {
      authorizeSystem(principal, 'role:manage');
      await requireUserRow(input.user_id);
      await roleCommand(principal, input, 'RevokeRole', trace);
    },
  };
}

export type UserCommands = ReturnType<typeof userCommands>;
