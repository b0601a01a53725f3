import { createHash } from 'node:crypto';
import type { Knex } from 'knex';

/** The signed 64-bit advisory-lock key of a projection's lock `name` (the first 8 bytes of a SHA-256). */
function lockKey(name: string): string {
  return createHash('sha256').update(`factlog.projection:${name}`).digest().readBigInt64BE(0).toString();
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
  await takeLocks(trx, names);
}

/**
 * The locks of a bus consumer's batch (src/projection/busRunner.ts): first the projection's own
 * key, shared so that its consumers on other partitions go on side by side, or exclusive when the
 * batch holds one of its `exclusiveTypes` (a merge moves rows that other streams' events write);
 * then one key per stream, so no two batches apply one stream's events at once (in a rebalance).
 * A batch waiting for the projection's key holds no stream's key.
 */
export async function lockProjectionStreams(trx: Knex.Transaction, projection: string, streams: readonly string[], exclusive: boolean): Promise<void> {
  await takeLocks(trx, streams.map((stream) => `${projection}/${stream}`), { name: projection, shared: !exclusive });
}

/** One statement: `lead` first (when given), then the exclusive locks of `names` in key order, and the plan_cache_mode. */
async function takeLocks(trx: Knex.Transaction, names: readonly string[], lead?: { name: string; shared: boolean }): Promise<void> {
  const keys = [...new Set(names.map(lockKey))];
  const locks = [...(lead ? [{ key: lockKey(lead.name), shared: lead.shared, rank: 0 }] : []), ...keys.map((key) => ({ key, shared: false, rank: 1 }))];
  if (locks.length === 0) return;
  // The aggregate takes the locks row by row from the sorted subquery.
  await trx.raw(
    `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
            count(CASE WHEN shared THEN pg_advisory_xact_lock_shared(key) ELSE pg_advisory_xact_lock(key) END)
       FROM (SELECT key, shared FROM unnest(?::bigint[], ?::boolean[], ?::int[]) AS lock(key, shared, rank) ORDER BY rank, key) AS sorted`,
    [locks.map((lock) => lock.key), locks.map((lock) => lock.shared), locks.map((lock) => lock.rank)],
  );
}
