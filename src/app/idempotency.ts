import type { Knex } from 'knex';

/**
 * Idempotency keys (the `Idempotency-Key` request header, IETF draft
 * draft-ietf-httpapi-idempotency-key-header): a client that retries a creation whose answer it
 * lost sends the same key again and gets the first answer instead of a second resource. Kept in
 * `idempotency_keys` (service state, migration 028_idempotency_keys), so a key outlives a restart
 * and is shared by every API node of one database. A key belongs to one user: another user's same
 * key is another key. docs/api.md, "Idempotent creation".
 */

/** How long a key answers its first request again, from that request: Stripe's 24 hours. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;

/**
 * A key still claimed this long after its request started is taken to belong to a process that
 * died before answering, and may be claimed again. Longer than any request runs (a write waits
 * at most 30 s for its read models, src/app/commands.ts), so no live request loses its key.
 */
export const IDEMPOTENCY_ABANDONED_MS = 5 * 60_000;

/** What was answered to the request that claimed a key, replayed to its retries. */
export interface IdempotentAnswer {
  status: number;
  contentType: string | null;
  body: string;
}

export type IdempotencyClaim =
  /** The key is this request's: run it, then `complete` (an answer to replay) or `release` (none). */
  | { kind: 'claimed' }
  /** The key's request was answered: answer this again. */
  | { kind: 'answered'; answer: IdempotentAnswer }
  /** The key was used for another request (another method, path or body). */
  | { kind: 'mismatch' }
  /** The key's first request is still running. */
  | { kind: 'in_flight' };

interface KeyRow {
  fingerprint: string;
  status: number | null;
  content_type: string | null;
  body: string | null;
}

export function createIdempotencyStore(knex: Knex, now: () => number = Date.now) {
  let lastPurge = 0;

  /** Deletes the keys past their window, at most once an hour per process (a delete by age is the same whoever runs it). */
  async function purgeExpired(): Promise<void> {
    if (now() - lastPurge < 3_600_000) return;
    lastPurge = now();
    await knex('idempotency_keys').where('created_at', '<', new Date(now() - IDEMPOTENCY_WINDOW_MS)).delete();
  }

  return {
    /**
     * Claims `key` of `userId` for a request with this fingerprint (what the request asks:
     * method, path, body), or says what the key already holds. A key past its window, or
     * abandoned by a request that never answered, is claimed anew.
     */
    async claim(userId: string, key: string, fingerprint: string): Promise<IdempotencyClaim> {
      await purgeExpired();
      // Twice at most: a key released between the insert and the read is free again.
      for (let attempt = 0; attempt < 2; attempt++) {
        const at = now();
        const claimed = await knex.raw<{ rows: unknown[] }>(
          `INSERT INTO idempotency_keys (user_id, key, fingerprint, created_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (user_id, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, created_at = EXCLUDED.created_at,
             status = NULL, content_type = NULL, body = NULL
           WHERE idempotency_keys.created_at < ? OR (idempotency_keys.status IS NULL AND idempotency_keys.created_at < ?)
           RETURNING 1`,
          [userId, key, fingerprint, new Date(at), new Date(at - IDEMPOTENCY_WINDOW_MS), new Date(at - IDEMPOTENCY_ABANDONED_MS)],
        );
        if (claimed.rows.length > 0) return { kind: 'claimed' };
        const row: KeyRow | undefined = await knex('idempotency_keys').where({ user_id: userId, key }).first('fingerprint', 'status', 'content_type', 'body');
        if (row === undefined) continue;
        if (row.fingerprint !== fingerprint) return { kind: 'mismatch' };
        if (row.status === null || row.body === null) return { kind: 'in_flight' };
        return { kind: 'answered', answer: { status: row.status, contentType: row.content_type, body: row.body } };
      }
      return { kind: 'in_flight' };
    },

    /** Keeps the answer of the request that claimed the key, for its retries. */
    async complete(userId: string, key: string, fingerprint: string, answer: IdempotentAnswer): Promise<void> {
      await knex('idempotency_keys')
        .where({ user_id: userId, key, fingerprint })
        .whereNull('status')
        .update({ status: answer.status, content_type: answer.contentType, body: answer.body });
    },

    /** Frees a claimed key whose request made nothing to answer again (it failed): a retry runs anew. */
    async release(userId: string, key: string, fingerprint: string): Promise<void> {
      await knex('idempotency_keys').where({ user_id: userId, key, fingerprint }).whereNull('status').delete();
    },
  };
}

export type IdempotencyStore = ReturnType<typeof createIdempotencyStore>;
