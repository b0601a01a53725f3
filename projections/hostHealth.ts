import type { Knex } from 'knex';

import type { Projection } from '../src/projection/types.js';
import { parseStreamName, type RecordedEvent } from '../src/eventstore/envelope.js';
import { hostOfUrl, isAutoSkipReason } from '../src/providers/fetch/hostHealth.js';

/**
 * Read model `host_health`: retrieve_source outcomes per host, for auto-skip
 * (src/providers/fetch/hostHealth.ts). SourceFetched counts as a success, SourceFailed of stage
 * retrieve_source as a failure; failures that are auto-skips themselves do not count (the host
 * was not asked), nor do sources without a host of their own (uploads; DOIs, whose resolver
 * redirects to many publishers).
 *
 * The host: `data.host` when the event carries one (null: nothing to count); otherwise the
 * host of the source's registered URL, read from the `sources` read model.
 */
export const hostHealthProjection: Projection = {
  name: 'host-health',
  eventTypes: ['SourceFetched', 'SourceFailed'],
  tables: ['host_health'],
  async apply(trx, recorded) {
    let failed: boolean;
    let reason: string | null = null;
    if (recorded.type === 'SourceFetched') {
      failed = false;
    } else if (recorded.type === 'SourceFailed') {
      if (recorded.data.stage !== 'retrieve_source') return;
      reason = typeof recorded.data.reason === 'string' ? recorded.data.reason : '';
      if (isAutoSkipReason(reason)) return;
      failed = true;
    } else {
      return;
    }
    const host = await hostOf(trx, recorded);
    if (!host) return;
    await trx.raw(
      `INSERT INTO host_health (host, attempts, failures, last_failure_at, last_error, updated_at)
       VALUES (?, 1, ?, ?, ?, ?)
       ON CONFLICT (host) DO UPDATE SET
         attempts = host_health.attempts + 1,
         failures = host_health.failures + EXCLUDED.failures,
         last_failure_at = COALESCE(EXCLUDED.last_failure_at, host_health.last_failure_at),
         last_error = COALESCE(EXCLUDED.last_error, host_health.last_error),
         updated_at = EXCLUDED.updated_at`,
      [host, failed ? 1 : 0, failed ? recorded.occurredAt : null, failed ? (reason ?? '').slice(0, 2000) : null, recorded.occurredAt],
    );
  },
};

async function hostOf(trx: Knex.Transaction, recorded: RecordedEvent): Promise<string | null> {
  if ('host' in recorded.data) {
    const host = recorded.data.host;
    return typeof host === 'string' && host !== '' ? host.toLowerCase() : null;
  }
  const sourceId = parseStreamName(recorded.streamId).id;
  if (!sourceId) return null;
  const source = (await trx('sources').where({ id: sourceId }).first('origin', 'url')) as { origin: string; url: string | null } | undefined;
  return source?.origin === 'url' ? hostOfUrl(source.url) : null;
}
