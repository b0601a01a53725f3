import type { SwaggerTransform } from '@fastify/swagger';
import type { FastifySchema } from 'fastify';
import { errorReply, errorReplySchema } from './errors.js';
import { IDEMPOTENCY_HEADER, idempotencyKeyHeader, idempotencyReplies, replayedHeader } from './idempotency.js';
import { CREDENTIAL_PATHS } from './rateLimits.js';
import { takesBearerToken } from './schemas.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The form of a multipart/form-data upload, for the OpenAPI document only: fastify does not
     * validate multipart bodies (the handler reads the parts), so this never becomes `body`.
     */
    multipartBody?: MultipartBody;
    /**
     * Query parameters a request must have, for the OpenAPI document only: the handler checks
     * them itself because a protocol says how a missing one is answered (OAuth's authorization
     * endpoint redirects its error to the client), which schema validation would turn into a 400.
     */
    requiredQuery?: readonly string[];
  }
}

export interface MultipartBody {
  /** What the file part may hold. */
  file: string;
  /** Text fields sent with the file (before it). */
  fields?: Record<string, { description: string }>;
}

const METHODS_WITH_BODY = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * The error replies every route can give whatever its handler does, because they come from hooks
 * that run for all routes: 400 (a URL that is not UTF-8, NUL or lone surrogates anywhere:
 * src/api/inputGuard.ts), 401 on the routes that take a bearer token (a malformed or invalid one:
 * src/api/guard.ts; the others ignore the header), 413 and 415 on methods with a body (fastify's
 * body parser), 429 on the credential paths (src/api/rateLimits.ts). Route-specific ones (403,
 * 404, 409, ...) are the route's to list.
 */
function hookErrorCodes(method: string, url: string, takesBearer: boolean): number[] {
  const codes = [400];
  if (takesBearer) codes.push(401);
  if (METHODS_WITH_BODY.has(method)) codes.push(413, 415);
  if (CREDENTIAL_PATHS.has(url)) codes.push(429);
  return codes;
}

/** What each hook error means on any route (the reply's description in the OpenAPI document). */
const HOOK_ERROR_DESCRIPTIONS: Record<number, string> = {
  400: 'a URL that is not valid percent-encoded UTF-8, or text holding a NUL character or a lone surrogate',
  401: 'a bearer token that is malformed, expired or revoked',
  413: 'a body over server.body_limit',
  415: 'a body in a media type the route does not read',
  429: 'too many requests from this address, or failed sign-ins to one account; Retry-After says when to try again',
};

/**
 * The hooks' errors are JSON `{error, message}` whatever the route produces: on a route whose
 * answers are another media type (the authorization pages' HTML) the reply names its own.
 */
function hookErrorReply(code: number, produces: readonly string[] | undefined) {
  const description = HOOK_ERROR_DESCRIPTIONS[code];
  if (!produces || produces.includes('application/json')) return errorReply(description);
  return { description, content: { 'application/json': { schema: errorReplySchema } } };
}

function multipartSchema(form: MultipartBody) {
  return {
    type: 'object',
    required: ['file'],
    properties: {
      ...Object.fromEntries(Object.entries(form.fields ?? {}).map(([name, { description }]) => [name, { type: 'string', description }])),
      file: { type: 'string', format: 'binary', description: form.file },
    },
  };
}

const pascal = (text: string) => text.split(/[^A-Za-z0-9]+/).filter(Boolean).map((word) => word[0].toUpperCase() + word.slice(1)).join('');

/**
 * A stable `operationId` from the method and path, so client generators name methods alike for
 * every client: `GET /api/v1/repositories/{repoID}/facts/{factID}` is
 * `getRepositoriesByRepoIDFactsByFactID` (a parameter is `By` and its name; `/api/v1` left out).
 */
function operationIdOf(method: string, url: string): string {
  const segments = url
    .replace(/^\/api\/v1(?=\/|$)/, '')
    .split('/')
    .filter(Boolean)
    .map((segment) => {
      const parameter = /^:(\w+)$|^\{(\w+)\}$/.exec(segment);
      return parameter ? `By${pascal(parameter[1] ?? parameter[2])}` : pascal(segment);
    });
  return `${method.toLowerCase()}${segments.join('')}`;
}

/** Completes each operation of the OpenAPI document: its id, the hook error replies, multipart bodies and required query parameters. */
export const completeOperation: SwaggerTransform = ({ schema, url, route }) => {
  if (!schema || (schema as { hide?: boolean }).hide) return { schema, url };
  const methods = [route.method].flat();
  const response: Record<string, unknown> = { ...((schema.response as Record<string, unknown> | undefined) ?? {}) };
  const takesBearer = takesBearerToken(schema);
  const produces = (schema as { produces?: readonly string[] }).produces;
  for (const method of methods) for (const code of hookErrorCodes(method, url, takesBearer)) response[code] ??= hookErrorReply(code, produces);
  const form = route.config?.multipartBody;
  const requiredQuery = route.config?.requiredQuery;
  const idempotent = route.config?.idempotent !== undefined;
  if (idempotent) {
    // The route's own 409 (a slug taken) and the key's are both answers of it.
    const own = response[409] as { description?: string } | undefined;
    response[409] = own?.description ? errorReply(`${own.description}; or ${idempotencyReplies[409].description}`) : idempotencyReplies[409];
    response[422] = idempotencyReplies[422];
    // A success may be a replay: its header is listed on it.
    for (const [code, reply] of Object.entries(response)) {
      if (/^2\d\d$/.test(code) && typeof reply === 'object' && reply !== null) response[code] = { ...reply, headers: { ...(reply as { headers?: object }).headers, ...replayedHeader } };
    }
  }
  const headers = schema.headers as { type?: string; properties?: Record<string, unknown> } | undefined;
  const completed: FastifySchema = {
    ...(methods.length === 1 && !(schema as { operationId?: string }).operationId ? { operationId: operationIdOf(methods[0], url) } : {}),
    ...schema,
    response,
    ...(form && !schema.body ? { body: multipartSchema(form) } : {}),
    ...(requiredQuery && typeof schema.querystring === 'object' ? { querystring: { ...schema.querystring, required: [...requiredQuery] } } : {}),
    ...(idempotent ? { headers: { ...headers, type: 'object', properties: { ...headers?.properties, [IDEMPOTENCY_HEADER]: idempotencyKeyHeader } } } : {}),
  };
  return { schema: completed, url };
};
