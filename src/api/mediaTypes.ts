import { errorCodes, type FastifyInstance, type FastifyRequest } from 'fastify';

/** The body media types a route reads: those its schema `consumes` (the OpenAPI document's), else JSON. */
export function mediaTypesRead(request: FastifyRequest): readonly string[] {
  return request.routeOptions.schema?.consumes ?? ['application/json'];
}

/** The media type of the request's body, without parameters, lower-cased ('' without a content-type). */
function bodyMediaType(request: FastifyRequest): string {
  return (request.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
}

/**
 * A body in a media type its route does not read is a 415 (docs/api.md, "Errors"). fastify
 * answers so for a type no parser reads, so text/plain, which no route reads, loses fastify's
 * default parser (JSON sent as text became a string, refused as "body must be object"). The JSON
 * and multipart parsers are app-wide, so which routes read those is checked here: multipart only
 * the upload routes, JSON every route but those that `consume` something else (the OAuth
 * forms). Forms are parsed only within the OAuth routes, which read them.
 *
 * A JSON content-type with an empty body is a request without a body (a client that always sends
 * the header, e.g. to `POST /auth/logout`): the routes that need one say so by their schema.
 */
export function registerMediaTypes(app: FastifyInstance): void {
  app.removeContentTypeParser('text/plain');
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body.toString();
    if (text === '') done(null, undefined);
    else parseJson(request, text, done);
  });
  app.addHook('preValidation', async (request) => {
    if (request.is404) return;
    const read = mediaTypesRead(request);
    if (request.isMultipart() !== read.includes('multipart/form-data')) throw new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE();
    if (request.body !== undefined && bodyMediaType(request) === 'application/json' && !read.includes('application/json')) throw new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE();
  });
}
