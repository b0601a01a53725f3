import { createHash } from 'node:crypto';
import type { Knex } from 'knex';

/** A signed 64-bit advisory-lock key for `name` (the first 8 bytes of its SHA-256). */
function lockKey(name: string): string {
  return createHash('sha256').update(name).digest().readBigInt64BE(0).toString();
}

/**
 * Serialises the batches of projection runners with transaction-scoped advisory locks, one per
 * key (a projection, or a projection's stream), taken in one statement in key order so two
 * runners never wait on each other crosswise.
 *
 * A lock, not `SELECT … FOR UPDATE` on the checkpoint rows: a row lock gives the transaction an
 * id at once, and a batch that writes elsewhere first (the OpenSearch search index) would then
 * hold that id across its network calls. On a PostgreSQL server every running transaction id
 * holds back the event store's global readers (docs/architecture.md, "Gap-free reading"), so
 * the batch takes an id only when it writes its first row.
 *
 * The same statement sets the transaction's `plan_cache_mode` to `force_generic_plan`: its
 * statements go as named prepared statements (src/db/serverPrepared.ts), and a generic plan is
 * then made once per connection instead of a custom one at each of a statement's first five runs
 * (a rebuild's statements rarely run more often than that on one connection of the pool). The
 * read models' statements take their rows from `jsonb_to_recordset` and arrays of keys, whose
 * values a custom plan cannot use anyway.
 */
export async function lockProjectionKeys(trx: Knex.Transaction, names: readonly string[]): Promise<void> {
  const keys = [...new Set(names.map((name) => `factlog.projection:${name}`).map(lockKey))];
  if (keys.length === 0) return;
  // The aggregate takes the locks row by row from the sorted subquery, so in key order.
  await trx.raw(
    `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), count(pg_advisory_xact_lock(key))
       FROM (SELECT key FROM unnest(?::bigint[]) AS key ORDER BY key) AS sorted`,
    [keys],
  );
}
