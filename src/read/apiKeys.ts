import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { forbidden } from '../app/errors.js';
import type { Principal } from '../auth/rbac.js';
import { isoTimestampOrNull } from '../db/timestamps.js';
import { jsonColumn } from './present.js';

interface ApiKeyRow {
  id: string;
  name: string;
  scopes: string[] | string;
  repository_id: string | null;
  created_at: Date | string;
  expires_at: Date | string | null;
  token_hint: string;
  last_used_at: Date | string | null;
}

function presentApiKey(row: ApiKeyRow) {
  return {
    id: row.id,
    name: row.name,
    scopes: jsonColumn(row.scopes) as string[],
    repository_id: row.repository_id,
    hint: `${row.token_hint}…`,
    created_at: isoTimestampOrNull(row.created_at),
    expires_at: isoTimestampOrNull(row.expires_at),
    last_used_at: isoTimestampOrNull(row.last_used_at),
  };
}

/** The keys not revoked, with their secrets' hint and last use: what the owner is shown. */
function liveKeyRows(knex: Knex) {
  return knex('api_keys as key')
    .join('api_key_secrets as secret', 'secret.key_id', 'key.id')
    .whereNull('key.revoked_at')
    .select('key.id', 'key.name', 'key.scopes', 'key.repository_id', 'key.created_at', 'key.expires_at', 'secret.token_hint', 'secret.last_used_at');
}

/** One live key as its owner's list shows it (the read model's created_at is the event's time). */
export async function presentApiKeyById(knex: Knex, keyId: string) {
  const row: ApiKeyRow = await liveKeyRows(knex).where('key.id', keyId).first();
  return presentApiKey(row);
}

/** API keys are listed, made and revoked with a signed-in session only: a leaked key cannot entrench itself. */
export function requireSession(principal: Principal): void {
  if (principal.credential.kind !== 'session') throw forbidden('API keys are managed with a signed-in session, not with an API key or OAuth token');
}

/** A signed-in user's own API keys (docs/auth.md, "Personal API keys"). */
export function apiKeyQueries(deps: Pick<AppContext, 'db'>) {
  const knex = deps.db.knex;
  return {
    async listApiKeys(principal: Principal) {
      requireSession(principal);
      const rows: ApiKeyRow[] = await liveKeyRows(knex).where('key.user_id', principal.userId).orderBy('key.created_at', 'desc');
      return { api_keys: rows.map(presentApiKey) };
    },
  };
}
