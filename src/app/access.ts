import type { Knex } from 'knex';
import { principalCan, principalSeesRepository, repositoryDomain, SYSTEM_DOMAIN, type Permission, type Principal } from '../auth/rbac.js';
import type { RepositoryEvent } from '../domain/repository/decider.js';
import type { EventMetadata } from '../eventstore/envelope.js';
import { currentCall } from './callContext.js';
import { forbidden, notFound } from './errors.js';

/**
 * The access checks of the application layer: every query and command takes the caller's
 * Principal and checks it here once, whichever transport (REST, MCP, CLI) it came through.
 */

type RepositoryFields = Extract<RepositoryEvent, { type: 'RepositoryCreated' }>['data'];

/** A row of the `repositories` read model: the fields of RepositoryCreated, kept current, and bookkeeping. */
export interface RepositoryRow extends RepositoryFields {
  id: string;
  created_by: string;
  created_at: Date | string;
  updated_at: Date | string;
  deleted_at: Date | string | null;
}

/** Where a call came from, for the events it appends (the HTTP request id, an MCP call id). */
export interface Trace {
  correlationId?: string | null;
}

export function authorizeSystem(principal: Principal, permission: Permission): void {
  authorize(principal, SYSTEM_DOMAIN, permission);
}

/**
 * Throws unless the principal holds `permission` on the repository: `forbidden` when it holds
 * some other permission there, `not_found` (as for a missing repository) when it holds none, so
 * that an id or slug tells a stranger nothing (docs/api.md, "Errors").
 */
export function authorizeInRepository(principal: Principal, repositoryId: string, permission: Permission): void {
  authorize(principal, repositoryDomain(repositoryId), permission);
}

/** The one place a permission is decided: the decision goes to the call's permission audit, then a refusal is thrown. */
function authorize(principal: Principal, domain: string, permission: Permission): void {
  const allowed = principalCan(principal, domain, permission);
  const call = currentCall();
  call?.audit?.record(
    { userId: principal.userId, credentialKind: principal.credential.kind, credentialId: principal.credential.id, permission, domain, allowed },
    call,
  );
  if (!allowed) {
    if (domain !== SYSTEM_DOMAIN && !principalSeesRepository(principal, domain)) throw notFound('repository');
    throw forbidden(`permission denied: ${permission}`);
  }
  if (call) (call.granted ??= []).push({ principal, domain, permission });
}

/**
 * Loads a live repository by id or slug and checks the caller's permission on it. A missing or
 * deleted repository is `not_found`, and so is one the caller may see nothing of; one the caller
 * sees but may not do this in is `forbidden`, with nothing about its content.
 */
export async function authorizeRepository(knex: Knex, principal: Principal, idOrSlug: string, permission: Permission): Promise<RepositoryRow> {
  const repository = await findRepository(knex, idOrSlug);
  authorizeInRepository(principal, repository.id, permission);
  return repository;
}

/**
 * A live repository by id or slug, or `not_found`. No permission is checked: callers check their
 * own. An id wins over a slug (slugs shaped like ids are refused, but older events may hold one).
 */
export async function findRepository(knex: Knex, idOrSlug: string): Promise<RepositoryRow> {
  const repository: RepositoryRow | undefined = await knex('repositories')
    .whereNull('deleted_at')
    .where((query) => query.where('id', idOrSlug).orWhere('slug', idOrSlug))
    .orderByRaw('id = ? DESC', [idOrSlug])
    .first();
  if (!repository) throw notFound('repository');
  return repository;
}

/** Metadata for the events a call appends: the caller is the actor. */
export function commandMetadata(principal: Principal, repositoryId: string | null, trace: Trace = {}): EventMetadata {
  return { repositoryId, actor: principal.userId, causationId: null, correlationId: trace.correlationId ?? null };
}
