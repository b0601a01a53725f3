import type { Client } from '@opensearch-project/opensearch';
import type { SearchCollection } from '../collection.js';
import { MAX_RESULT_WINDOW, SearchIndexMigrationError, type SearchLogger } from '../port.js';
import { BULK_MAX_BYTES, bulkBatches, failedDeletions, scriptsOf, sendBulk, type BulkAction, type CollectionScripts, type WriteTarget } from './bulk.js';
import { describe, errorStatus, errorType, SearchIndexWriteError, unreachableAsUnavailable } from './client.js';
import { mappingOf } from './mappings.js';

/**
 * Index management: each collection is one family of versioned indices `<prefix>-<name>-v<N>`
 * behind the alias `<prefix>-<name>`, shared by all repositories (every query filters on
 * `repository_id`). A family creates its first index with the alias, migrates an older mapping
 * in place, and sends the collection's bulk writes, repository deletions and searches.
 */

export interface SearchBody {
  hits: { total: { value: number }; hits: { _score: number | null; _source: Record<string, unknown> }[] };
}

export interface FamilySettings {
  client: Client;
  indexPrefix: string;
  dimensions: number;
  log: SearchLogger;
  refresh: boolean | 'wait_for';
  bulkBatchSize: number;
  shards: number;
  replicas: number;
}

/** One family of versioned indices behind one alias: creation, migration, bulk writes, deletes, searches. */
export interface IndexFamily {
  readonly collection: SearchCollection;
  readonly alias: string;
  readonly scripts: CollectionScripts;
  /** Indices being rebuilt by this process: live writes go to them as well as to the alias. */
  readonly rebuildTargets: Set<string>;
  ensure(): Promise<string>;
  indicesBehindAlias(): Promise<string[]>;
  createVersionedIndex(withAlias: boolean, extraSettings?: Record<string, unknown>): Promise<string>;
  /** The alias and any rebuild target. */
  liveTargets(): WriteTarget[];
  write(targets: WriteTarget[], actions: BulkAction[]): Promise<void>;
  deleteRepositoryDocuments(target: string, repositoryId: string): Promise<void>;
  search(target: string, body: Record<string, unknown>): Promise<SearchBody>;
  /** After the alias moved to `index` by a rebuild. */
  switched(index: string): void;
}

export function createIndexFamily(collection: SearchCollection, settings: FamilySettings): IndexFamily {
  const { client, dimensions, log } = settings;
  const name = collection.name;
  const mapping = mappingOf(collection, dimensions);
  const mappingVersion = collection.opensearch.mappingVersion;
  const alias = `${settings.indexPrefix}-${name}`;
  const versionPattern = new RegExp(`^${alias.replace(/[.]/g, '\\.')}-v(\\d+)$`);
  const rebuildTargets = new Set<string>();
  let ensured: Promise<string> | null = null;

  async function indicesBehindAlias(): Promise<string[]> {
    try {
      const response = await client.indices.getAlias({ name: alias });
      return Object.keys(response.body as Record<string, unknown>);
    } catch (error) {
      if (errorStatus(error) === 404) return [];
      throw error;
    }
  }

  /** Versions of every `<alias>-v<N>` index, including ones a failed rebuild left behind. */
  async function existingVersions(): Promise<number[]> {
    const response = await client.indices.get({ index: `${alias}-v*`, expand_wildcards: 'all' });
    return Object.keys(response.body as Record<string, unknown>)
      .map((index) => versionPattern.exec(index)?.[1])
      .filter((version): version is string => version !== undefined)
      .map(Number);
  }

  async function createVersionedIndex(withAlias: boolean, extraSettings: Record<string, unknown> = {}): Promise<string> {
    for (let attempt = 0; ; attempt += 1) {
      const versions = await existingVersions();
      const index = `${alias}-v${Math.max(0, ...versions) + 1}`;
      try {
        await client.indices.create({
          index,
          body: {
            settings: {
              index: {
                knn: true,
                number_of_shards: settings.shards,
                number_of_replicas: settings.replicas,
                max_result_window: MAX_RESULT_WINDOW,
                ...extraSettings,
              },
            },
            mappings: mapping,
            // Index and alias in one request: no moment where the alias points nowhere.
            ...(withAlias ? { aliases: { [alias]: {} } } : {}),
          },
        });
        return index;
      } catch (error) {
        // Another process took this version first: look again.
        if (errorType(error) === 'resource_already_exists_exception' && attempt < 5) {
          if (withAlias) {
            const [winner] = await indicesBehindAlias();
            if (winner !== undefined) return winner;
          }
          continue;
        }
        throw error;
      }
    }
  }

  /** Checks the mapping behind the alias and brings an older one up to the current version. */
  async function migrate(index: string): Promise<void> {
    const response = await client.indices.getMapping({ index });
    const body = response.body as Record<
      string,
      { mappings?: { _meta?: { factlog?: { mapping_version?: number; dimensions?: number } }; properties?: Record<string, unknown> } }
    >;
    const meta = body[index]?.mappings?._meta?.factlog ?? {};
    if (collection.vectors && meta.dimensions !== undefined && meta.dimensions !== dimensions) {
      throw new SearchIndexMigrationError(
        `${index} holds ${meta.dimensions}-dimensional vectors but this service embeds ${dimensions}: ` +
          'rebuild into a new index (rebuildIndex, docs/search.md) to change the dimension',
      );
    }
    const version = meta.mapping_version ?? 0;
    if (version > mappingVersion) {
      log.warn({ index, mappingVersion: version, known: mappingVersion }, 'search index mapping is newer than this service');
      return;
    }
    if (version === mappingVersion) return;
    const present = body[index]?.mappings?.properties ?? {};
    const missing = Object.fromEntries(Object.entries(mapping.properties ?? {}).filter(([field]) => !(field in present)));
    try {
      // Only the fields the index lacks, and the new _meta: existing fields cannot change in place.
      await client.indices.putMapping({ index, body: { _meta: mapping._meta, properties: missing } });
      // Deep pages need the window the adapter promises (port.MAX_RESULT_WINDOW); a dynamic setting.
      await client.indices.putSettings({ index, body: { index: { max_result_window: MAX_RESULT_WINDOW } } });
      log.info({ index, from: version, to: mappingVersion, added: Object.keys(missing) }, 'search index mapping migrated in place');
    } catch (error) {
      throw new SearchIndexMigrationError(`cannot migrate the mapping of ${index} in place (${describe(error)}): rebuild the index`);
    }
  }

  async function ensureNow(): Promise<string> {
    let indices = await indicesBehindAlias();
    if (indices.length === 0) {
      const created = await createVersionedIndex(true);
      log.info({ index: created, alias }, 'search index created');
      indices = await indicesBehindAlias();
      if (indices.length === 0) indices = [created];
    }
    if (indices.length > 1) {
      throw new SearchIndexMigrationError(`alias ${alias} points at ${indices.join(', ')}; it must point at one index`);
    }
    await migrate(indices[0]);
    return indices[0];
  }

  function ensure(): Promise<string> {
    if (ensured) return ensured;
    const attempt = ensureNow();
    ensured = attempt;
    // Not remembered when it fails (node down, bad mapping): the next call tries again.
    attempt.catch(() => {
      if (ensured === attempt) ensured = null;
    });
    return attempt;
  }

  /** The alias vanished behind our back (deleted by hand): forget it, so the next call recreates it. */
  function forgetIndexOn(error: unknown): void {
    const missing =
      errorType(error) === 'index_not_found_exception' ||
      errorStatus(error) === 404 ||
      (error instanceof SearchIndexWriteError && error.failures.some((failure) => failure.reason.startsWith('index_not_found_exception')));
    if (missing) ensured = null;
  }

  /** Runs a request against the family; the alias is made first when it is the target. */
  async function onTarget<T>(target: string, request: () => Promise<T>): Promise<T> {
    if (target === alias) await ensure();
    try {
      return await request();
    } catch (error) {
      forgetIndexOn(error);
      throw error;
    }
  }

  async function write(targets: WriteTarget[], actions: BulkAction[]): Promise<void> {
    if (actions.length === 0) return;
    if (targets.some((target) => target.viaAlias)) await ensure();
    try {
      for (const batch of bulkBatches(actions, settings.bulkBatchSize, BULK_MAX_BYTES)) {
        for (const target of targets) await sendBulk(client, target, batch, { refresh: settings.refresh, log, what: name });
      }
    } catch (error) {
      forgetIndexOn(error);
      throw error;
    }
  }

  /**
   * Deletes a repository's documents in rounds of search + bulk delete. Not delete-by-query:
   * that API lives in the reindex module, which minimal distributions (the integ-test zip) and
   * some managed offerings lack. Each round refreshes, so the next search sees what is left,
   * including documents indexed a moment before the call.
   */
  function deleteRepositoryDocuments(target: string, repositoryId: string): Promise<void> {
    return onTarget(target, async () => {
      await client.indices.refresh({ index: target });
      for (;;) {
        const response = await client.search({
          index: target,
          body: { size: 1000, _source: false, query: { bool: { filter: [{ term: { repository_id: repositoryId } }] } } },
        });
        const hits = (response.body as { hits: { hits: { _id: string }[] } }).hits.hits;
        if (hits.length === 0) return;
        const deleted = await client.bulk({ index: target, refresh: true, body: hits.map((hit) => ({ delete: { _id: hit._id } })) });
        const failed = failedDeletions(deleted.body);
        if (failed.length > 0) {
          throw new SearchIndexWriteError(
            `${failed.length} ${name} of repository ${repositoryId} were not deleted from ${target}: ${failed[0].type}: ${failed[0].reason}`,
            [],
          );
        }
      }
    });
  }

  async function search(target: string, body: Record<string, unknown>): Promise<SearchBody> {
    try {
      return await onTarget(target, async () => (await client.search({ index: target, body })).body as SearchBody);
    } catch (error) {
      throw unreachableAsUnavailable(error);
    }
  }

  return {
    collection,
    alias,
    scripts: scriptsOf(collection),
    rebuildTargets,
    ensure,
    indicesBehindAlias,
    createVersionedIndex,
    liveTargets: () => [{ index: alias, viaAlias: true }, ...[...rebuildTargets].map((index) => ({ index, viaAlias: false }))],
    write,
    deleteRepositoryDocuments,
    search,
    switched(index) {
      rebuildTargets.delete(index);
      ensured = Promise.resolve(index);
    },
  };
}
