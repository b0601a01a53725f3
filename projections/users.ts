import type { Projection } from '../src/projection/types.js';
import type { UserEvent } from '../src/domain/user/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/** Read models `users` and `role_assignments` (what RBAC checks read). */
export const usersProjection: Projection = {
  name: 'users',
  eventTypes: ['UserRegistered', 'UserProfileUpdated', 'RoleGranted', 'RoleRevoked'],
  tables: ['users', 'role_assignments'],
  async apply(trx, recorded) {
    const event = recorded as unknown as UserEvent & typeof recorded;
    const userId = parseStreamName(recorded.streamId).id;
    switch (event.type) {
      case 'UserRegistered':
        await trx('users')
          .insert({ id: userId, email: event.data.email, name: event.data.name, created_at: recorded.occurredAt, updated_at: recorded.occurredAt })
          .onConflict('id')
          .ignore();
        return;
      case 'UserProfileUpdated': {
        const changes: Record<string, unknown> = { updated_at: recorded.occurredAt };
        if (event.data.email !== null) changes.email = event.data.email;
        if (event.data.name !== null) changes.name = event.data.name;
        await trx('users').where({ id: userId }).update(changes);
        return;
      }
      case 'RoleGranted':
        await trx('role_assignments')
          .insert({ user_id: userId, role: event.data.role, domain: event.data.domain, granted_at: recorded.occurredAt })
          .onConflict(['user_id', 'role', 'domain'])
          .ignore();
        return;
      case 'RoleRevoked':
        await trx('role_assignments').where({ user_id: userId, role: event.data.role, domain: event.data.domain }).delete();
        return;
    }
  },
};
