import { errorCodes, type FastifyInstance, type FastifyRequest } from 'fastify';

/** The body media types a route reads: those its schema `consumes` (the OpenAPI document's), else JSON. */
export function mediaTypesRead(request: FastifyRequest): readonly string[] {
  return request.routeOptions.schema?.consumes ?? ['application/json'];
}

/**
 * A body in a media type its route does not read is a 415 (docs/api.md, "Errors"). fastify
 * answers so for a type no parser reads, so text/plain, which no route reads, loses fastify's
 * default parser (JSON sent as text became a string, refused as "body must be object").
 * Multipart's parser is app-wide, so which routes read it is checked here: the upload routes,
 * and only they. Forms are parsed only within the OAuth routes, which read them.
 */
export function registerMediaTypes(app: FastifyInstance): void {
  app.removeContentTypeParser('text/plain');
  app.addHook('preValidation', async (request) => {
    if (request.is404) return;
    if (request.isMultipart() !== mediaTypesRead(request).includes('multipart/form-data')) throw new errorCodes.FST_ERR_CTP_INVALID_MEDIA_TYPE();
  });
}
