import type { FastifyRequest } from 'fastify';
import { can, repositoryDomain, SYSTEM_DOMAIN, type Permission } from '../auth/rbac.js';
import type { Principal } from '../auth/identity.js';
import type { AppContext } from '../app/context.js';
import { forbidden, HttpError, notFound } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the authentication hook when a valid bearer token came with the request. */
    principal: Principal | null;
  }
}

export interface RepositoryRow {
  id: string;
  name: string;
  slug: string;
  description: string;
  preset: string;
  tier: string;
  accepted_promptset_hashes: string[];
  registry_id: string | null;
  created_by: string;
  created_at: Date | string;
  updated_at: Date | string;
  deleted_at: Date | string | null;
}

/** Resolves the bearer token of a request (if any) into `request.principal`. */
export async function authenticateRequest(context: AppContext, request: FastifyRequest): Promise<void> {
  request.principal = null;
  const header = request.headers.authorization;
  if (!header) return;
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw new HttpError(401, 'unauthorized', 'authorization header must be "Bearer <token>"');
  request.principal = await context.identity.authenticate(match[1]);
}

export function requireUser(request: FastifyRequest): Principal {
  if (!request.principal) throw new HttpError(401, 'unauthorized', 'authentication required');
  return request.principal;
}

export function requireSystemPermission(request: FastifyRequest, permission: Permission): Principal {
  const principal = requireUser(request);
  if (!can(principal.assignments, SYSTEM_DOMAIN, permission)) throw forbidden(`permission denied: ${permission}`);
  return principal;
}

/**
 * Loads a live repository by id or slug and checks the caller's permission on it. A missing or
 * deleted repository is 404; one the caller has no right to is 403 with nothing about its content.
 */
export async function requireRepository(
  context: AppContext,
  request: FastifyRequest,
  idOrSlug: string,
  permission: Permission,
): Promise<{ principal: Principal; repository: RepositoryRow }> {
  const principal = requireUser(request);
  const repository: RepositoryRow | undefined = await context.db
    .knex('repositories')
    .whereNull('deleted_at')
    .where((query) => query.where('id', idOrSlug).orWhere('slug', idOrSlug))
    .first();
  if (!repository) throw notFound('repository');
  if (!can(principal.assignments, repositoryDomain(repository.id), permission)) {
    throw forbidden(`permission denied: ${permission}`);
  }
  return { principal, repository };
}

/** Metadata for events a request appends: the caller is the actor, the request id the correlation. */
export function requestMetadata(request: FastifyRequest, principal: Principal, repositoryId: string | null) {
  return { repositoryId, actor: principal.userId, causationId: null, correlationId: String(request.id) };
}
