import type { FastifyRequest } from 'fastify';
import type { Principal } from '../auth/rbac.js';
import type { AppContext } from '../app/appContext.js';
import type { Trace } from '../app/access.js';
import { HttpError } from './errors.js';
import { MCP_PATH } from '../auth/oauth/resource.js';
import { takesBearerToken } from './schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the authentication hook when a valid bearer token came with the request. */
    principal: Principal | null;
  }
}

/** Resolves the bearer token of a request (if any) into `request.principal`. */
export async function authenticateRequest(context: AppContext, request: FastifyRequest): Promise<void> {
  request.principal = null;
  // The MCP endpoint takes OAuth access tokens and answers with its own challenges (src/mcp/auth.ts).
  if (request.routeOptions.url === MCP_PATH) return;
  // A route the OpenAPI document lists without `security` (health, metrics, sign-in, discovery,
  // the authorization server's endpoints) serves anyone: a stale token a client sends along is
  // ignored, not a 401 that would keep it from signing in again or a probe from seeing the
  // service live (the token and revocation endpoints refuse any Authorization header themselves).
  if (!takesBearerToken(request.routeOptions.schema)) return;
  const header = request.headers.authorization;
  if (!header) return;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw new HttpError(401, 'unauthorized', 'authorization header must be "Bearer <token>"');
  request.principal = await context.identity.authenticate(match[1]);
}

/** The caller of a request, or 401: permissions are the application layer's to check (src/app/access.ts). */
export function requireUser(request: FastifyRequest): Principal {
  if (!request.principal) throw new HttpError(401, 'unauthorized', 'authentication required');
  return request.principal;
}

/** The request id correlates the events a request appends. */
export const traceOf = (request: FastifyRequest): Trace => ({ correlationId: String(request.id) });
