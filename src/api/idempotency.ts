import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  claimIdempotencyKey,
  IDEMPOTENCY_KEY_IN_FLIGHT,
  IDEMPOTENCY_KEY_REUSED,
  isIdempotencyKey,
  MAX_IDEMPOTENCY_KEY_CHARS,
  type IdempotencyStore,
  type KeyedRequest,
} from '../app/idempotency.js';
import { badRequest, errorReply } from './errors.js';

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
    idempotencyClaim?: Extract<KeyedRequest, { kind: 'run' }>;
  }
}

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Set on an answer replayed for a key (as Stripe does), so a client can tell a retry's answer from a first one. */
export const REPLAYED_HEADER = 'idempotent-replayed';

/** The header as the OpenAPI document lists it on an idempotent route, and the replies the key adds. */
export const idempotencyKeyHeader = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_IDEMPOTENCY_KEY_CHARS + 2,
  description:
    'optional: a key of your choice (1–255 printable ASCII characters, e.g. a UUID; a structured-field string "…" is read without its quotes) that makes a retry safe: the same key with the same request within 24 hours answers the first answer again (with `Idempotent-Replayed: true`) instead of creating another; the same key with another request is a 422',
} as const;
export const idempotencyReplies = {
  409: errorReply(IDEMPOTENCY_KEY_IN_FLIGHT),
  422: errorReply(IDEMPOTENCY_KEY_REUSED),
} as const;

/** The key of a request: the header's value (an sf-string's quotes dropped), printable ASCII without spaces, or a 400. */
function keyOf(request: FastifyRequest): string | undefined {
  const header = request.headers[IDEMPOTENCY_HEADER];
  if (header === undefined) return undefined;
  const raw = Array.isArray(header) ? header.join(', ') : header;
  const key = /^"(.*)"$/.exec(raw)?.[1] ?? raw;
  if (!isIdempotencyKey(key)) {
    throw badRequest(`the Idempotency-Key header must be 1 to ${MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII characters without spaces (one key, sent once)`);
  }
  return key;
}

/**
 * Idempotency keys for the routes that say `config: { idempotent: true }` (creations a client may
 * retry): checked before the handler runs (after authentication and the schema), the answer kept
 * when it is sent. Only a success (2xx) is kept: a refused or failed request stored nothing, so
 * its key is released and a retry runs anew. A key is the caller's own: without a caller (a 401
 * to come) the header is ignored. What a request asks is its method, path with query, and body;
 * the claim, its refusals (422, 409) and what is kept are the application layer's, which MCP's
 * tools use too (src/app/idempotency.ts).
 */
export function registerIdempotency(app: FastifyInstance, store: IdempotencyStore): void {
  app.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.routeOptions.config.idempotent !== true) return;
    const key = keyOf(request);
    if (key === undefined || !request.principal) return;
    const keyed = await claimIdempotencyKey(store, request.principal.userId, key, [request.method, request.url, request.body ?? null]);
    if (keyed.kind === 'replay') {
      const { status, contentType, body } = keyed.answer;
      if (contentType !== null) reply.header('content-type', contentType);
      return reply.code(status).header(REPLAYED_HEADER, 'true').send(body);
    }
    request.idempotencyClaim = keyed;
  });

  const settle = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const claim = request.idempotencyClaim;
    if (claim === undefined) return;
    request.idempotencyClaim = undefined;
    const contentType = reply.getHeader('content-type');
    await claim.settle(typeof payload === 'string' ? { status: reply.statusCode, contentType: typeof contentType === 'string' ? contentType : null, body: payload } : null);
  };
  app.addHook('onSend', async (request, reply, payload) => {
    await settle(request, reply, payload);
    return payload;
  });
  // A request that ended without sending (its connection gone first) answered nothing to keep.
  app.addHook('onResponse', async (request, reply) => settle(request, reply, undefined));
}
