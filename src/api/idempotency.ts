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
import type { Permission } from '../auth/rbac.js';
import { badRequest, errorReply, REPLAYED_HEADER, ReplayedAnswer } from './errors.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route creates something and takes an `Idempotency-Key` header: a retry with the key
     * answers the first request's answer again instead of creating a second one (registerIdempotency).
     * `permission`: what the creation needs, in the route's repository (`repoID`) or else the
     * system, checked before the key is looked at. `upload`: a multipart upload, whose key is
     * claimed once its file is read.
     */
    idempotent?: { permission: Permission; upload?: true };
  }
  interface FastifyRequest {
    /** The key this request claimed, until its answer is kept or the key released. */
    idempotencyClaim?: Extract<KeyedRequest, { kind: 'run' }>;
    /** An upload route's key, to claim once the upload is read (claimUploadKey). */
    idempotentUpload?: (upload: UploadAsked) => Promise<void>;
  }
}

export const IDEMPOTENCY_HEADER = 'idempotency-key';

/** What an upload asks: its text fields and its file, by name, declared type and content (the SHA-256 of its bytes, hex). */
export interface UploadAsked {
  fields: Record<string, string | null>;
  filename: string | null;
  declaredType: string | null;
  sha256: string;
}

/** The header as the OpenAPI document lists it on an idempotent route, and the replies the key adds. */
export const idempotencyKeyHeader = {
  type: 'string',
  minLength: 1,
  maxLength: MAX_IDEMPOTENCY_KEY_CHARS + 2,
  description:
    'optional: a key of your choice (1–255 printable ASCII characters, e.g. a UUID; a structured-field string "…" is read without its quotes) that makes a retry safe: the same key with the same request within 24 hours answers the first answer again (with `Idempotent-Replayed: true`) instead of creating another; the same key with another request is a 422',
} as const;
/** The header a replayed answer carries, as the OpenAPI document lists it on an idempotent route's success. */
export const replayedHeader = {
  [REPLAYED_HEADER]: {
    type: 'string',
    enum: ['true'],
    description: 'sent (as `true`) when this is the first answer to an earlier request with the same Idempotency-Key, given again; absent on a first answer',
  },
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
 * The request's path as its route reads it, with its query as sent: the route's pattern with its
 * parameters filled in, its repository (the `:repoID` segment, an id or slug) named by
 * `repositoryId`, the id the permission check resolved. So a request and its retry that name one
 * repository by its two names ask the same, and so do two spellings of one path: the router
 * decodes percent-escapes (`/%72epositories` reaches `/repositories`), so the bytes of the path
 * as sent say nothing the route does not. An ordinary path (no escapes, the repository by its id)
 * is the path as sent.
 */
function urlNaming(request: FastifyRequest, repositoryId: string | null): string {
  const route = request.routeOptions.url;
  const queryAt = request.url.indexOf('?');
  const query = queryAt < 0 ? '' : request.url.slice(queryAt);
  if (route === undefined) return request.url;
  const params = (request.params ?? {}) as Record<string, string | undefined>;
  const segments = route.split('/').map((segment) => {
    if (!segment.startsWith(':')) return segment;
    if (segment === ':repoID' && repositoryId !== null) return repositoryId;
    return encodeURIComponent(params[segment.slice(1)] ?? '');
  });
  return segments.join('/') + query;
}

/**
 * Idempotency keys for the routes that say `config: { idempotent: { permission } }` (creations a
 * client may retry): checked before the handler runs (after authentication and the schema, and
 * once the caller holds the permission: a replay is no way around it), the answer kept when it is
 * sent. An upload route (`upload: true`) claims its key once its file is read,
 * after the caller's permission: what it asks is its text fields and its file (name, declared
 * type, SHA-256 of the bytes), since a multipart body's boundary changes from one try to the next. Only a success (2xx) is kept: a refused or failed request stored nothing, so
 * its key is released and a retry runs anew. A key is the caller's own: without a caller (a 401
 * to come) the header is ignored. What a request asks is its method, path with query, and body;
 * its path is its route's (percent-escapes decoded), its repository named by its id, whether the path names it by id or slug (urlNaming); the
 * claim, its refusals (422, 409) and what is kept are the application layer's, which MCP's tools
 * use too (src/app/idempotency.ts).
 */
export function registerIdempotency(
  app: FastifyInstance,
  store: IdempotencyStore,
  /** Runs the key's claim inside the request's call context (its permission check reaches the audit). */
  inCallOf: <T>(request: FastifyRequest, run: () => Promise<T>) => Promise<T>,
): void {
  app.addHook('preHandler', async (request: FastifyRequest, reply: FastifyReply) => {
    const idempotent = request.routeOptions.config.idempotent;
    if (idempotent === undefined) return;
    const key = keyOf(request);
    if (key === undefined || !request.principal) return;
    const { repoID } = (request.params ?? {}) as { repoID?: string };
    const caller = { principal: request.principal, permission: idempotent.permission, repository: repoID ?? null };
    if (idempotent.upload) {
      // The file is read only once the caller may upload (src/api/uploads.ts), so its key is claimed then.
      request.idempotentUpload = async ({ fields, filename, declaredType, sha256 }) => {
        const file = { filename, declared_type: declaredType, sha256 };
        const keyed = await claimIdempotencyKey(store, caller, key, (repositoryId) => [request.method, urlNaming(request, repositoryId), { fields, file }]);
        if (keyed.kind === 'replay') throw new ReplayedAnswer(keyed.answer);
        request.idempotencyClaim = keyed;
      };
      return;
    }
    const keyed = await inCallOf(request, () => claimIdempotencyKey(store, caller, key, (repositoryId) => [request.method, urlNaming(request, repositoryId), request.body ?? null]));
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
