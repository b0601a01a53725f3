import { DomainError, type Decider } from '../decider.js';
import { isKnownPermissionPattern } from '../../auth/rbac.js';
import { runeLength } from '../../util/codePoints.js';

/**
 * A personal API key, stream `apikey-<id>`. The events say who holds which key with which scopes
 * and until when, so an auditor can replay it; the key itself and its hash never enter the log
 * (they live in the `api_key_secrets` table).
 */
export type ApiKeyEvent =
  | {
      type: 'ApiKeyCreated';
      data: {
        owner_id: string;
        name: string;
        /** Permission patterns (`facts:read`, `sources:*`), sorted, no duplicates. */
        scopes: string[];
        /** The one repository the key works on; null for every repository the owner can reach. */
        repository_id: string | null;
        /** RFC 3339; null = never expires. */
        expires_at: string | null;
      };
    }
  | { type: 'ApiKeyRevoked'; data: { reason: string } };

export type ApiKeyCommand =
  | {
      type: 'CreateApiKey';
      ownerId: string;
      name: string;
      scopes: readonly string[];
      repositoryId: string | null;
      expiresAt: string | null;
    }
  /** Only the owner revokes a key: anyone else is told it does not exist. */
  | { type: 'RevokeApiKey'; requestedBy: string; reason: string };

export type ApiKeyState = { status: 'none' } | { status: 'active' | 'revoked'; ownerId: string };

export const API_KEY_NAME_MAX = 100;
export const API_KEY_SCOPES_MAX = 50;

export type ApiKeyCreatedData = Extract<ApiKeyEvent, { type: 'ApiKeyCreated' }>['data'];

/** The record a creation command makes (name trimmed; scopes known, sorted, without duplicates), or a DomainError. */
export function newApiKey(command: Extract<ApiKeyCommand, { type: 'CreateApiKey' }>): ApiKeyCreatedData {
  const name = command.name.trim();
  if (name === '') throw new DomainError('invalid', 'name must not be empty');
  if (runeLength(name) > API_KEY_NAME_MAX) throw new DomainError('invalid', `name is longer than ${API_KEY_NAME_MAX} characters`);
  const scopes = [...new Set(command.scopes)].sort();
  if (scopes.length === 0) throw new DomainError('invalid', 'scopes must name at least one permission, e.g. "facts:read"');
  if (scopes.length > API_KEY_SCOPES_MAX) throw new DomainError('invalid', `at most ${API_KEY_SCOPES_MAX} scopes`);
  const unknown = scopes.filter((scope) => !isKnownPermissionPattern(scope));
  if (unknown.length > 0) {
    throw new DomainError('invalid', `unknown permission ${unknown.map((scope) => `'${scope}'`).join(', ')}: scopes are object:action pairs from GET /api/v1/admin/permissions, '*' for any part`);
  }
  return { owner_id: command.ownerId, name, scopes, repository_id: command.repositoryId, expires_at: command.expiresAt };
}

export const apiKeyDecider: Decider<ApiKeyState, ApiKeyCommand, ApiKeyEvent> = {
  initialState: () => ({ status: 'none' }),

  decide(command, state) {
    if (command.type === 'CreateApiKey') {
      if (state.status !== 'none') throw new DomainError('conflict', 'API key already exists');
      return [{ type: 'ApiKeyCreated', data: newApiKey(command) }];
    }
    if (state.status !== 'active' || state.ownerId !== command.requestedBy) throw new DomainError('not_found', 'API key not found');
    return [{ type: 'ApiKeyRevoked', data: { reason: command.reason } }];
  },

  evolve(state, event) {
    if (event.type === 'ApiKeyCreated') return { status: 'active', ownerId: event.data.owner_id };
    return state.status === 'none' ? state : { status: 'revoked', ownerId: state.ownerId };
  },
};
