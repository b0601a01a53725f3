import { coalescer } from '../../db/coalesce.js';
import type { Knex } from 'knex';

import { isTransientFetchFailure, type AutoSkipSettings } from './http.js';

/**
 * Per-host auto-skip (spec `providers.resolution.auto_skip`): a host that failed most of its
 * recent retrieve_source outcomes is not fetched for a cooldown. The outcomes come from the log
 * (read model `host_health`, projection `host-health`), so every worker decides alike and a
 * restart forgets nothing.
 */

/** One row of the `host_health` read model. */
export interface HostHealthRecord {
  host: string;
  /** retrieve_source outcomes on the host (fetched or failed). */
  attempts: number;
  failures: number;
  /** ISO 8601 time of the last failure, or null. */
  lastFailureAt: string | null;
  lastError: string | null;
}

export interface HostHealthReader {
  get(host: string): Promise<HostHealthRecord | null>;
}

/** What auto-skip decided against a host. */
export interface AutoSkipDecision {
  host: string;
  attempts: number;
  failures: number;
  /** ISO 8601 (seconds precision) end of the cooldown. */
  until: string;
  /** The SourceFailed reason: starts with AUTO_SKIP_REASON_PREFIX. */
  reason: string;
}

/**
 * Every auto-skip failure reason starts with this. The host-health projection does not count
 * such failures: a skip is not an outcome of the host, and counting it would keep the host
 * skipped for ever.
 */
export const AUTO_SKIP_REASON_PREFIX = 'auto-skipped:';

export function isAutoSkipReason(reason: string | null | undefined): boolean {
  return typeof reason === 'string' && reason.startsWith(AUTO_SKIP_REASON_PREFIX);
}

/**
 * Whether a retrieve_source failure speaks of its host rather than of its page: a fetch that
 * failed transiently (no answer, a timeout, a 5xx, a 429: isTransientFetchFailure) does.
 * A 404 or 410, content that is no document, a refused redirect do not: the host answered, and
 * counting them let anyone who may add sources have a healthy host skipped for every repository
 * with a hundred missing pages (QA). An auto-skip is no outcome of the host at all.
 */
export function isHostFailure(reason: string | null | undefined): boolean {
  return typeof reason === 'string' && !isAutoSkipReason(reason) && isTransientFetchFailure(reason);
}

/** The host (`name[:port]`, lower case) of an http(s) URL; null for anything else. */
export function hostOfUrl(url: string | null | undefined): string | null {
  if (!url) return null;
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return null;
    return parsed.host.toLowerCase() || null;
  } catch {
    return null;
  }
}

function isoSeconds(epochMs: number): string {
  return new Date(epochMs).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function percent(ratio: number): string {
  return `${Math.round(ratio * 1000) / 10}%`;
}

/**
 * Whether to skip `record`'s host now: auto-skip enabled, at least `minSample` outcomes, a
 * failure ratio at or above `failureThreshold`, and the last failure within `cooldownMs`. After
 * the cooldown the next fetch goes through as a probe: its failure closes the host for another
 * cooldown, successes wear the ratio down.
 */
export function autoSkipDecision(record: HostHealthRecord | null, settings: AutoSkipSettings, nowMs: number): AutoSkipDecision | null {
  if (!settings.enabled || !record || record.attempts <= 0) return null;
  if (record.attempts < settings.minSample) return null;
  const ratio = record.failures / record.attempts;
  if (ratio < settings.failureThreshold) return null;
  if (!record.lastFailureAt) return null;
  const lastFailure = Date.parse(record.lastFailureAt);
  if (Number.isNaN(lastFailure)) return null;
  const until = lastFailure + settings.cooldownMs;
  if (nowMs >= until) return null;
  const untilIso = isoSeconds(until);
  return {
    host: record.host,
    attempts: record.attempts,
    failures: record.failures,
    until: untilIso,
    reason:
      `${AUTO_SKIP_REASON_PREFIX} host ${record.host} failed ${record.failures} of ${record.attempts} fetches ` +
      `(≥ ${percent(settings.failureThreshold)}); skipping until ${untilIso}`,
  };
}

function toIso(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.toISOString();
  const parsed = Date.parse(String(value));
  return Number.isNaN(parsed) ? null : new Date(parsed).toISOString();
}

type HostHealthRow = { host: string; attempts: number | string; failures: number | string; last_failure_at: unknown; last_error: string | null };

interface HostHealthCall {
  host: string;
  resolve(record: HostHealthRecord | null): void;
  reject(error: unknown): void;
}

/**
 * Reads `host_health` rows (read-model database). The reads that arrive while one is out go
 * together as one statement (src/db/coalesce.ts): every source a retrieve_source group fetches
 * asks about its host.
 */
export function createHostHealthReader(knex: Knex): HostHealthReader {
  const queue = coalescer<HostHealthCall>(async (batch) => {
    const hosts = [...new Set(batch.map(({ host }) => host))];
    const rows = (await knex('host_health').whereIn('host', hosts)) as HostHealthRow[];
    const byHost = new Map(rows.map((row) => [row.host, row]));
    for (const call of batch) {
      const row = byHost.get(call.host);
      call.resolve(row ? { host: row.host, attempts: Number(row.attempts), failures: Number(row.failures), lastFailureAt: toIso(row.last_failure_at), lastError: row.last_error } : null);
    }
  });
  return {
    get: (host) => new Promise((resolve, reject) => queue({ host: host.toLowerCase(), resolve, reject })),
  };
}
