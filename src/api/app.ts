import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { processWideSchemaCompilers } from './schemaCompilers.js';
import multipart from '@fastify/multipart';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { AppContext } from '../app/appContext.js';
import { parseDuration } from '../config/duration.js';
import { withCallContext, type CallContext } from '../app/callContext.js';
import { answerClientError, frameworkErrorMessage, HttpError, MAX_PATH_PARAM_CHARS, registerErrorHandling } from './errors.js';
import { rebuildingReadModels } from '../read/projections.js';
import { authenticateRequest } from './guard.js';
import { registerIdempotency } from './idempotency.js';
import { registerInputGuard } from './inputGuard.js';
import { registerMediaTypes } from './mediaTypes.js';
import { completeOperation } from './openapi.js';
import { registerRateLimits } from './rateLimits.js';
import { registerSecurityHeaders } from './securityHeaders.js';
import { adminRoutes } from './routes/admin.js';
import { apiKeyRoutes } from './routes/apiKeys.js';
import { auditRoutes } from './routes/audit.js';
import { authRoutes } from './routes/auth.js';
import { conceptRoutes } from './routes/concepts.js';
import { summaryRoutes } from './routes/summaries.js';
import { contextRoutes } from './routes/contexts.js';
import { eventRoutes } from './routes/events.js';
import { factRoutes } from './routes/facts.js';
import { healthRoutes } from './routes/health.js';
import { permissionRoutes } from './routes/permissions.js';
import { projectionRoutes } from './routes/projections.js';
import { promptsetRoutes } from './routes/promptset.js';
import { reportRoutes } from './routes/reports.js';
import { repositoryRoutes } from './routes/repositories.js';
import { sourceRoutes } from './routes/sources.js';
import { investigationRoutes } from './routes/investigations.js';
import { oauthRoutes } from './routes/oauth.js';
import { wellKnownRoutes } from './routes/wellKnown.js';
import { mcpRoutes } from './routes/mcp.js';
import { memberRoutes } from './routes/members.js';
import { taskRoutes } from './routes/tasks.js';
import { userRoutes } from './routes/users.js';

/** Every resource's routes, one plugin per file under routes/. */
const resourceRoutes = [
  healthRoutes,
  authRoutes,
  userRoutes,
  apiKeyRoutes,
  permissionRoutes,
  adminRoutes,
  auditRoutes,
  repositoryRoutes,
  memberRoutes,
  sourceRoutes,
  factRoutes,
  reportRoutes,
  conceptRoutes,
  investigationRoutes,
  summaryRoutes,
  contextRoutes,
  eventRoutes,
  taskRoutes,
  promptsetRoutes,
  projectionRoutes,
  wellKnownRoutes,
  oauthRoutes,
  mcpRoutes,
];

/** Builds the HTTP API: fastify with schemas on every route, OpenAPI at /api/v1/openapi.json, docs at /docs. */
/** How long a client is asked to wait when the service is shutting down: a restart is that quick. */
const SHUTDOWN_RETRY_AFTER_SECONDS = 5;

/**
 * A request that comes while the server closes (on a connection kept alive) is answered 503
 * `unavailable` with Retry-After, and its connection closed, before anything else looks at it.
 * fastify's own answer (`return503OnClosing`) broke the error contract:
 * `{"error":"Service Unavailable","message":"Service Unavailable","statusCode":503}`, no Retry-After.
 */
function registerShutdownAnswer(app: FastifyInstance): void {
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onRequest', async (_request, reply) => {
    if (!closing) return;
    reply.header('retry-after', String(SHUTDOWN_RETRY_AFTER_SECONDS)).header('connection', 'close');
    throw new HttpError(503, 'unavailable', 'the service is shutting down; retry in a few seconds');
  });
}

export async function buildApp(context: AppContext): Promise<FastifyInstance> {
  const { config } = context;
  const readTimeoutMs = parseDuration(config.server.read_timeout);
  const writeTimeoutMs = parseDuration(config.server.write_timeout);
  const app = Fastify({
    // pino's Logger is what fastify wants at run time; its types differ only in an optional field.
    loggerInstance: context.log as unknown as FastifyBaseLogger,
    // Request ids come from the caller's X-Request-Id when sane, else a new UUID; both are echoed back.
    genReqId: (request) => {
      const given = request.headers['x-request-id'];
      return typeof given === 'string' && /^[\w.-]{1,100}$/.test(given) ? given : randomUUID();
    },
    requestIdHeader: false,
    bodyLimit: config.server.body_limit,
    // A path parameter as the URL carries it, percent-encoded: a concept's name (at most 200
    // characters, 12 each when encoded) must reach its route. find-my-way's default, 100, cut
    // names of over 100 letters, or 11 of a script whose letters take 3 bytes.
    routerOptions: { maxParamLength: MAX_PATH_PARAM_CHARS },
    // read_timeout bounds receiving a request; the whole exchange may take read + write.
    requestTimeout: readTimeoutMs + writeTimeoutMs,
    connectionTimeout: readTimeoutMs + writeTimeoutMs,
    // Node looks for requests past their deadlines every connectionsCheckingInterval (30 s by
    // default), and enforced requestTimeout only with a headersTimeout no longer than it (Node's
    // is 60 s): a body trickled in was read to its end however long it took (QA: a 30 s limit,
    // 201 after 45 s). The headers must arrive within read_timeout.
    http: { connectionsCheckingInterval: 1_000, headersTimeout: readTimeoutMs },
    // A URL that is not valid percent-encoded UTF-8 (FST_ERR_BAD_URL) or whose path parameter is
    // too long (FST_ERR_MAX_PARAM_LENGTH) is answered before routing: same `{error, message}` shape.
    frameworkErrors: (error, _request, reply) => {
      // The generic reply type of this hook knows no schema yet; a plain reply is what it is.
      void (reply as FastifyReply).status(400).send({ error: 'bad_request', message: frameworkErrorMessage(error) });
    },
    // Requests Node's HTTP parser refuses (431, 400, 408) get the `{error, message}` shape too.
    clientErrorHandler: answerClientError,
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false } },
    schemaController: { compilersFactory: processWideSchemaCompilers },
    // Requests during shutdown are answered by registerShutdownAnswer, in this API's error shape.
    return503OnClosing: false,
  });
  // A request sent with `Expect: 100-continue` whose declared body is past server.body_limit is
  // answered its 413 before the client sends the body: Node's own handler sent 100 Continue to
  // every such request, the 413 came at once and closed the connection, and a client still
  // sending megabytes (curl does this for any body over 1 MB) lost the 413 to a broken pipe.
  // A multipart upload's limit is on its file, not its whole body: it continues as before.
  app.server.on('checkContinue', (request: http.IncomingMessage, response: http.ServerResponse) => {
    const declared = Number(request.headers['content-length']);
    const multipart = /^multipart\//i.test(request.headers['content-type'] ?? '');
    if (multipart || !(declared > config.server.body_limit)) response.writeContinue();
    app.server.emit('request', request, response);
  });
  registerErrorHandling(app, { rebuilding: () => rebuildingReadModels(context), bodyLimit: config.server.body_limit });
  registerShutdownAnswer(app);
  registerSecurityHeaders(app);
  registerMediaTypes(app);
  registerInputGuard(app);
  // Before every route: the limits attach to routes as they are registered, by path.
  await registerRateLimits(app, config.rate_limits);
  await app.register(multipart, { limits: { fileSize: config.server.body_limit, files: 1 } });
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: { title: 'Factlog API', version: '1', description: 'Event-sourced knowledge-graph service' },
      servers: [{ url: context.publicUrl }],
      components: {
        securitySchemes: {
          bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT or API key', description: 'a session token (JWT) from register, login or refresh, or a personal API key (fl_…); the MCP endpoint takes OAuth access tokens and API keys' },
        },
      },
    },
    transform: completeOperation,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/api/v1/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
    await authenticateRequest(context, request);
  });
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    context.metrics.httpRequests.inc({ method: request.method, route, status: String(reply.statusCode) });
    context.metrics.httpDuration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  });
  // Every handler runs inside its call context, so the application layer's permission decisions
  // reach the audit with the route, the credential kind and the client address.
  const callOf = (request: FastifyRequest, operation: string): CallContext => ({
    transport: 'rest',
    operation,
    principal: request.principal ?? undefined,
    clientAddress: request.ip,
    requestId: String(request.id),
    audit: context.audit,
  });
  app.addHook('onRoute', (route) => {
    const handler = route.handler;
    const operation = `${Array.isArray(route.method) ? route.method.join(',') : route.method} ${route.url}`;
    route.handler = function (this: FastifyInstance, request, reply) {
      return withCallContext(callOf(request, operation), () => handler.call(this, request, reply));
    };
  });
  // A key's permission check, before the handler, is audited as the handler's are.
  registerIdempotency(app, context.idempotency, (request, run) => withCallContext(callOf(request, `${request.method} ${request.routeOptions.url}`), run));
  for (const routes of resourceRoutes) await app.register(routes, { context });
  return app;
}
