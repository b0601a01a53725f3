import type { Knex } from 'knex';
import type { CredentialKind } from '../auth/rbac.js';
import { REPOSITORY_DOMAIN_PREFIX } from '../auth/rbac.js';

/**
 * The permission audit (docs/auth.md, "Permission audit"): every permission decision the
 * application layer takes for a REST route or an MCP tool, allowed or not, with who asked, with
 * which kind of credential, for what, where, through which operation and when.
 *
 * Decisions are buffered and written in multi-row INSERTs (every `flushIntervalMs` or each
 * `batchSize` rows), so auditing costs a request an array push, not a round trip. A crash loses at
 * most the last interval's rows; a database that refuses them keeps them buffered up to
 * `maxBuffered`, beyond which the oldest are dropped and counted in the log.
 */
export interface PermissionDecision {
  userId: string;
  credentialKind: CredentialKind;
  credentialId: string;
  permission: string;
  /** `system` or `repository:<id>`. */
  domain: string;
  allowed: boolean;
}

/**
 * What the audit records of the call a decision was taken in, as the transport that received it
 * names it (a call's context, src/app/callContext.ts, is one).
 */
export interface AuditedCall {
  transport: 'rest' | 'mcp' | 'cli' | 'web';
  /** `GET /api/v1/repositories/:repoID/facts`, `tool searchFacts`, `projections rebuild`. */
  operation: string;
  clientAddress?: string;
  /** The HTTP request id (also the correlation id of the events the call appends). */
  requestId?: string;
}

export interface PermissionAudit {
  /** Records a decision taken within `call` (the REST request or MCP tool call). */
  record(decision: PermissionDecision, call: AuditedCall): void;
  /** Writes every buffered decision now (before reading the audit, and at shutdown). */
  flush(): Promise<void>;
  /** Deletes rows older than the retention; returns how many went. */
  prune(): Promise<number>;
  /** Prunes now and then once a day until `close` (worker processes run it). */
  startRetention(): Promise<void>;
  close(): Promise<void>;
}

export interface AuditSettings {
  retentionDays: number;
  flushIntervalMs?: number;
  batchSize?: number;
  maxBuffered?: number;
}

const DAY_MS = 86_400_000;

interface AuditRow {
  occurred_at: Date;
  user_id: string;
  credential_kind: CredentialKind;
  credential_id: string;
  permission: string;
  domain: string;
  repository_id: string | null;
  allowed: boolean;
  transport: AuditedCall['transport'];
  operation: string;
  client_address: string | null;
  request_id: string | null;
}

export function createPermissionAudit(deps: { knex: Knex; log: { warn(object: object, message: string): void; info(object: object, message: string): void }; settings: AuditSettings }): PermissionAudit {
  const { knex, log, settings } = deps;
  const batchSize = settings.batchSize ?? 500;
  const maxBuffered = settings.maxBuffered ?? 100_000;
  let buffer: AuditRow[] = [];
  let writing: Promise<void> = Promise.resolve();
  let dropped = 0;
  const flushTimer = setInterval(() => void flush(), settings.flushIntervalMs ?? 1000);
  flushTimer.unref();
  let retentionTimer: NodeJS.Timeout | null = null;

  function flush(): Promise<void> {
    // One writer at a time, in order: a flush asked for while one runs waits for it, then writes what came since.
    writing = writing.then(async () => {
      while (buffer.length > 0) {
        const batch = buffer.slice(0, batchSize);
        try {
          await knex('permission_audit').insert(batch);
        } catch (error) {
          log.warn({ err: error, buffered: buffer.length }, 'permission audit rows could not be written; kept for the next flush');
          return;
        }
        buffer = buffer.slice(batch.length);
      }
      if (dropped > 0) {
        log.warn({ dropped }, 'permission audit rows were dropped: the buffer was full while the database refused writes');
        dropped = 0;
      }
    });
    return writing;
  }

  async function prune(): Promise<number> {
    const cutoff = new Date(Date.now() - settings.retentionDays * DAY_MS);
    // Counted in SQL: the PostgreSQL and PGlite drivers report a DELETE's row count differently.
    const result = await knex.raw<{ rows: Array<{ deleted: string | number }> }>(
      `WITH gone AS (DELETE FROM permission_audit WHERE occurred_at < ? RETURNING 1) SELECT count(*) AS deleted FROM gone`,
      [cutoff],
    );
    const deleted = Number(result.rows[0]?.deleted ?? 0);
    if (deleted > 0) log.info({ deleted, retentionDays: settings.retentionDays }, 'permission audit pruned');
    return deleted;
  }

  return {
    record(decision, call) {
      buffer.push({
        occurred_at: new Date(),
        user_id: decision.userId,
        credential_kind: decision.credentialKind,
        credential_id: decision.credentialId,
        permission: decision.permission,
        domain: decision.domain,
        repository_id: decision.domain.startsWith(REPOSITORY_DOMAIN_PREFIX) ? decision.domain.slice(REPOSITORY_DOMAIN_PREFIX.length) : null,
        allowed: decision.allowed,
        transport: call.transport,
        operation: call.operation,
        client_address: call.clientAddress ?? null,
        request_id: call.requestId ?? null,
      });
      if (buffer.length > maxBuffered) {
        dropped += buffer.length - maxBuffered;
        buffer = buffer.slice(buffer.length - maxBuffered);
      }
      if (buffer.length >= batchSize) void flush();
    },
    flush,
    prune,
    async startRetention() {
      if (retentionTimer) return;
      // Every node that runs workers prunes: a DELETE by age is the same whoever runs it, so no leader is needed.
      retentionTimer = setInterval(() => void prune().catch((error: unknown) => log.warn({ err: error }, 'pruning the permission audit failed; tried again tomorrow')), DAY_MS);
      retentionTimer.unref();
      await prune().catch((error: unknown) => log.warn({ err: error }, 'pruning the permission audit failed; tried again tomorrow'));
    },
    async close() {
      clearInterval(flushTimer);
      if (retentionTimer) clearInterval(retentionTimer);
      retentionTimer = null;
      await flush();
    },
  };
}
