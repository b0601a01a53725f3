import type { FastifyInstance } from 'fastify';
import { unsafeTextReason } from '../domain/text.js';
import { additionalPropertiesMessage, echoed, HttpError } from './errors.js';

/** The routes whose query strings are theirs to refuse: the API's, not the docs' or the health check's. */
const API_PREFIX = '/api/v1/';

/** The deepest nesting of a request body walked; deeper bodies are refused rather than recursed into. */
const MAX_DEPTH = 64;

/** Where the first unsafe text is and why; the path (the client's keys) echoed, so bounded. */
function findUnsafe(value: unknown, path: string, depth: number): string | null {
  if (typeof value === 'string') {
    const reason = unsafeTextReason(value);
    return reason && `${echoed(path)} ${reason}`;
  }
  if (value === null || typeof value !== 'object') return null;
  if (depth > MAX_DEPTH) return `${echoed(path)} is nested deeper than ${MAX_DEPTH} levels`;
  const entries = Array.isArray(value) ? value.map((item, index) => [String(index), item] as const) : Object.entries(value);
  for (const [key, item] of entries) {
    const keyReason = unsafeTextReason(key);
    if (keyReason) return `a key of ${echoed(path)} ${keyReason}`;
    const found = findUnsafe(item, `${path}/${key}`, depth + 1);
    if (found) return found;
  }
  return null;
}

/**
 * The first part of a URL's query string that is not percent-encoded UTF-8 (`%zz`, a cut `%C3`,
 * an encoded surrogate `%ED%A0%80`), or null. Fastify answers such a path with a 400 before
 * routing, but its query-string parser keeps a malformed part as literal text, so `?query=%C3`
 * searched for "%C3".
 */
function malformedQueryPart(url: string): string | null {
  const start = url.indexOf('?');
  if (start < 0) return null;
  for (const part of url.slice(start + 1).split('&')) {
    try {
      decodeURIComponent(part.replaceAll('+', ' '));
    } catch {
      return echoed(part);
    }
  }
  return null;
}

/**
 * Refuses, on every route (those registered later included), path parameters, query strings and
 * JSON or form bodies holding text no store can keep: one check here instead of one per schema,
 * so every route answers 400 `bad_request` with the offending location instead of failing deep
 * in the database with a 500. And a query string on an API route that takes none.
 */
export function registerInputGuard(app: FastifyInstance): void {
  app.addHook('preValidation', async (request) => {
    const malformed = malformedQueryPart(request.url);
    if (malformed !== null) throw new HttpError(400, 'bad_request', `the query string is not valid percent-encoded UTF-8: ${JSON.stringify(malformed)}`);
    const problem =
      findUnsafe(request.params, 'path parameter', 0) ??
      findUnsafe(request.query, 'query parameter', 0) ??
      (request.isMultipart() ? null : findUnsafe(request.body, 'body', 0));
    if (problem) throw new HttpError(400, 'bad_request', problem.replace(/^(path parameter|query parameter)\//, '$1 '));
    // A route of the API that takes no query string refuses one, as a route with a querystring
    // schema refuses a parameter it does not list: a misspelt `?limt=` is said, not ignored.
    if (request.routeOptions.schema?.querystring === undefined && request.routeOptions.url?.startsWith(API_PREFIX)) {
      const given = Object.keys((request.query ?? {}) as object);
      if (given.length > 0) throw new HttpError(400, 'bad_request', additionalPropertiesMessage('querystring', given));
    }
    // So does a route that takes no body (a retry, a deletion): `{}` and no body are the same,
    // anything else is a field or value it would have ignored.
    if (request.routeOptions.schema?.body === undefined && request.body !== undefined && request.body !== null && !request.isMultipart() && request.routeOptions.url?.startsWith(API_PREFIX)) {
      const body: unknown = request.body;
      const fields = typeof body === 'object' && !Array.isArray(body) ? Object.keys(body as object) : null;
      if (fields === null) throw new HttpError(400, 'bad_request', 'this route takes no body');
      if (fields.length > 0) throw new HttpError(400, 'bad_request', `${additionalPropertiesMessage('body', fields)}: this route takes no body`);
    }
  });
}
