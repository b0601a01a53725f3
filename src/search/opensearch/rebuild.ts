import type { Client } from '@opensearch-project/opensearch';
import type { SearchIndex, SearchLogger } from '../port.js';
import { describe, sleep } from './client.js';
import type { IndexFamily } from './indices.js';

export interface RebuildResult {
  /** Per collection name: the index behind its alias before (null: none) and after. */
  indices: Record<string, { previous: string | null; current: string }>;
  /** Documents the fill indexed into the new indices. */
  written: number;
}

/**
 * Builds a new versioned index of every family, lets `fill` write into them through `target`
 * (a SearchIndex over the new indices), then moves every alias in one atomic request and deletes
 * the old indices after `retireDelayMs`. Readers keep the old indices until the switch; live
 * writes reach the new ones too (the families' rebuild targets). If anything fails, the new
 * indices are deleted and the aliases stay where they were.
 */
export async function rebuildFamilies(settings: {
  client: Client;
  log: SearchLogger;
  retireDelayMs: number;
  families: readonly IndexFamily[];
  /** The SearchIndex reading and writing the given new index of each family. */
  viewOf: (next: ReadonlyMap<IndexFamily, string>) => SearchIndex;
  fill: (target: SearchIndex) => Promise<void>;
}): Promise<RebuildResult> {
  const { client, log, families } = settings;
  const created = new Map<IndexFamily, string>();
  const aliases = families.map((family) => family.alias);
  try {
    const previous = new Map<IndexFamily, string[]>();
    for (const family of families) previous.set(family, await family.indicesBehindAlias());
    for (const family of families) {
      // No refreshes while filling: faster bulk loads; the indices are refreshed once before the switch.
      created.set(family, await family.createVersionedIndex(false, { refresh_interval: '-1' }));
    }
    const next = [...created.values()];
    log.info({ indices: next, aliases }, 'search index rebuild started');
    for (const [family, index] of created) family.rebuildTargets.add(index);
    let written = 0;
    // Its searches see what was refreshed: refreshes are off until the fill ends.
    const target = settings.viewOf(created);
    const counting: SearchIndex = {
      ...target,
      async index(collection, docs) {
        await target.index(collection, docs);
        written += docs.length;
      },
    };
    await settings.fill(counting);
    for (const index of next) {
      await client.indices.putSettings({ index, body: { index: { refresh_interval: '1s' } } });
      await client.indices.refresh({ index });
    }
    // One atomic request for every alias: readers see the old indices or the new ones, never neither.
    await client.indices.updateAliases({
      body: {
        actions: [
          ...families.flatMap((family) => (previous.get(family) ?? []).map((old) => ({ remove: { index: old, alias: family.alias } }))),
          ...[...created].map(([family, index]) => ({ add: { index, alias: family.alias } })),
        ],
      },
    });
    for (const [family, index] of created) family.switched(index);
    const switched = new Map(created);
    created.clear();
    log.info({ indices: next, aliases, written }, 'search index rebuilt; aliases switched');
    const retired = families.flatMap((family) => previous.get(family) ?? []);
    if (retired.length > 0) {
      // Searches that resolved an alias just before the switch may still be running there.
      await sleep(settings.retireDelayMs);
      await client.indices.delete({ index: retired.join(','), ignore_unavailable: true });
    }
    const indices = Object.fromEntries(
      [...switched].map(([family, index]) => [family.collection.name, { previous: previous.get(family)?.[0] ?? null, current: index }]),
    );
    return { indices, written };
  } catch (error) {
    for (const [family, index] of created) {
      family.rebuildTargets.delete(index);
      const switched = (await family.indicesBehindAlias().catch(() => [] as string[])).includes(index);
      if (!switched) {
        await client.indices.delete({ index, ignore_unavailable: true }).catch((cleanupError: unknown) => {
          log.warn({ index, error: describe(cleanupError) }, 'could not delete the index of a failed rebuild');
        });
      }
    }
    log.error({ aliases, error: describe(error) }, 'search index rebuild failed; the aliases still point at the old indices');
    throw error;
  }
}
