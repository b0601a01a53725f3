import type { Knex } from 'knex';
import type { AppContext } from '../app/appContext.js';
import { authorizeRepository, authorizeSystem } from '../app/access.js';
import { invalid } from '../app/errors.js';
import { isKnownPermission, type CredentialKind, type Principal } from '../auth/rbac.js';
import { isoTimestampOrNull, utcMicrosecondsText } from '../db/timestamps.js';
import { countOf, decodeAuditCursor, encodeAuditCursor, pageOf, type PageInput } from './paging.js';

/** What the audit lists can be narrowed to; every filter is optional and they combine with AND. */
export interface AuditFilters extends PageInput {
  user_id?: string;
  credential_kind?: CredentialKind;
  permission?: string;
  allowed?: boolean;
  transport?: 'rest' | 'mcp' | 'cli' | 'web';
  /** RFC 3339; rows at or after. */
  since?: string;
  /** RFC 3339; rows before. */
  until?: string;
  /** The `next_cursor` of the previous page (not with `offset`): the rows after its last one. */
  cursor?: string;
}

interface AuditRow {
  id: string | number;
  occurred_at: Date | string;
  user_id: string;
  credential_kind: string;
  credential_id: string;
  permission: string;
  domain: string;
  repository_id: string | null;
  allowed: boolean;
  transport: string;
  operation: string;
  client_address: string | null;
  request_id: string | null;
}

const instant = (name: string, value: string): Date => {
  const parsed = new Date(value);
  if (Number.isNaN(parsed.getTime())) throw invalid(`${name} must be an RFC 3339 date-time`);
  return parsed;
};

function filtered(query: Knex.QueryBuilder, filters: AuditFilters): Knex.QueryBuilder {
  const since = filters.since === undefined ? undefined : instant('since', filters.since);
  const until = filters.until === undefined ? undefined : instant('until', filters.until);
  // An inverted range holds no row today or ever: an auditor's swapped dates, not an empty history.
  if (since !== undefined && until !== undefined && since > until) throw invalid('since must not be after until');
  // Every row's permission is a catalog name (decisions are typed by it), so another value is a
  // typo that would list nothing, which reads as "nobody tried" rather than "misspelt".
  if (filters.permission !== undefined && !isKnownPermission(filters.permission)) {
    throw invalid(`unknown permission '${filters.permission}': permissions are object:action pairs from GET /api/v1/admin/permissions`);
  }
  if (filters.user_id !== undefined) query.where('user_id', filters.user_id);
  if (filters.credential_kind !== undefined) query.where('credential_kind', filters.credential_kind);
  if (filters.permission !== undefined) query.where('permission', filters.permission);
  if (filters.allowed !== undefined) query.where('allowed', filters.allowed);
  if (filters.transport !== undefined) query.where('transport', filters.transport);
  if (since !== undefined) query.where('occurred_at', '>=', since);
  if (until !== undefined) query.where('occurred_at', '<', until);
  return query;
}

/**
 * The permission audit, newest first: the whole service's (`audit:read`, system) or one
 * repository's (`members:read`). Buffered decisions are written first, so a node lists
 * every decision it took up to the call (including the one that lets the caller read it).
 */
export function auditQueries(deps: Pick<AppContext, 'db' | 'audit'>) {
  const knex = deps.db.knex;
  const list = async (query: Knex.QueryBuilder, filters: AuditFilters) => {
    const page = pageOf(filters, 50);
    const after = decodeAuditCursor(filters.cursor);
    if (after !== null && page.offset > 0) throw invalid('cursor and offset do not combine: the cursor says where the page starts');
    filtered(query, filters);
    await deps.audit.flush();
    const total = await countOf(query);
    if (after !== null) query.whereRaw('(occurred_at, id) < (?::timestamptz, ?::bigint)', [after.at, after.id]);
    // One row past the page says whether there is a next one.
    const rows: Array<AuditRow & { cursor_at: string }> = await query
      .select('*', knex.raw(`${utcMicrosecondsText('occurred_at')} AS cursor_at`))
      .orderBy([{ column: 'occurred_at', order: 'desc' }, { column: 'id', order: 'desc' }])
      .limit(page.limit + 1)
      .offset(page.offset);
    const items = rows.slice(0, page.limit);
    const last = items.at(-1);
    const next_cursor = rows.length > page.limit && last !== undefined ? encodeAuditCursor({ at: last.cursor_at, id: String(last.id) }) : null;
    return { items: items.map(({ cursor_at: _cursorAt, ...row }) => ({ ...row, id: String(row.id), occurred_at: isoTimestampOrNull(row.occurred_at) })), total, next_cursor };
  };
  return {
    async listAudit(principal: Principal, filters: AuditFilters = {}) {
      authorizeSystem(principal, 'audit:read');
      return list(knex('permission_audit'), filters);
    },

    async listRepositoryAudit(principal: Principal, input: AuditFilters & { repository: string }) {
      const { repository: idOrSlug, ...filters } = input;
      const repository = await authorizeRepository(knex, principal, idOrSlug, 'members:read');
      return list(knex('permission_audit').where('repository_id', repository.id), filters);
    },
  };
}
