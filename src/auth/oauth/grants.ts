import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { hashToken, newOpaqueToken, OPAQUE_TOKEN_PREFIX } from '../tokens.js';

/**
 * The OAuth grant store: private tables (`oauth_grants`, `oauth_codes`, `oauth_refresh_tokens`,
 * `oauth_answered_requests`), service state that never enters the event log. Codes and refresh
 * tokens are stored only as `hashToken(raw)`. A *grant* is one approval by a user; its code, every
 * refresh token rotated from it and every access token (claim `sid`) belong to it, so revoking the
 * grant revokes the whole family.
 */
export interface Grant {
  id: string;
  client_id: string;
  user_id: string;
  scope: string;
  resource: string;
  redirect_uri: string;
}

export type CodeRedemption =
  | { status: 'ok'; grant: Grant; codeChallenge: string }
  | { status: 'unknown' | 'expired' | 'revoked' }
  /** The code had been redeemed before: its grant is now revoked (RFC 6749 4.1.2). */
  | { status: 'reused'; grant: Grant };

export type RefreshRotation =
  | { status: 'ok'; grant: Grant; refreshToken: string }
  | { status: 'unknown' | 'expired' | 'revoked' | 'wrong_client' }
  /** A rotated-away token came back: someone holds a copy, so the whole family is revoked. */
  | { status: 'reused'; grant: Grant };

/**
 * An authorization request waiting for the user's decision: its id (carried by the signed consent
 * form) and until when a form carrying it can still be posted. It can be answered once.
 */
export interface PendingRequest {
  id: string;
  openUntil: Date;
}

export interface GrantStoreSettings {
  codeTtlMs: number;
  refreshTtlMs: number;
  /**
   * Runs `revoke`, which revokes the grant, while no command made with one of its access tokens
   * is between its check and its append (`revokeFenced`, src/app/repositoryFence.ts): the wiring
   * gives it; without it (tests of the store alone) `revoke` just runs.
   */
  fenceRevocation?: (grantId: string, revoke: () => Promise<void>) => Promise<void>;
}

const GRANT_COLUMNS = ['g.id', 'g.client_id', 'g.user_id', 'g.scope', 'g.resource', 'g.redirect_uri'] as const;

const asGrant = (row: Grant): Grant => ({
  id: row.id,
  client_id: row.client_id,
  user_id: row.user_id,
  scope: row.scope,
  resource: row.resource,
  redirect_uri: row.redirect_uri,
});

export function createGrantStore(knex: Knex, settings: GrantStoreSettings, now: () => number = Date.now) {
  const fenceRevocation = settings.fenceRevocation ?? ((_grantId: string, revoke: () => Promise<void>) => revoke());
  /**
   * Revokes a grant under its fence. Never inside a transaction: the fence waits for the commands
   * made with the grant, and on PGlite's one connection a transaction held open meanwhile would
   * keep them from finishing. A reuse found in a transaction is revoked once it committed.
   */
  const revoke = (grantId: string, reason: string) =>
    fenceRevocation(grantId, async () => {
      await knex('oauth_grants').where({ id: grantId }).whereNull('revoked_at').update({ revoked_at: new Date(now()), revoked_reason: reason });
    });

  /**
   * Marks a request answered; false when it already was. The primary key decides between two
   * concurrent answers (the second insert waits for the first transaction, then inserts nothing).
   */
  async function markAnswered(db: Knex, request: PendingRequest): Promise<boolean> {
    const inserted = await db('oauth_answered_requests')
      .insert({ request_id: request.id, expires_at: request.openUntil, answered_at: new Date(now()) })
      .onConflict('request_id')
      .ignore()
      .returning('request_id');
    return inserted.length > 0;
  }

  return {
    /**
     * Records an approval of `request` and returns its single-use authorization code, or null
     * when the request was already answered (nothing is written then).
     */
    async createGrant(input: Omit<Grant, 'id'> & { codeChallenge: string }, request: PendingRequest): Promise<{ grantId: string; code: string } | null> {
      const grantId = randomUUID();
      const code = newOpaqueToken(OPAQUE_TOKEN_PREFIX.authorizationCode);
      return knex.transaction(async (trx) => {
        // In the grant's transaction: a failed insert below leaves the request unanswered.
        if (!(await markAnswered(trx, request))) return null;
        await trx('oauth_grants').insert({
          id: grantId,
          client_id: input.client_id,
          user_id: input.user_id,
          scope: input.scope,
          resource: input.resource,
          redirect_uri: input.redirect_uri,
          created_at: new Date(now()),
        });
        await trx('oauth_codes').insert({
          code_hash: hashToken(code),
          grant_id: grantId,
          code_challenge: input.codeChallenge,
          expires_at: new Date(now() + settings.codeTtlMs),
          created_at: new Date(now()),
        });
        return { grantId, code };
      });
    },

    /** Records a denial of `request` (an approval answers it in `createGrant`): false when it was already answered. */
    async answerRequest(request: PendingRequest): Promise<boolean> {
      return markAnswered(knex, request);
    },

    /** Whether `requestId` was answered (and its record not yet purged, which outlives its forms). */
    async isAnswered(requestId: string): Promise<boolean> {
      return (await knex('oauth_answered_requests').where({ request_id: requestId }).first('request_id')) !== undefined;
    },

    /**
     * Consumes a code. The first redemption attempt uses it up, whatever the outcome of the
     * checks after it; a second one revokes the grant and every token issued from it.
     */
    async redeemCode(code: string): Promise<CodeRedemption> {
      const redemption = await knex.transaction(async (trx): Promise<CodeRedemption> => {
        const row = await trx('oauth_codes as c')
          .join('oauth_grants as g', 'g.id', 'c.grant_id')
          .where('c.code_hash', hashToken(code))
          .forUpdate()
          .first([...GRANT_COLUMNS, 'c.code_challenge', 'c.expires_at', 'c.used_at', 'g.revoked_at']);
        if (!row) return { status: 'unknown' };
        const grant = asGrant(row);
        if (row.used_at) return { status: 'reused', grant };
        await trx('oauth_codes').where({ code_hash: hashToken(code) }).update({ used_at: new Date(now()) });
        if (row.revoked_at) return { status: 'revoked' };
        if (new Date(row.expires_at).getTime() <= now()) return { status: 'expired' };
        return { status: 'ok', grant, codeChallenge: row.code_challenge };
      });
      if (redemption.status === 'reused') await revoke(redemption.grant.id, 'authorization code reused');
      return redemption;
    },

    async issueRefreshToken(grantId: string): Promise<string> {
      const token = newOpaqueToken(OPAQUE_TOKEN_PREFIX.refreshToken);
      await knex('oauth_refresh_tokens').insert({
        token_hash: hashToken(token),
        grant_id: grantId,
        expires_at: new Date(now() + settings.refreshTtlMs),
        created_at: new Date(now()),
      });
      return token;
    },

    /** Rotation: the presented token stops working and a new one of the same grant replaces it. */
    async rotateRefreshToken(token: string, clientId: string): Promise<RefreshRotation> {
      const rotation = await knex.transaction(async (trx): Promise<RefreshRotation> => {
        const row = await trx('oauth_refresh_tokens as r')
          .join('oauth_grants as g', 'g.id', 'r.grant_id')
          .where('r.token_hash', hashToken(token))
          .forUpdate()
          .first([...GRANT_COLUMNS, 'r.expires_at', 'r.rotated_at', 'g.revoked_at']);
        if (!row) return { status: 'unknown' };
        const grant = asGrant(row);
        // Another client's token is refused without touching it: that client may be the rightful holder.
        if (grant.client_id !== clientId) return { status: 'wrong_client' };
        if (row.revoked_at) return { status: 'revoked' };
        if (row.rotated_at) return { status: 'reused', grant };
        if (new Date(row.expires_at).getTime() <= now()) return { status: 'expired' };
        const next = newOpaqueToken(OPAQUE_TOKEN_PREFIX.refreshToken);
        await trx('oauth_refresh_tokens').where({ token_hash: hashToken(token) }).update({ rotated_at: new Date(now()) });
        await trx('oauth_refresh_tokens').insert({
          token_hash: hashToken(next),
          grant_id: grant.id,
          expires_at: new Date(now() + settings.refreshTtlMs),
          created_at: new Date(now()),
        });
        return { status: 'ok', grant, refreshToken: next };
      });
      if (rotation.status === 'reused') await revoke(rotation.grant.id, 'refresh token reused');
      return rotation;
    },

    /** The grant a refresh token belongs to (live or not), or null for an unknown token. */
    async grantOfRefreshToken(token: string): Promise<Grant | null> {
      const row = await knex('oauth_refresh_tokens as r')
        .join('oauth_grants as g', 'g.id', 'r.grant_id')
        .where('r.token_hash', hashToken(token))
        .first([...GRANT_COLUMNS]);
      return row ? asGrant(row) : null;
    },

    /** A grant by id, revoked or not (null when unknown): what an access token's `sid` is checked against. */
    async grantById(grantId: string): Promise<(Grant & { revoked: boolean }) | null> {
      const row = await knex('oauth_grants as g').where('g.id', grantId).first([...GRANT_COLUMNS, 'g.revoked_at']);
      return row ? { ...asGrant(row), revoked: row.revoked_at !== null } : null;
    },

    async revokeGrant(grantId: string, reason: string): Promise<void> {
      await revoke(grantId, reason);
    },

    /**
     * Deletes what can no longer be used nor tell anything: codes a day past their expiry (a
     * code replayed later is unknown, no longer reuse), refresh tokens past their expiry, grants
     * with no refresh token left once their code is gone, and answered requests a day after
     * their last form expired (the day covers processes whose clocks disagree).
     */
    async purgeExpired(): Promise<void> {
      const dayAgo = new Date(now() - 24 * 3_600_000);
      await knex.transaction(async (trx) => {
        await trx('oauth_codes').where('expires_at', '<', dayAgo).delete();
        await trx('oauth_answered_requests').where('expires_at', '<', dayAgo).delete();
        await trx('oauth_refresh_tokens').where('expires_at', '<', new Date(now())).delete();
        await trx('oauth_grants')
          .whereNotExists(trx('oauth_codes').whereRaw('oauth_codes.grant_id = oauth_grants.id'))
          .whereNotExists(trx('oauth_refresh_tokens').whereRaw('oauth_refresh_tokens.grant_id = oauth_grants.id'))
          .where('created_at', '<', dayAgo)
          .delete();
      });
    },
  };
}

export type GrantStore = ReturnType<typeof createGrantStore>;
