import { DomainError, type Decider } from '../decider.js';

export type UserEvent =
  | { type: 'UserRegistered'; data: { email: string; name: string } }
  | { type: 'UserProfileUpdated'; data: { email: string | null; name: string | null } }
  | { type: 'RoleGranted'; data: { role: string; domain: string } }
  | { type: 'RoleRevoked'; data: { role: string; domain: string } };

export type UserCommand =
  | { type: 'RegisterUser'; email: string; name: string }
  | { type: 'UpdateProfile'; email?: string; name?: string }
  | { type: 'GrantRole'; role: string; domain: string }
  | { type: 'RevokeRole'; role: string; domain: string };

export type UserState =
  | { status: 'none' }
  | { status: 'active'; email: string; name: string; roles: { role: string; domain: string }[] };

export const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export function normalizeEmail(email: string): string {
  // NFKC first, so compatibility look-alikes (fullwidth ＡＤＡ, ligatures) become the letters they
  // show, then lower case: look-alike spellings of one address are one account.
  return email.normalize('NFKC').trim().toLowerCase();
}

const holds = (state: Extract<UserState, { status: 'active' }>, role: string, domain: string) =>
  state.roles.some((assignment) => assignment.role === role && assignment.domain === domain);

export const userDecider: Decider<UserState, UserCommand, UserEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    if (command.type === 'RegisterUser') {
      if (state.status !== 'none') throw new DomainError('conflict', 'user already exists');
      const email = normalizeEmail(command.email);
      if (!EMAIL_PATTERN.test(email)) throw new DomainError('invalid', 'email is not a valid address');
      return [{ type: 'UserRegistered', data: { email, name: command.name.trim() } }];
    }
    if (state.status === 'none') throw new DomainError('not_found', 'user not found');
    switch (command.type) {
      case 'UpdateProfile': {
        const email = command.email === undefined ? undefined : normalizeEmail(command.email);
        if (email !== undefined && !EMAIL_PATTERN.test(email)) throw new DomainError('invalid', 'email is not a valid address');
        const change = {
          email: email !== undefined && email !== state.email ? email : null,
          name: command.name !== undefined && command.name.trim() !== state.name ? command.name.trim() : null,
        };
        if (change.email === null && change.name === null) return [];
        return [{ type: 'UserProfileUpdated', data: change }];
      }
      case 'GrantRole':
        if (holds(state, command.role, command.domain)) return [];
        return [{ type: 'RoleGranted', data: { role: command.role, domain: command.domain } }];
      case 'RevokeRole':
        if (!holds(state, command.role, command.domain))
          throw new DomainError('not_found', `user does not hold role ${command.role} on ${command.domain}`);
        return [{ type: 'RoleRevoked', data: { role: command.role, domain: command.domain } }];
    }
  },

  evolve(state, event) {
    if (event.type === 'UserRegistered') return { status: 'active', email: event.data.email, name: event.data.name, roles: [] };
    if (state.status === 'none') return state;
    switch (event.type) {
      case 'UserProfileUpdated':
        return { ...state, email: event.data.email ?? state.email, name: event.data.name ?? state.name };
      case 'RoleGranted':
        return { ...state, roles: [...state.roles, { role: event.data.role, domain: event.data.domain }] };
      case 'RoleRevoked':
        return {
          ...state,
          roles: state.roles.filter((held) => !(held.role === event.data.role && held.domain === event.data.domain)),
        };
    }
  },
};
