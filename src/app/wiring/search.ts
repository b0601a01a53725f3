import type { Logger } from 'pino';
import type { Config } from '../../config/types.js';
import type { Database } from '../../db/database.js';
import type { EventStore } from '../../eventstore/port.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { createHybridSearch, hybridSettingsOf, type HybridSearch } from '../../search/hybrid.js';
import type { SearchIndex } from '../../search/port.js';
import { createPostgresSearchIndex } from '../../search/postgres.js';
import { reindexSearch } from '../reindex.js';
import type { RebuildStrategies } from './projections.js';

export interface SearchWiring {
  index: SearchIndex;
  /** Hybrid (lexical + k-NN, RRF) search over `index`, falling back to lexical when it cannot run. */
  hybrid: HybridSearch;
  /**
   * How the search-index projection rebuilds on this backend. On OpenSearch it owns no tables:
   * its rebuild fills a new index and moves the alias (`src/app/reindex.ts`). On PostgreSQL its
   * rows are tables like any other projection's, so the runner's own rebuild applies.
   */
  rebuildStrategies(deps: { store: EventStore; db: Database }): RebuildStrategies;
  close(): Promise<void>;
}

/** The search index of `search.backend` and the hybrid search over it; OpenSearch's client is loaded only when configured. */
export async function openSearch(config: Config, db: Database, embedder: Embedder | null, log: Logger): Promise<SearchWiring> {
  const { url, index_prefix } = config.search.opensearch;
  // One embedding model per deployment: the index's vectors have its dimensions.
  const dimensions = config.providers.embeddings.dimensions;
  const { hybrid } = config.search;
  const withHybrid = (index: SearchIndex) =>
    createHybridSearch({
      search: index,
      embedder,
      settings: hybridSettingsOf(hybrid),
    });

  if (config.search.backend === 'opensearch') {
    const { createOpenSearchIndex } = await import('../../search/opensearch.js');
    const opensearch = createOpenSearchIndex({ node: url, indexPrefix: index_prefix, dimensions, log: log.child({ component: 'search' }) });
    return {
      index: opensearch,
      hybrid: withHybrid(opensearch),
      rebuildStrategies: ({ store, db: readModels }) =>
        new Map([['search-index', (onProgress) => reindexSearch({ store, db: readModels, search: opensearch }, onProgress).then(() => undefined)]]),
      close: () => opensearch.close(),
    };
  }
  const postgres = postgresSearchIndexOn(db, dimensions);
  return { index: postgres, hybrid: withHybrid(postgres), rebuildStrategies: () => new Map(), close: async () => undefined };
}

/**
 * The Postgres search index as a tier wires it on `db`: on PGlite, one connection and k-NN from
 * graphs in the process (the embedded data directory has one owner, src/db/dataDirLock.ts, so
 * this process writes every vector); on a server, pgvector's index where it is installed.
 */
export function postgresSearchIndexOn(db: Database, dimensions: number): SearchIndex {
  const embedded = db.kind === 'pglite';
  return createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: dimensions, oneConnection: embedded, nearestInMemory: embedded });
}
