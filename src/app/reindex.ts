import type { Database } from '../db/database.js';
import type { EventStore } from '../eventstore/port.js';
import type { OpenSearchSearchIndex } from '../search/opensearch.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';

/**
 * Replays the log into new OpenSearch indices (one per search collection) and moves their aliases
 * in one step: readers keep their answers from the old indices until the switch, so there is no
 * downtime. Run it where the
 * search-index projection runs (a worker), so live writes reach both indices meanwhile.
 */
export async function reindexSearch(
  deps: { store: EventStore; db: Database; search: OpenSearchSearchIndex },
  onProgress?: (done: number, total: number) => void,
): Promise<{ events: number }> {
  let applied = 0;
  await deps.search.rebuildIndex(async (target) => {
    const projection = createSearchIndexProjection(target);
    const total = await deps.store.headPosition();
    onProgress?.(0, total); // started: the new index is made
    let after = 0;
    for (;;) {
      const batch = await deps.store.readAll({ after, limit: 500, types: projection.eventTypes });
      if (batch.length === 0) break;
      // The projection writes to OpenSearch, not the database; the transaction only satisfies its signature.
      await deps.db.knex.transaction(async (trx) => {
        for (const event of batch) await projection.apply(trx, event);
      });
      applied += batch.length;
      after = batch[batch.length - 1].globalPosition;
      onProgress?.(Math.min(after, total), total);
    }
  });
  return { events: applied };
}
