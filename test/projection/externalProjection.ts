import type { Projection } from '../../src/projection/types.js';

/**
 * A projection that writes no rows (as the OpenSearch search index writes elsewhere): for each
 * event it records the transaction id its batch holds at that moment, or null when it has none.
 */
export function externalProjection(): Projection & { seen: Array<string | null> } {
  const seen: Array<string | null> = [];
  return {
    name: 'external',
    eventTypes: ['ThingHappened'],
    tables: [],
    seen,
    async apply(trx) {
      const result = (await trx.raw('SELECT pg_current_xact_id_if_assigned()::text AS xid')) as { rows: Array<{ xid: string | null }> };
      seen.push(result.rows[0]?.xid ?? null);
    },
  };
}
