import { maxHeaderSize, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyError, FastifyInstance, FastifyRequest } from 'fastify';
import { AmbiguousConceptError, ReadModelsBehindError, UnsupportedContentError } from '../app/errors.js';
import { IdempotencyKeyReusedError, type IdempotentAnswer } from '../app/idempotency.js';
import { DomainError } from '../domain/decider.js';
import { ReportTooLargeError } from '../domain/report/decider.js';
import { shortenRunes } from '../domain/text.js';
import { ConcurrencyError, InvalidEventError } from '../eventstore/port.js';
import { AuthenticationError } from '../auth/identity.js';
import { InvalidSearchRequestError, SearchUnavailableError, VectorSearchUnavailableError } from '../search/port.js';
import { recordAllowedMethods } from './allowedMethods.js';
import { mediaTypesRead } from './mediaTypes.js';
import { notFoundDuringRebuild } from '../read/projections.js';

/** An error with the HTTP status and machine-readable code to answer with (transport failures: no or bad credentials, a malformed body). */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export const badRequest = (message: string) => new HttpError(400, 'bad_request', message);

/** Set on an answer replayed for an idempotency key (as Stripe does), so a client can tell a retry's answer from a first one. */
export const REPLAYED_HEADER = 'idempotent-replayed';

/**
 * The first answer of an idempotency key, found only once the request's upload was read (its
 * file is what the request asks: src/api/idempotency.ts): thrown from there, and sent as it was.
 */
export class ReplayedAnswer extends Error {
  constructor(readonly answer: IdempotentAnswer) {
    super('answered again for its idempotency key');
  }
}

const domainStatus: Record<DomainError['code'], [number, string]> = {
  not_found: [404, 'not_found'],
  conflict: [409, 'conflict'],
  invalid: [400, 'bad_request'],
  forbidden: [403, 'forbidden'],
  gone: [404, 'not_found'],
};

/** The documented `error` of each 4xx a framework or plugin raises with its own code (docs/api.md, "Errors"); other 4xx are `bad_request`. */
const clientErrorCodes: Record<number, string> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
};

/** Every `error` code the API can send; docs/api.md lists exactly these (test/api/openapi.test.ts checks). */
export const ERROR_CODES = [
  'bad_request',
  'unauthorized',
  'forbidden',
  'not_found',
  'method_not_allowed',
  'conflict',
  'unprocessable',
  'ambiguous_concept',
  'payload_too_large',
  'unsupported_media_type',
  'rate_limited',
  'not_implemented',
  'internal',
  'unavailable',
] as const;

/** The JSON schema of every error reply: `{error, message}`. */
export const errorReplySchema = {
  type: 'object',
  required: ['error', 'message'],
  properties: { error: { type: 'string' }, message: { type: 'string' } },
} as const;

/** An error reply as a route documents it: `{error, message}` and what the status means there (the OpenAPI response's description). */
export const errorReply = <Description extends string>(description: Description) => ({ ...errorReplySchema, description }) as const;

/**
 * The longest path parameter routed, as the URL carries it (percent-encoded): a concept's name of
 * 200 characters, 12 each when encoded, must reach its route.
 */
export const MAX_PATH_PARAM_CHARS = 2_500;

/** The most characters of a client's input (a path, a field name) an error message repeats. */
const ECHOED_CHARS = 100;
/** The most field names a refusal lists. */
const ECHOED_NAMES = 10;

/**
 * A client's input as an error message repeats it: at most ECHOED_CHARS characters. A reply that
 * repeated a 10 KB path or field name back was as long as the request, and a log line as well.
 */
export function echoed(input: string): string {
  return shortenRunes(input, ECHOED_CHARS);
}

/** Names as a refusal lists them: quoted, each and their number bounded (echoed). */
function namesOf(names: readonly string[]): string {
  const listed = names.slice(0, ECHOED_NAMES).map((name) => `'${echoed(name)}'`);
  if (names.length > ECHOED_NAMES) listed.push(`${names.length - ECHOED_NAMES} more`);
  return listed.join(', ');
}

/** The refusal of fields a part of the request does not take, named (`body`, `querystring`). */
export function additionalPropertiesMessage(part: string, names: readonly string[]): string {
  return `${part} must NOT have additional properties (${namesOf(names)})`;
}

/**
 * The message of a refusal fastify makes before routing (`frameworkErrors`): its own repeat the
 * whole path (`'/api/v1/…<10,000 characters>' is exceeding the max param length`), so these name
 * what is wrong and the limit instead.
 */
export function frameworkErrorMessage(error: FastifyError): string {
  if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') return `a path parameter is longer than ${MAX_PATH_PARAM_CHARS} characters (as the URL carries it, percent-encoded)`;
  if (error.code === 'FST_ERR_BAD_URL') return 'the path is not valid percent-encoded UTF-8';
  return echoed(error.message);
}

/** The top-level fields of a body its route's schema does not take (one that lists its fields and takes no others). */
function unknownBodyFields(request: FastifyRequest): string[] {
  const schema = request.routeOptions.schema?.body as { properties?: Record<string, unknown>; additionalProperties?: unknown } | undefined;
  const body = request.body;
  if (!schema?.properties || schema.additionalProperties !== false || typeof body !== 'object' || body === null || Array.isArray(body)) return [];
  const known = schema.properties;
  return Object.keys(body).filter((name) => !Object.hasOwn(known, name));
}

/**
 * fastify's message for a failed schema, naming the fields it refused: Ajv's "must NOT have
 * additional properties" does not say which, and a caller who misspelt a field needs to know.
 * Ajv stops at the first keyword that fails, which for a body that must hold one field of a few
 * (`maxProperties`) is the count, not the misspelt name: a body field the schema does not take is
 * named first whatever failed.
 */
function validationMessage(error: FastifyError, request: FastifyRequest): string {
  const unknown = (error.validation ?? [])
    .filter((entry) => entry.keyword === 'additionalProperties')
    .map((entry) => (entry.params as { additionalProperty?: unknown }).additionalProperty)
    .filter((name): name is string => typeof name === 'string');
  if (unknown.length) return `${error.message} (${namesOf(unknown)})`;
  const unknownInBody = error.validationContext === 'body' ? unknownBodyFields(request) : [];
  if (unknownInBody.length) return additionalPropertiesMessage('body', unknownInBody);
  // `?limit=5&limit=6` reaches the schema as a list: say so rather than "must be integer".
  const [first] = error.validation ?? [];
  const repeated = error.validationContext === 'querystring' && first ? /^\/([^/]+)$/.exec(first.instancePath)?.[1] : undefined;
  if (repeated !== undefined && first?.keyword === 'type' && Array.isArray((request.query as Record<string, unknown> | undefined)?.[repeated])) {
    return `query parameter '${repeated}' is given more than once; it takes one value`;
  }
  // Ajv's "must be equal to one of the allowed values" does not say them; a caller needs them to correct the value.
  const allowedValues = first?.keyword === 'enum' ? (first.params as { allowedValues?: unknown }).allowedValues : undefined;
  if (Array.isArray(allowedValues)) return `${error.message} (${allowedValues.map((value) => String(value)).join(', ')})`;
  // "must NOT have fewer than 1 properties" does not say which: the caller is told the fields to choose from.
  if (error.validationContext === 'body' && first && (first.keyword === 'minProperties' || first.keyword === 'maxProperties')) {
    const hint = fieldCountHint(bodySchemaAt(request, first.instancePath));
    if (hint !== null) return `${error.message} (${hint})`;
  }
  return error.message;
}

interface ObjectSchema {
  properties?: Record<string, unknown>;
  minProperties?: number;
  maxProperties?: number;
}

/** The route's body schema of the object at `instancePath` (`''` the body, `/prompts` a field of it). */
function bodySchemaAt(request: FastifyRequest, instancePath: string): ObjectSchema | undefined {
  let schema = request.routeOptions.schema?.body as ObjectSchema | undefined;
  for (const segment of instancePath.split('/').slice(1)) schema = schema?.properties?.[segment] as ObjectSchema | undefined;
  return schema;
}

/** Which of an object's fields to give, from its bounds: `give exactly one of url, doi`. */
function fieldCountHint(schema: ObjectSchema | undefined): string | null {
  const fields = Object.keys(schema?.properties ?? {});
  if (fields.length === 0) return null;
  const { minProperties: least = 0, maxProperties: most = fields.length } = schema ?? {};
  const count = least === most ? `exactly ${least}` : most < fields.length ? `${least} to ${most}` : `at least ${least}`;
  return `give ${count} of ${fields.join(', ')}`;
}

/**
 * RFC 6750 3's challenge on every 401: a request that sent no credentials is told the scheme; one
 * whose token was refused also gets `error="invalid_token"` and why.
 */
function bearerChallenge(request: FastifyRequest, message: string): string {
  if (request.headers.authorization === undefined) return 'Bearer realm="factlog"';
  return `Bearer realm="factlog", error="invalid_token", error_description="${message.replace(/["\\]/g, "'")}"`;
}

/**
 * The one mapper from failures to HTTP: `{error, message}` with the right status (an ambiguous
 * concept also lists its `contexts` and `candidates`); internals never leak.
 */
export interface ErrorHandlingOptions {
  /** The read models being rebuilt in this process (rebuildingReadModels): a 404 meanwhile is a 503 with Retry-After. */
  rebuilding?: () => Promise<string[]>;
  /** `server.body_limit` in bytes, which a 413 for a body or uploaded file past it names. */
  bodyLimit?: number;
}

/** A size in bytes as the configuration reads it back: `10 MiB`, `512 KiB`, `1000 bytes`. */
function bytesText(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/** fastify's and @fastify/multipart's 413s ("Request body is too large", "request file too large") with the limit and its setting. */
function tooLargeMessage(code: string | undefined, bodyLimit: number | undefined): string | null {
  if (bodyLimit === undefined) return null;
  const limit = `${bytesText(bodyLimit)}, the limit (server.body_limit)`;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') return `the request body is larger than ${limit}`;
  if (code === 'FST_REQ_FILE_TOO_LARGE') return `the uploaded file is larger than ${limit}`;
  return null;
}

/** How long a client is asked to wait before it tries again while a read model is rebuilt (or lags behind a command). */
const REBUILD_RETRY_AFTER_SECONDS = 5;

/** How long a client is asked to wait before it tries again while the search cluster is unreachable. */
const SEARCH_RETRY_AFTER_SECONDS = 5;

export function registerErrorHandling(app: FastifyInstance, options: ErrorHandlingOptions = {}): void {
  app.setErrorHandler(async (error: FastifyError | Error, request, reply) => {
    const send = (status: number, code: string, message: string, extra: object = {}) => {
      if (status === 401) reply.header('www-authenticate', bearerChallenge(request, message));
      return reply.status(status).send({ error: code, message, ...extra });
    };
    if (error instanceof HttpError) return send(error.statusCode, error.code, error.message);
    if (error instanceof ReplayedAnswer) {
      const { status, contentType, body } = error.answer;
      if (contentType !== null) reply.header('content-type', contentType);
      return reply.status(status).header(REPLAYED_HEADER, 'true').send(body);
    }
    if (error instanceof AmbiguousConceptError) return send(409, 'ambiguous_concept', error.message, { contexts: error.contexts, candidates: error.candidates });
    if (error instanceof UnsupportedContentError) return send(415, 'unsupported_media_type', error.message);
    if (error instanceof IdempotencyKeyReusedError) return send(422, 'unprocessable', error.message);
    if (error instanceof ReportTooLargeError) return send(413, 'payload_too_large', error.message);
    if (error instanceof DomainError) {
      const [status, code] = domainStatus[error.code];
      if (status === 404 && options.rebuilding) {
        const rebuilding = await options.rebuilding();
        if (rebuilding.length > 0) {
          reply.header('retry-after', String(REBUILD_RETRY_AFTER_SECONDS));
          return send(503, 'unavailable', notFoundDuringRebuild(error.message, rebuilding));
        }
      }
      return send(status, code, error.message);
    }
    if (error instanceof AuthenticationError) return send(401, 'unauthorized', error.message);
    if (error instanceof ConcurrencyError) return send(409, 'conflict', 'the resource was changed concurrently; retry');
    if (error instanceof InvalidEventError || error instanceof InvalidSearchRequestError) return send(400, 'bad_request', error.message);
    if (error instanceof VectorSearchUnavailableError) return send(501, 'not_implemented', error.message);
    if (error instanceof ReadModelsBehindError) {
      reply.header('retry-after', String(REBUILD_RETRY_AFTER_SECONDS));
      return send(503, 'unavailable', error.message);
    }
    if (error instanceof SearchUnavailableError) {
      request.log.error({ err: error, reason: error.reason }, 'the search cluster cannot be reached');
      reply.header('retry-after', String(SEARCH_RETRY_AFTER_SECONDS));
      return send(503, 'unavailable', error.message);
    }
    const fastifyError = error as FastifyError;
    // fastify's and src/api/mediaTypes.ts's refusal of a body's media type: say which the route reads.
    if (fastifyError.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      return send(415, 'unsupported_media_type', `body must be ${mediaTypesRead(request).join(' or ')}`);
    }
    if (fastifyError.validation) return send(400, 'bad_request', validationMessage(fastifyError, request));
    const statusCode = fastifyError.statusCode;
    const tooLarge = statusCode === 413 ? tooLargeMessage(fastifyError.code, options.bodyLimit) : null;
    if (tooLarge !== null) return send(413, 'payload_too_large', tooLarge);
    if (statusCode && statusCode >= 400 && statusCode < 500) {
      // fastify's and its plugins' own codes (FST_ERR_CTP_INVALID_JSON_BODY, FST_REQ_FILE_TOO_LARGE, ...) become the documented names.
      return send(statusCode, clientErrorCodes[statusCode] ?? 'bad_request', error.message);
    }
    request.log.error({ err: error }, 'unhandled error');
    return send(500, 'internal', 'internal error');
  });
  const allowed = recordAllowedMethods(app);
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const methods = allowed.of(path);
    if (methods.length === 0) return reply.status(404).send({ error: 'not_found', message: `no route for ${request.method} ${echoed(path)}` });
    const allow = [...methods, 'OPTIONS'].join(', ');
    if (request.method === 'OPTIONS') return reply.status(204).header('allow', allow).send();
    return reply.status(405).header('allow', allow).send({ error: 'method_not_allowed', message: `${request.method} is not supported on ${echoed(path)}; it takes ${allow}` });
  });
}

/** How a URL carries what llhttp refuses in it: a client that sent text as is learns the fix, not only that a character was refused. */
const PERCENT_ENCODE = 'a URL must carry bytes outside printable ASCII (UTF-8 text: é is %C3%A9), spaces and control characters percent-encoded';

/**
 * Why llhttp refused the URL of the request line. Its reason names the part ("Invalid char in url
 * query") and `bytesParsed` is the refused byte's place in the packet: the byte is named by its
 * code only, the request's text never repeated.
 */
function invalidUrlMessage(error: ConnectionError, reason: string): string {
  const part = /^Invalid char in url (path|query|fragment)/.exec(reason)?.[1];
  if (part === undefined) return `the URL of the request line is malformed: it must be a path that begins with / (or an absolute http URL); ${PERCENT_ENCODE}`;
  // fastify types the packet as a Buffer's JSON; Node passes the Buffer.
  const packet: unknown = error.rawPacket;
  const byte = Buffer.isBuffer(packet) ? packet[error.bytesParsed] : undefined;
  const kind = byte === undefined ? undefined : byte >= 0x80 ? 'a byte outside ASCII' : byte < 0x20 || byte === 0x7f ? 'a control character' : undefined;
  const held = byte === undefined || kind === undefined ? 'a character' : `${kind} (0x${byte.toString(16).toUpperCase().padStart(2, '0')})`;
  return `the URL's ${part} holds ${held} sent as is: ${PERCENT_ENCODE}`;
}

/** The status and message for a request Node's HTTP parser refused; the statuses are Node's and fastify's. */
function clientErrorReply(error: ConnectionError & { reason?: unknown }): [status: 408 | 431 | 400, message: string] {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') return [408, 'the request was not received in time'];
  if (error.code === 'HPE_HEADER_OVERFLOW') return [431, `the request line and headers together exceed ${maxHeaderSize / 1024} KiB`];
  // llhttp's reason is its own fixed text ("Invalid header token"), never the request's bytes.
  if (typeof error.reason !== 'string') return [400, 'malformed HTTP request'];
  if (error.code === 'HPE_INVALID_URL') return [400, invalidUrlMessage(error, error.reason)];
  // A space in the URL ends it there: the rest of the line is then read as the HTTP version.
  if (error.code === 'HPE_INVALID_CONSTANT' && error.reason.startsWith('Expected HTTP/')) {
    return [400, `the request line is malformed: it must be the method, the URL and HTTP/1.1, one space between; ${PERCENT_ENCODE}`];
  }
  return [400, `malformed HTTP request: ${error.reason}`];
}

/**
 * fastify's `clientErrorHandler`: a request Node's HTTP parser refused (headers too large, a
 * malformed line or length, too slow) never reaches fastify's error handler, so its answer is
 * written to the socket here, in the same `{error, message}` shape (docs/api.md, "Errors"). As
 * fastify's default does: nothing for a reset or destroyed connection, a write only while the
 * socket is writable and no earlier answer on it has begun, and the connection closed after
 * (closeAfterAnswer).
 */
export function answerClientError(this: FastifyInstance, error: ConnectionError, socket: Socket): void {
  // Once answered, what the client still sends fails the parser again: it is read and dropped (closeAfterAnswer).
  if (error.code === 'ECONNRESET' || socket.destroyed || answered.has(socket)) return;
  const [status, message] = clientErrorReply(error);
  this.log.trace({ err: error }, 'refused by the HTTP parser');
  // A pipelined request refused while an earlier one's answer is being written: a reply now would
  // land inside that answer's body, so the connection is only closed (as Node's own handler does).
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
  if (socket.writable && inFlight?.headersSent !== true) {
    const body = JSON.stringify({ error: 'bad_request', message });
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
    closeAfterAnswer(socket);
    return;
  }
  socket.destroy(error);
}

/** How long a connection refused by the parser is still read after its answer, at most. */
const CLIENT_ERROR_LINGER_MS = 2_000;
const answered = new WeakSet<Socket>();

/**
 * Closes a connection after its refusal without losing the refusal. A socket closed while bytes
 * the client sent are still unread makes the kernel reset the connection and drop what was not yet
 * delivered, so a client still sending (a body trickled past the timeouts, headers past 16 KiB)
 * read "connection reset" instead of the 408 or 431. So this side ends after the answer, the
 * client's bytes are read and dropped, and the socket is destroyed when the client closes or after
 * CLIENT_ERROR_LINGER_MS: the lingering close of nginx and Go's server.
 */
function closeAfterAnswer(socket: Socket): void {
  answered.add(socket);
  socket.end();
  const linger = setTimeout(() => socket.destroy(), CLIENT_ERROR_LINGER_MS);
  linger.unref();
  socket.once('close', () => clearTimeout(linger));
}
