import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Permission, Principal } from '../auth/rbac.js';
import { DomainError } from '../domain/decider.js';
import { isPlainObject } from '../util/objects.js';
import { authorizeRepository, authorizeSystem } from './access.js';
import { conflict } from './errors.js';

/**
 * Idempotency keys (REST's `Idempotency-Key` request header, IETF draft
 * draft-ietf-httpapi-idempotency-key-header; MCP's `idempotency_key` argument): a client that
 * retries a creation whose answer it lost sends the same key again and gets the first answer
 * instead of a second resource. Kept in `idempotency_keys` (service state, migration
 * 028_idempotency_keys), so a key outlives a restart and is shared by every API node of one
 * database. A key belongs to one user: another user's same key is another key. REST and MCP share
 * the user's keys: a request names its operation first (a method and path, an MCP tool), so a key
 * sent again to another operation or over the other transport is a mismatch, never a replay nor a
 * second creation. Both transports claim and settle a key through `claimIdempotencyKey`.
 * docs/api.md, "Idempotent creation"; docs/mcp.md.
 */

/** A key's rules, one for both transports: 1 to 255 printable ASCII characters without spaces (a UUID is a good one). */
export const MAX_IDEMPOTENCY_KEY_CHARS = 255;
export const IDEMPOTENCY_KEY_PATTERN = /^[\x21-\x7e]+$/;
export const isIdempotencyKey = (key: string) => key.length > 0 && key.length <= MAX_IDEMPOTENCY_KEY_CHARS && IDEMPOTENCY_KEY_PATTERN.test(key);

/** The answers of a key sent with another request, and of one whose first request still runs: the same words on REST (422, 409) and MCP (tool errors). */
export const IDEMPOTENCY_KEY_REUSED = 'this idempotency key was used for another request (another operation, or other arguments or body): a new request needs a new key';
export const IDEMPOTENCY_KEY_IN_FLIGHT = 'the request with this idempotency key is still running: retry once it has answered';

/** A key sent again with another request than its first: nothing is done (REST: 422 `unprocessable`; MCP: an `invalid:` tool error). */
export class IdempotencyKeyReusedError extends DomainError {
  constructor() {
    super('invalid', IDEMPOTENCY_KEY_REUSED);
  }
}

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

/**
 * Who sends a keyed request and what it needs: the permission of the creation, in its repository
 * (an id or slug, as the request names it) or in the system (null: creating a repository).
 */
export interface KeyedCaller {
  principal: Principal;
  permission: Permission;
  repository: string | null;
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
     * Throws unless the caller may make the keyed request now, as the creation itself checks it:
     * `not_found` for a repository it may not see (or one deleted since), else `forbidden`.
     * Answers the repository's id (null for a creation in the system), as the check resolved it.
     */
    async authorize({ principal, permission, repository }: KeyedCaller): Promise<string | null> {
      if (repository === null) {
        authorizeSystem(principal, permission);
        return null;
      }
      return (await authorizeRepository(knex, principal, repository, permission)).id;
    },

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

/** JSON with every object's keys in order, so that two requests asking the same thing compare equal however their keys are ordered. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * What a key claimed for a request leads to: the first request's answer to give again, or the
 * request to run, then `settle` with its answer (null when it failed or answered nothing). Only a
 * success (2xx) is kept; anything else releases the key, so a retry runs anew.
 */
export type KeyedRequest = { kind: 'replay'; answer: IdempotentAnswer } | { kind: 'run'; settle(answer: IdempotentAnswer | null): Promise<void> };

/**
 * What a keyed request asks, its operation first (REST: method, path with query, body; MCP:
 * 'mcp', the tool, its arguments), with its repository named by `repositoryId`: the id the
 * permission check resolved from the id or slug the request named it by (null for a creation in
 * the system). A repository has two names, so a request that names it by its slug and its retry
 * by its id ask the same; a slug that passed to another repository since names another.
 */
export type AskedRequest = (repositoryId: string | null) => readonly unknown[];

/**
 * Claims `key` of the caller's user for `request` (what it asks). The caller's permission is
 * checked first, as the creation checks it: a key's answer is given again only to a caller who may
 * make the request now, so a credential confined to another repository (or to reading), or a user
 * who lost the repository, learns nothing of what a key holds, neither its answer nor whether it
 * was used. The same key with another request throws IdempotencyKeyReusedError; while its first
 * request runs, a conflict.
 */
export async function claimIdempotencyKey(store: IdempotencyStore, caller: KeyedCaller, key: string, request: AskedRequest): Promise<KeyedRequest> {
  const repositoryId = await store.authorize(caller);
  const userId = caller.principal.userId;
  const fingerprint = createHash('sha256').update(canonicalJson(request(repositoryId))).digest('hex');
  const claim = await store.claim(userId, key, fingerprint);
  if (claim.kind === 'mismatch') throw new IdempotencyKeyReusedError();
  if (claim.kind === 'in_flight') throw conflict(IDEMPOTENCY_KEY_IN_FLIGHT);
  if (claim.kind === 'answered') return { kind: 'replay', answer: claim.answer };
  return {
    kind: 'run',
    settle: (answer) =>
      answer !== null && answer.status >= 200 && answer.status < 300 ? store.complete(userId, key, fingerprint, answer) : store.release(userId, key, fingerprint),
  };
}

/**
 * Runs `run` under `key` for a transport whose answer is the result itself (MCP): the first
 * result again (as the JSON it was) for a replay, else the result, kept for the key's retries.
 */
export async function runIdempotently<T>(
  store: IdempotencyStore,
  caller: KeyedCaller,
  key: string,
  request: AskedRequest,
  run: () => Promise<T>,
): Promise<{ replayed: true; value: unknown } | { replayed: false; value: T }> {
  const keyed = await claimIdempotencyKey(store, caller, key, request);
  if (keyed.kind === 'replay') return { replayed: true, value: JSON.parse(keyed.answer.body) as unknown };
  let answer: IdempotentAnswer | null = null;
  try {
    const value = await run();
    answer = { status: 200, contentType: 'application/json', body: JSON.stringify(value ?? null) };
    return { replayed: false, value };
  } finally {
    await keyed.settle(answer);
  }
}
