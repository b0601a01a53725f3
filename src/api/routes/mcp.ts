import type { OutgoingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { FastifyError, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { createApplication } from '../../app/application.js';
import type { AppContext } from '../../app/appContext.js';
import type { Principal } from '../../auth/rbac.js';
import { authenticateMcp, McpAuthRefusal } from '../../mcp/auth.js';
import {
  checkModernMethods,
  checkRequestParams,
  checkRequestMetadata,
  discoverResult,
  INVALID_PARAMS,
  INVALID_REQUEST,
  jsonRpcError,
  messagesOf,
  PARSE_ERROR,
  replyFormat,
  requestedVersion,
  SUPPORTED_PROTOCOL_VERSIONS,
  TRANSPORT_ERROR,
  versionBridge,
} from '../../mcp/protocol.js';
import { createMcpServer } from '../../mcp/server.js';
import { isPlainObject } from '../../util/objects.js';
import { errorReply, errorReplySchema } from '../errors.js';
import { traceOf } from '../guard.js';
import { MCP_PATH, mcpResourceUrl } from '../../auth/oauth/resource.js';
import { issuerOf, protectedResourceMetadataUrl } from '../issuer.js';
import { bearerSecurity } from '../schemas.js';

const jsonRpcErrorSchema = {
  type: 'object',
  required: ['jsonrpc', 'id', 'error'],
  properties: {
    jsonrpc: { type: 'string', enum: ['2.0'] },
    id: { type: ['string', 'number', 'null'] },
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: { code: { type: 'integer' }, message: { type: 'string' }, data: {} },
    },
  },
} as const;

const header = (request: FastifyRequest, name: string): string | undefined => {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
};

/**
 * The tool endpoint (docs/mcp.md): JSON-RPC 2.0 over Streamable HTTP, stateless, answered by
 * the MCP SDK's server with the tools of src/mcp/tools. Before the SDK sees a request this route
 * checks its Origin (403), bearer token (401/403 with a challenge), protocol version (400) and
 * Accept (406), and answers 2026-07-28's `server/discover`.
 *
 * The SDK's Node transport would take the raw req/res, but it rebuilds the headers from the raw
 * request, so the version and Accept it must see could not be adjusted; the web-standard transport
 * it wraps takes a Request built here (with fastify's parsed body), and its Response is streamed
 * to the hijacked raw response.
 */
export const mcpRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const application = createApplication(context);
  const authentication = {
    identity: context.identity,
    // Signature, expiry, type and audience, and the grant behind the token: known, still live (a
    // revoked grant or a reused code or refresh token ends its access tokens at once, not at
    // expiry), and the grant of the token's user, client and resource.
    verifyAccessToken: (token: string, resource: string) => context.oauth.verifyAccessToken(token, resource),
  };
  const schema = { tags: ['mcp'], security: bearerSecurity };

  // A body refused before the SDK sees it (not JSON; text no store can keep, src/api/inputGuard.ts;
  // not an object or array) is answered as JSON-RPC, which an MCP client reads, with the same 400
  // and the request's id when the body has one. Other errors go to the API's handler.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error.statusCode !== 400) throw error;
    const body: unknown = request.body;
    const given = isPlainObject(body) ? body.id : undefined;
    const id = typeof given === 'string' || typeof given === 'number' ? given : null;
    const parseFailed = error.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY';
    const code = parseFailed ? PARSE_ERROR : /^body\/params\b/.test(error.message) ? INVALID_PARAMS : INVALID_REQUEST;
    const label = { [PARSE_ERROR]: 'Parse error', [INVALID_PARAMS]: 'Invalid params', [INVALID_REQUEST]: 'Invalid Request' }[code];
    return reply.status(400).send(jsonRpcError(code, `${label}: ${error.message}`, undefined, parseFailed ? null : id));
  });

  /** Origins a browser may call the endpoint from (DNS-rebinding guard): the issuer's own and `mcp.allowed_origins`. */
  const originAllowed = (origin: string, issuer: string): boolean => origin === new URL(issuer).origin || context.config.mcp.allowed_origins.includes(origin);
  const refuseOrigin = (reply: FastifyReply, origin: string) => reply.status(403).send({ error: 'forbidden', message: `origin ${origin} is not allowed (mcp.allowed_origins)` });

  // CORS for an allowed origin on every answer of the endpoint (401s included: a browser client
  // reads the challenge's WWW-Authenticate to find the authorization server).
  app.addHook('onRequest', async (request, reply) => {
    if (request.routeOptions.url !== MCP_PATH) return;
    reply.header('vary', 'Origin');
    const origin = header(request, 'origin');
    if (origin === undefined || !originAllowed(origin, issuerOf(context.config, request))) return;
    reply.header('access-control-allow-origin', origin).header('access-control-expose-headers', 'WWW-Authenticate, MCP-Protocol-Version, Mcp-Session-Id');
  });

  /** The SDK's answer, streamed to the client as it comes (one SSE event per message, or one JSON body). */
  async function relay(reply: FastifyReply, request: FastifyRequest, response: Response): Promise<void> {
    reply.hijack();
    const raw = reply.raw;
    // Headers set on the reply before (CORS, security) are fastify's to send, which the hijack skips.
    const headers: OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) headers[name] = value;
    raw.writeHead(response.status, { ...headers, ...Object.fromEntries(response.headers), 'x-request-id': String(request.id) });
    if (response.body === null) {
      raw.end();
      return;
    }
    try {
      await pipeline(Readable.fromWeb(response.body), raw);
    } catch (error) {
      // The client went away mid-stream: its request is cancelled (2026-07-28 "Cancellation").
      request.log.debug({ err: error }, 'MCP reply stream ended early');
    }
  }

  async function serve(request: FastifyRequest, reply: FastifyReply, principal: Principal, issuer: string): Promise<void> {
    const asked = requestedVersion(header(request, 'mcp-protocol-version'));
    if ('status' in asked) return void reply.status(asked.status).send(asked.body);
    const messages = messagesOf(request.body);
    const mismatch = checkRequestMetadata(messages, {
      version: header(request, 'mcp-protocol-version'),
      method: header(request, 'mcp-method'),
      name: header(request, 'mcp-name'),
    });
    if (mismatch) return void reply.status(mismatch.status).send(mismatch.body);
    const refused = checkModernMethods(messages, asked.version) ?? checkRequestParams(messages);
    if (refused) return void reply.status(refused.status).send(refused.body);
    const format = replyFormat(header(request, 'accept'));
    if (format === null) return void reply.status(406).send(jsonRpcError(TRANSPORT_ERROR, 'Not Acceptable: accept application/json or text/event-stream'));

    if (messages.length === 1 && messages[0].method === 'server/discover' && messages[0].id !== undefined) {
      return void reply.status(200).type('application/json').send({ jsonrpc: '2.0', id: messages[0].id, result: discoverResult() });
    }

    const bridge = versionBridge(messages, asked.version);
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: format === 'json' });
    const sendToClient = transport.send.bind(transport);
    transport.send = (message: JSONRPCMessage, options) => sendToClient(bridge.rewrite(message), options);
    const server = createMcpServer({ app: application, context, principal, trace: traceOf(request), clientAddress: request.ip });
    try {
      await server.connect(transport);
      // The SDK reads only headers: the body is the one fastify parsed. Accept and the version are
      // what the SDK must see for the format and revision chosen above.
      const headers = new Headers();
      for (const [name, value] of Object.entries(request.headers)) {
        if (value !== undefined && name !== 'content-length' && name !== 'transfer-encoding') headers.set(name, Array.isArray(value) ? value.join(', ') : value);
      }
      headers.set('accept', 'application/json, text/event-stream');
      if (bridge.sdkVersionHeader === undefined) headers.delete('mcp-protocol-version');
      else headers.set('mcp-protocol-version', bridge.sdkVersionHeader);
      const response = await transport.handleRequest(new Request(`${issuer}${request.url}`, { method: 'POST', headers }), { parsedBody: request.body });
      await relay(reply, request, response);
    } finally {
      await server.close();
    }
  }

  app.post(
    MCP_PATH,
    {
      schema: {
        ...schema,
        summary: 'MCP tool endpoint (JSON-RPC 2.0, Streamable HTTP, stateless)',
        description:
          'Model Context Protocol requests (tools/list, tools/call, initialize, server/discover) with `Authorization: Bearer <OAuth access token for this resource>` ' +
          `or a personal API key. Protocol versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')} (MCP-Protocol-Version header). The reply is application/json ` +
          'or text/event-stream as the Accept header prefers. See docs/mcp.md for the tools.',
        body: { anyOf: [{ type: 'object' }, { type: 'array' }], description: 'A JSON-RPC 2.0 request or notification' },
        response: {
          200: {
            description: 'the JSON-RPC response (application/json) or an event stream ending with it (text/event-stream)',
            content: {
              'application/json': { schema: { type: 'object', additionalProperties: true } },
              'text/event-stream': { schema: { type: 'string' } },
            },
          },
          202: { description: 'a notification, accepted', type: 'null' },
          400: { description: 'an unsupported protocol version, a header that contradicts the body, or a malformed message', anyOf: [jsonRpcErrorSchema, errorReplySchema] },
          401: { description: 'no token, or an invalid, expired or foreign one (with WWW-Authenticate)', ...errorReplySchema },
          403: { description: "a foreign Origin, or a token whose scope lacks mcp (with WWW-Authenticate)", ...errorReplySchema },
          404: { description: 'a 2026-07-28 request for a method this server does not implement (-32601)', ...jsonRpcErrorSchema },
          406: { description: 'Accept names neither application/json nor text/event-stream', ...jsonRpcErrorSchema },
          413: { description: 'a body over server.body_limit', ...errorReplySchema },
          415: { description: 'a body that is not application/json', ...errorReplySchema },
        },
      },
    },
    async (request, reply) => {
      const issuer = issuerOf(context.config, request);
      const origin = header(request, 'origin');
      if (origin !== undefined && !originAllowed(origin, issuer)) return refuseOrigin(reply, origin);
      let principal: Principal;
      try {
        principal = await authenticateMcp(authentication, header(request, 'authorization'), { resource: mcpResourceUrl(issuer), metadata: protectedResourceMetadataUrl(issuer) });
      } catch (error) {
        if (!(error instanceof McpAuthRefusal)) throw error;
        return reply.status(error.status).header('www-authenticate', error.challenge).send({ error: error.error, message: error.message });
      }
      await serve(request, reply, principal, issuer);
      return reply;
    },
  );

  // A browser client's preflight: allowed origins may send the headers an MCP request carries.
  app.options(MCP_PATH, { schema: { tags: ['mcp'], summary: 'CORS preflight for a browser MCP client (an allowed Origin: 204)', response: { 204: { type: 'null', description: 'an allowed Origin: the CORS grant' }, 403: errorReply('an Origin that is not allowed') } } }, async (request, reply) => {
    const origin = header(request, 'origin');
    if (origin !== undefined && !originAllowed(origin, issuerOf(context.config, request))) return refuseOrigin(reply, origin);
    return reply
      .status(204)
      .header('allow', 'POST, OPTIONS')
      .header('access-control-allow-methods', 'POST')
      .header('access-control-allow-headers', 'Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID')
      .header('access-control-max-age', '86400')
      .send();
  });

  const methodNotAllowed = {
    ...schema,
    summary: 'Not supported: the MCP endpoint is stateless and takes POST only (405)',
    response: { 405: errorReply('always: send JSON-RPC by POST (Allow: POST)') },
  };
  for (const method of ['GET', 'DELETE', 'PUT', 'PATCH'] as const) {
    app.route({
      method,
      url: MCP_PATH,
      schema: methodNotAllowed,
      handler: async (_request, reply) =>
        reply.status(405).header('allow', 'POST').send({ error: 'method_not_allowed', message: `${method} is not supported: the endpoint is stateless, send JSON-RPC by POST` }),
    });
  }
};
