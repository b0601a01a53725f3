import { projection, each } from '../src/projection/types.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import type { UserEvent } from '../src/domain/user/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/**
 * Read models `users` and `role_assignments` (what RBAC checks read). A deleted repository's roles
 * end with it: its members' assignments go, so no permission list names a repository that is gone.
 */
export const usersProjection = projection<UserEvent | Extract<RepositoryEvent, { type: 'RepositoryDeleted' }>>({
  name: 'users',
  tables: ['users', 'role_assignments'],
  handlers: {
    UserRegistered: each(async (trx, event) => {
      await trx('users')
        .insert({ id: parseStreamName(event.streamId).id, email: event.data.email, name: event.data.name, created_at: event.occurredAt, updated_at: event.occurredAt })
        .onConflict('id')
        .ignore();
    }),
    UserProfileUpdated: each(async (trx, event) => {
      const changes: Record<string, unknown> = { updated_at: event.occurredAt };
      if (event.data.email !== null) changes.email = event.data.email;
      if (event.data.name !== null) changes.name = event.data.name;
      await trx('users').where({ id: parseStreamName(event.streamId).id }).update(changes);
    }),
    RoleGranted: each(async (trx, event) => {
      await trx('role_assignments')
        .insert({ user_id: parseStreamName(event.streamId).id, role: event.data.role, domain: event.data.domain, granted_at: event.occurredAt })
        .onConflict(['user_id', 'role', 'domain'])
        .ignore();
    }),
    RoleRevoked: each(async (trx, event) => {
      await trx('role_assignments').where({ user_id: parseStreamName(event.streamId).id, role: event.data.role, domain: event.data.domain }).delete();
    }),
    RepositoryDeleted: each(async (trx, event) => {
      await trx('role_assignments').where({ domain: `repository:${parseStreamName(event.streamId).id}` }).delete();
    }),
  },
});
