import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { intersectScopes, principalSeesRepository, repositoryDomain, type Principal } from '../auth/rbac.js';
import { hashToken, newOpaqueToken, OPAQUE_TOKEN_PREFIX } from '../auth/tokens.js';
import { parseDuration } from '../config/duration.js';
import type { Config } from '../config/types.js';
import { apiKeyDecider, newApiKey } from '../domain/apiKey/decider.js';
import { streamName } from '../eventstore/envelope.js';
import { presentApiKeyById, requireSession } from '../read/apiKeys.js';
import { authorizeSystem, commandMetadata, findRepository, type Trace } from './access.js';
import type { AppContext } from './appContext.js';
import { conflict, forbidden, invalid, notFound } from './errors.js';
import { revokeFenced } from './repositoryFence.js';

export interface CreateApiKeyInput {
  name: string;
  /** Permission patterns, `object:action` with `*` for any part. */
  scopes: string[];
  /** Id or slug of the one repository the key may act on. */
  repository?: string;
  /** Lifetime in days; absent = `api_keys.default_ttl` (0 there: never expires); 0 = never expires (only when `max_ttl` is `0s`). */
  expires_in_days?: number;
}

const DAY_MS = 86_400_000;
/** What `api_keys.max_per_user: 0` stands for. */
const BUILT_IN_MAX_KEYS_PER_USER = 20;
/** Characters of the raw key kept to tell keys apart in a list (`fl_` + 4 of its 43 random characters). */
const HINT_LENGTH = OPAQUE_TOKEN_PREFIX.apiKey.length + 4;

/** When a key asked for now with `expiresInDays` expires, under `api_keys`; null = never. */
export function apiKeyExpiry(settings: Config['api_keys'], expiresInDays: number | undefined, now: number): Date | null {
  const maxMs = parseDuration(settings.max_ttl);
  const capText = `api_keys.max_ttl (${settings.max_ttl}, ${Math.floor(maxMs / DAY_MS)} days)`;
  if (expiresInDays === undefined) {
    // The spec's `default_ttl` "0 = no expiry": the cap bounds what a caller asks for, not the
    // operator's default (validation keeps a default of its own within the cap).
    const defaultMs = settings.default_ttl * DAY_MS;
    if (defaultMs === 0) return null;
    return new Date(now + (maxMs > 0 ? Math.min(defaultMs, maxMs) : defaultMs));
  }
  if (!Number.isSafeInteger(expiresInDays) || expiresInDays < 0) throw invalid('expires_in_days must be a whole number of days, 0 or more');
  if (expiresInDays === 0) {
    if (maxMs > 0) throw invalid(`a key that never expires is refused by ${capText}`);
    return null;
  }
  if (maxMs > 0 && expiresInDays * DAY_MS > maxMs) throw invalid(`expires_in_days ${expiresInDays} exceeds ${capText}`);
  return new Date(now + expiresInDays * DAY_MS);
}

/** A user's keys that still work or may: not revoked, not expired. Rows without a projected key (just created) count as live. */
function liveKeysOf(knex: Knex, userId: string, now: Date) {
  return knex('api_key_secrets as secret')
    .leftJoin('api_keys as key', 'key.id', 'secret.key_id')
    .where('secret.user_id', userId)
    .whereNull('key.revoked_at')
    .where((query) => query.whereNull('key.expires_at').orWhere('key.expires_at', '>', now));
}

/**
 * Creating and revoking a signed-in user's personal API keys (docs/auth.md, "Personal API keys"; the
 * list: src/read/apiKeys.ts). Keys are managed with a session only: a key cannot mint or revoke
 * keys, so a leaked key cannot entrench itself.
 */
export function apiKeyCommands(deps: Pick<AppContext, 'db' | 'commands' | 'config'>) {
  const knex = deps.db.knex;
  const settings = deps.config.api_keys;
  const maxPerUser = settings.max_per_user > 0 ? settings.max_per_user : BUILT_IN_MAX_KEYS_PER_USER;

  return {
    /** Creates a key and answers it once, raw; only its SHA-256 is kept. */
    async createApiKey(principal: Principal, input: CreateApiKeyInput, trace?: Trace) {
      authorizeSystem(principal, 'apikeys:create');
      requireSession(principal);
      const now = Date.now();
      const expiresAt = apiKeyExpiry(settings, input.expires_in_days, now);
      const repositoryId = input.repository === undefined ? null : (await findRepository(knex, input.repository)).id;
      // A repository the owner may see nothing of is answered as a missing one, as every other route does (src/app/access.ts).
      if (repositoryId !== null && !principalSeesRepository(principal, repositoryDomain(repositoryId))) throw notFound('repository');
      const keyId = randomUUID();
      const command = {
        type: 'CreateApiKey' as const,
        ownerId: principal.userId,
        name: input.name,
        scopes: input.scopes,
        repositoryId,
        expiresAt: expiresAt === null ? null : expiresAt.toISOString(),
      };
      // The record's own rules (name, known scopes) are checked (it throws) before anything reads the database.
      newApiKey(command);
      if (intersectScopes(principal.assignments, input.scopes, repositoryId ?? undefined).size === 0) {
        throw forbidden(`the key would grant nothing: you hold none of these permissions${repositoryId ? ' on that repository' : ''}`);
      }

      const raw = newOpaqueToken(OPAQUE_TOKEN_PREFIX.apiKey);
      await knex.transaction(async (trx) => {
        // Serialises one user's creations, so two racing requests cannot both take the last free place.
        await trx.raw(`SELECT pg_advisory_xact_lock(hashtext(?))`, [`factlog.api_keys:${principal.userId}`]);
        const [{ count }] = await liveKeysOf(trx, principal.userId, new Date(now)).count({ count: '*' });
        if (Number(count) >= maxPerUser) {
          throw conflict(`you already hold ${maxPerUser} live API keys, the most api_keys.max_per_user allows: delete one first`);
        }
        await trx('api_key_secrets').insert({ key_id: keyId, user_id: principal.userId, token_hash: hashToken(raw), token_hint: raw.slice(0, HINT_LENGTH) });
      });
      try {
        await deps.commands.execute(streamName('apikey', keyId), apiKeyDecider, command, commandMetadata(principal, null, trace));
      } catch (error) {
        await knex('api_key_secrets').where({ key_id: keyId }).delete();
        throw error;
      }
      // As the list shows it (the read model's created_at is the event's time, not this request's).
      return { ...(await presentApiKeyById(knex, keyId)), key: raw };
    },

    /**
     * Revokes one of the caller's keys at once; another user's key is `not_found`. The key's lock is
     * held alone until the read model has the revocation, so a command made with the key meanwhile
     * lands first or is refused (src/app/repositoryFence.ts).
     */
    async revokeApiKey(principal: Principal, input: { keyId: string }, trace?: Trace) {
      requireSession(principal);
      await revokeFenced(deps.db, { kind: 'api_key', id: input.keyId }, () =>
        deps.commands.execute(
          streamName('apikey', input.keyId),
          apiKeyDecider,
          { type: 'RevokeApiKey', requestedBy: principal.userId, reason: 'deleted by its owner' },
          commandMetadata(principal, null, trace),
          // Not refused if the session ends meanwhile: that would leave live the key its owner asked to end.
          { endsCredential: true },
        ),
      );
    },
  };
}
