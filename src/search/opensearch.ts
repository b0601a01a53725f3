import { Client } from '@opensearch-project/opensearch';
import type { HitOf, IndexedDocument, SearchCollection } from './collection.js';
import { searchCollections } from './collections/index.js';
import {
  collectionRegistry,
  hitFrom,
  matchesNothing,
  normaliseDocuments,
  normaliseUpdates,
  knnAnswerOf,
  silentSearchLogger,
  validateDimensions,
  validateKnnQuery,
  validateRemoval,
  validateRepositoryRemoval,
  validateSearchQuery,
  type KnnQuery,
  type SearchIndex,
  type SearchLogger,
} from './port.js';
import { removalActions, updateActions, upsertActions, type WriteTarget } from './opensearch/bulk.js';
import { createIndexFamily, type IndexFamily } from './opensearch/indices.js';
import { cosineOf, knnBody, searchBody } from './opensearch/query.js';
import { rebuildFamilies, type RebuildResult } from './opensearch/rebuild.js';

export { SearchIndexWriteError } from './opensearch/client.js';
export { websearchToSimpleQueryString } from './opensearch/query.js';
export type { RebuildResult } from './opensearch/rebuild.js';

/**
 * The distributed tier's search on OpenSearch (docs/search.md).
 *
 * Layout: one family of versioned indices per collection, shared by all repositories: facts in
 * `<prefix>-facts-v<N>` behind the alias `<prefix>-facts`, concepts in `<prefix>-concepts-v<N>`
 * behind `<prefix>-concepts`; every query filters on the `repository_id` keyword. Thousands of
 * small repositories would otherwise mean thousands of indices (each with shards, mappings and
 * HNSW graphs to keep in cluster state), and a rebuild becomes one alias swap instead of one per
 * repository.
 *
 * The parts: `opensearch/indices.ts` (index management per collection), `mappings.ts` (a
 * collection's mapping), `query.ts` (query bodies), `bulk.ts` (scripts and bulk writes),
 * `rebuild.ts` (the alias rebuild); this file puts them together as a SearchIndex.
 */

export interface OpenSearchIndexOptions {
  /** URL(s) of the cluster, e.g. http://127.0.0.1:19200. */
  node: string | string[];
  /** Lowercase name prefix: aliases `<prefix>-<collection>`, indices `<alias>-v<N>`. */
  indexPrefix: string;
  /** Dimension of the `embedding` knn_vector fields (the embedding model's output size). */
  dimensions: number;
  log?: SearchLogger;
  /**
   * Refresh after writes: false (default; visible within the index's refresh interval, ~1 s),
   * 'wait_for' (return once visible) or true (force a refresh; tests).
   */
  refresh?: boolean | 'wait_for';
  /** Shards and replicas of newly created indices (defaults 1 and 0: a single node). */
  shards?: number;
  replicas?: number;
  /** Documents per bulk request (default 500). */
  bulkBatchSize?: number;
  /** Per-request timeout (default 30 s). */
  requestTimeoutMs?: number;
  /** How long a replaced index stays after the alias moved, for searches already running on it (default 1 s). */
  retireDelayMs?: number;
  /** The collections served (default: `searchCollections`, `collections/index.ts`). */
  collections?: readonly SearchCollection[];
}

export interface OpenSearchSearchIndex extends SearchIndex {
  /** The alias readers and writers of a collection use. */
  aliasOf(collection: SearchCollection): string;
  /**
   * Creates the versioned index and alias of every collection if missing and migrates older
   * mappings; returns the index behind each alias, by collection name.
   */
  ensureIndices(): Promise<Record<string, string>>;
  /**
   * Builds a new versioned index of every collection, lets `fill` write every document into them
   * through `target` (a SearchIndex over the new indices: replay the log through the
   * search-index projection), then moves every alias in one atomic step and deletes the old
   * indices. Readers keep getting answers from the old indices until the switch. Writes this
   * adapter makes meanwhile go to both generations.
   */
  rebuildIndex(fill: (target: SearchIndex) => Promise<void>): Promise<RebuildResult>;
  close(): Promise<void>;
}

export function createOpenSearchIndex(options: OpenSearchIndexOptions): OpenSearchSearchIndex {
  const { indexPrefix, dimensions } = options;
  if (typeof indexPrefix !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,150}$/.test(indexPrefix)) {
    throw new RangeError('indexPrefix must be lowercase letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
  validateDimensions(dimensions);
  const log = options.log ?? silentSearchLogger;
  const bulkBatchSize = options.bulkBatchSize ?? 500;
  if (!Number.isInteger(bulkBatchSize) || bulkBatchSize < 1) throw new RangeError('bulkBatchSize must be a positive integer');
  const retireDelayMs = options.retireDelayMs ?? 1000;
  const client = new Client({ node: options.node, requestTimeout: options.requestTimeoutMs ?? 30_000, maxRetries: 2 });
  const registry = collectionRegistry(options.collections ?? searchCollections);
  const settings = {
    client,
    indexPrefix,
    dimensions,
    log,
    refresh: options.refresh ?? false,
    bulkBatchSize,
    shards: options.shards ?? 1,
    replicas: options.replicas ?? 0,
  };
  const families = new Map<SearchCollection, IndexFamily>(registry.all.map((collection) => [collection, createIndexFamily(collection, settings)]));
  const familyOf = (collection: SearchCollection): IndexFamily => {
    const family = families.get(registry.resolve(collection));
    if (family === undefined) throw new Error(`unreachable: ${collection.name} is registered without an index family`);
    return family;
  };
  let rebuilding = false;

  /**
   * The SearchIndex over one generation of indices: reads from `readFrom`, writes to what
   * `writeTo` returns at call time (the live view writes to the alias and any index being rebuilt).
   */
  function view(readFrom: (family: IndexFamily) => string, writeTo: (family: IndexFamily) => WriteTarget[]): SearchIndex {
    async function nearest<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: KnnQuery<Doc>): Promise<{ items: HitOf<Doc>[] }> {
      const family = familyOf(collection);
      validateKnnQuery(family.collection, query, dimensions);
      if (matchesNothing(query)) return { items: [] };
      const { asked, kept } = knnAnswerOf(query);
      const result = await family.search(readFrom(family), knnBody(family.collection, asked));
      return { items: kept(result.hits.hits.map((hit) => hitFrom(collection, hit._source, cosineOf(hit._score)))) };
    }

    return {
      async search(collection, query) {
        const family = familyOf(collection);
        validateSearchQuery(family.collection, query);
        const request = matchesNothing(query) ? null : searchBody(family.collection, query);
        if (request === null) return { total: 0, items: [] };
        const result = await family.search(readFrom(family), request.body);
        return {
          total: result.hits.total.value,
          items: result.hits.hits.map((hit) => hitFrom(collection, hit._source, request.ranked ? Number(hit._score ?? 0) : 0)),
        };
      },
      knn: nearest,
      // Each query is a request of its own here (the answers are the same as one by one).
      knnMany: (collection, queries) => Promise.all(queries.map((query) => nearest(collection, query))),
      async index(collection, docs) {
        const family = familyOf(collection);
        await family.write(writeTo(family), upsertActions(family.collection, family.scripts, normaliseDocuments(collection, docs, dimensions)));
      },
      async update(collection, updates) {
        const family = familyOf(collection);
        await family.write(writeTo(family), updateActions(family.collection, family.scripts, normaliseUpdates(collection, updates, dimensions)));
      },
      async remove(collection, repositoryId, ids) {
        const family = familyOf(collection);
        validateRemoval(repositoryId, ids);
        await family.write(writeTo(family), removalActions(family.collection, family.scripts, repositoryId, ids));
      },
      async removeRepository(repositoryId) {
        validateRepositoryRemoval(repositoryId);
        for (const family of families.values()) {
          for (const target of writeTo(family)) await family.deleteRepositoryDocuments(target.index, repositoryId);
        }
      },
    };
  }

  const live = view(
    (family) => family.alias,
    (family) => family.liveTargets(),
  );

  return {
    ...live,
    aliasOf: (collection) => familyOf(collection).alias,

    async ensureIndices() {
      const all = [...families.values()];
      const indices = await Promise.all(all.map((family) => family.ensure()));
      return Object.fromEntries(all.map((family, position) => [family.collection.name, indices[position]]));
    },

    async rebuildIndex(fill) {
      if (rebuilding) throw new Error(`a rebuild of the ${indexPrefix} search indices is already running in this process`);
      rebuilding = true;
      try {
        return await rebuildFamilies({
          client,
          log,
          retireDelayMs,
          families: [...families.values()],
          viewOf: (next) =>
            view(
              (family) => next.get(family) ?? family.alias,
              (family) => [{ index: next.get(family) ?? family.alias, viaAlias: !next.has(family) }],
            ),
          fill,
        });
      } finally {
        rebuilding = false;
      }
    },

    async close() {
      await client.close();
    },
  };
}
