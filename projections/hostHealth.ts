import type { Knex } from 'knex';
import { projection } from '../src/projection/types.js';
import type { RecordedOf } from '../src/projection/types.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { hostOfUrl, isAutoSkipReason, isHostFailure } from '../src/providers/fetch/hostHealth.js';
import { boundedErrorMessage } from '../src/util/errorMessage.js';

type Handled = Extract<SourceEvent, { type: 'SourceRegistered' | 'SourceFetched' | 'SourceFailed' }>;
type Outcome = { sourceId: string; failed: boolean; reason: string | null; at: string };

/** The host of each source id, from this projection's own `host_health_sources`. */
async function hostsOf(trx: Knex.Transaction, sourceIds: readonly string[]): Promise<Map<string, string>> {
  if (sourceIds.length === 0) return new Map();
  const rows = (await trx('host_health_sources').whereIn('source_id', [...new Set(sourceIds)]).select('source_id', 'host')) as Array<{
    source_id: string;
    host: string;
  }>;
  return new Map(rows.map((row) => [row.source_id, row.host]));
}

/** Counts a run of outcomes, one upsert per host (in log order, so the last error is the latest). */
async function countOutcomes(trx: Knex.Transaction, outcomes: readonly Outcome[]): Promise<void> {
  const hosts = await hostsOf(trx, outcomes.map((outcome) => outcome.sourceId));
  const totals = new Map<string, { host: string; attempts: number; failures: number; last_failure_at: string | null; last_error: string | null; updated_at: string }>();
  for (const outcome of outcomes) {
    const host = hosts.get(outcome.sourceId);
    if (!host) continue;
    const total = totals.get(host) ?? { host, attempts: 0, failures: 0, last_failure_at: null, last_error: null, updated_at: outcome.at };
    total.attempts += 1;
    total.updated_at = outcome.at;
    if (outcome.failed) {
      total.failures += 1;
      total.last_failure_at = outcome.at;
      // Bounded as the reason was (2,000 characters, code points): a cut at 2,000 UTF-16 units
      // halved an emoji there, and jsonb refused the lone half (the projection stopped).
      total.last_error = boundedErrorMessage(outcome.reason ?? '');
    }
    totals.set(host, total);
  }
  if (totals.size === 0) return;
  await trx.raw(
    `INSERT INTO host_health (host, attempts, failures, last_failure_at, last_error, updated_at)
     SELECT * FROM jsonb_to_recordset(?::jsonb)
       AS r(host text, attempts int, failures int, last_failure_at timestamptz, last_error text, updated_at timestamptz)
     ON CONFLICT (host) DO UPDATE SET
       attempts = host_health.attempts + EXCLUDED.attempts,
       failures = host_health.failures + EXCLUDED.failures,
       last_failure_at = COALESCE(EXCLUDED.last_failure_at, host_health.last_failure_at),
       last_error = COALESCE(EXCLUDED.last_error, host_health.last_error),
       updated_at = EXCLUDED.updated_at`,
    [JSON.stringify([...totals.values()])],
  );
}

const sourceIdOf = (event: RecordedOf<Handled>) => parseStreamName(event.streamId).id;

/**
 * Read model `host_health`: retrieve_source outcomes per host, for auto-skip
 * (src/providers/fetch/hostHealth.ts). SourceFetched counts as a success, SourceFailed of stage
 * retrieve_source as an attempt, a failure when it speaks of the host (isHostFailure: no answer,
 * a 5xx; not a missing page); failures that are auto-skips themselves do not count (the host
 * was not asked), nor do sources without a host of their own (uploads; DOIs, whose resolver
 * redirects to many publishers).
 *
 * The host of a source is that of its registered URL, kept in the projection's own table
 * `host_health_sources` from SourceRegistered: it reads no other projection's table, so it
 * counts alike whether `sources` is ahead, behind or being rebuilt.
 */
export const hostHealthProjection = projection<Handled>({
  name: 'host-health',
  tables: ['host_health', 'host_health_sources'],
  // A source is registered before it is fetched, and sources are counted independently: runs of
  // registrations and fetches may be applied registrations first.
  batchTogether: [['SourceRegistered', 'SourceFetched']],
  handlers: {
    async SourceRegistered(trx, events) {
      const rows = new Map<string, { source_id: string; host: string }>();
      for (const event of events) {
        const host = event.data.origin === 'url' ? hostOfUrl(event.data.url) : null;
        const sourceId = sourceIdOf(event);
        if (host && sourceId && !rows.has(sourceId)) rows.set(sourceId, { source_id: sourceId, host });
      }
      if (rows.size > 0) await trx('host_health_sources').insert([...rows.values()]).onConflict('source_id').ignore();
    },
    async SourceFetched(trx, events) {
      await countOutcomes(trx, events.map((event) => ({ sourceId: sourceIdOf(event), failed: false, reason: null, at: event.occurredAt })));
    },
    async SourceFailed(trx, events) {
      const outcomes = events
        .filter((event) => event.data.stage === 'retrieve_source' && !isAutoSkipReason(event.data.reason))
        .map((event) => ({ sourceId: sourceIdOf(event), failed: isHostFailure(event.data.reason), reason: event.data.reason, at: event.occurredAt }));
      if (outcomes.length > 0) await countOutcomes(trx, outcomes);
    },
  },
});
