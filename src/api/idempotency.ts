import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IdempotencyStore } from '../app/idempotency.js';
import { isPlainObject } from '../util/objects.js';
import { badRequest, errorReply, HttpError } from './errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route creates something and takes an `Idempotency-Key` header: a retry with the key
     * answers the first request's answer again instead of creating a second one (registerIdempotency).
     */
    idempotent?: boolean;
  }
  interface FastifyRequest {
    /** The key this request claimed, until its answer is kept or the key released. */
    idempotencyClaim?: { userId: string; key: string; fingerprint: string };
  }
}

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Set on an answer replayed for a key (as Stripe does), so a client can tell a retry's answer from a first one. */
export const REPLAYED_HEADER = 'idempotent-replayed';
const MAX_KEY_CHARS = 255;

/** The header as the OpenAPI document lists it on an idempotent route, and the replies the key adds. */
export const idempotencyKeyHeader = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_KEY_CHARS + 2,
  description:
    'optional: a key of your choice (1–255 printable ASCII characters, e.g. a UUID; a structured-field string "…" is read without its quotes) that makes a retry safe: the same key with the same request within 24 hours answers the first answer again (with `Idempotent-Replayed: true`) instead of creating another; the same key with another request is a 422',
} as const;
const KEY_REUSED = 'this Idempotency-Key was used for another request (another method, path or body): a new request needs a new key';
const KEY_IN_FLIGHT = 'the request with this Idempotency-Key is still running: retry once it has answered';
export const idempotencyReplies = {
  409: errorReply(KEY_IN_FLIGHT),
  422: errorReply(KEY_REUSED),
} as const;

/** The key of a request: the header's value (an sf-string's quotes dropped), printable ASCII without spaces, or a 400. */
function keyOf(request: FastifyRequest): string | undefined {
  const header = request.headers[IDEMPOTENCY_HEADER];
  if (header === undefined) return undefined;
  const raw = Array.isArray(header) ? header.join(', ') : header;
  const key = /^"(.*)"$/.exec(raw)?.[1] ?? raw;
  if (key.length === 0 || key.length > MAX_KEY_CHARS || !/^[\x21-\x7e]+$/.test(key)) {
    throw badRequest(`the Idempotency-Key header must be 1 to ${MAX_KEY_CHARS} printable ASCII characters without spaces (one key, sent once)`);
  }
  return key;
}

/** JSON with every object's keys in order, so that two bodies asking the same thing compare equal however their keys are ordered. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (isPlainObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/** What a request asks: its method, path and query, and body. A key reused for anything else is refused. */
function fingerprintOf(request: FastifyRequest): string {
  return createHash('sha256').update(canonicalJson([request.method, request.url, request.body ?? null])).digest('hex');
}

/**
 * Idempotency keys for the routes that say `config: { idempotent: true }` (creations a client may
 * retry): checked before the handler runs (after authentication and the schema), the answer kept
 * when it is sent. Only a success (2xx) is kept: a refused or failed request stored nothing, so
 * its key is released and a retry runs anew. A key is the caller's own: without a caller (a 401
 * to come) the header is ignored. Store: src/app/idempotency.ts.
 */
export function registerIdempotency(app: FastifyInstance, store: IdempotencyStore): void {
  app.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.routeOptions.config.idempotent !== true) return;
    const key = keyOf(request);
    if (key === undefined || !request.principal) return;
    const userId = request.principal.userId;
    const fingerprint = fingerprintOf(request);
    const claim = await store.claim(userId, key, fingerprint);
    if (claim.kind === 'mismatch') {
      throw new HttpError(422, 'unprocessable', KEY_REUSED);
    }
    if (claim.kind === 'in_flight') throw new HttpError(409, 'conflict', KEY_IN_FLIGHT);
    if (claim.kind === 'answered') {
      const { status, contentType, body } = claim.answer;
      if (contentType !== null) reply.header('content-type', contentType);
      return reply.code(status).header(REPLAYED_HEADER, 'true').send(body);
    }
    request.idempotencyClaim = { userId, key, fingerprint };
  });

  const settle = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const claim = request.idempotencyClaim;
    if (claim === undefined) return;
    request.idempotencyClaim = undefined;
    const { userId, key, fingerprint } = claim;
    if (reply.statusCode >= 200 && reply.statusCode < 300 && typeof payload === 'string') {
      const contentType = reply.getHeader('content-type');
      await store.complete(userId, key, fingerprint, { status: reply.statusCode, contentType: typeof contentType === 'string' ? contentType : null, body: payload });
    } else {
      await store.release(userId, key, fingerprint);
    }
  };
  app.addHook('onSend', async (request, reply, payload) => {
    await settle(request, reply, payload);
    return payload;
  });
  // A request that ended without sending (its connection gone first) answered nothing to keep.
  app.addHook('onResponse', async (request, reply) => settle(request, reply, undefined));
}
