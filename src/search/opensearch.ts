import { Client, errors as openSearchErrors, type Types } from '@opensearch-project/opensearch';
import {
  MAX_RESULT_WINDOW,
  normaliseFactDocuments,
  silentSearchLogger,
  validateDimensions,
  validateFactQuery,
  validateVectorQuery,
  InvalidSearchRequestError,
  SearchIndexMigrationError,
  type FactDocument,
  type FactHit,
  type FactQuery,
  type SearchIndex,
  type SearchLogger,
  type VectorQuery,
} from './port.js';

/**
 * The distributed tier's search on OpenSearch (docs/search.md).
 *
 * Layout: one shared index for all repositories, `<prefix>-facts-v<N>`, read and written through
 * the alias `<prefix>-facts`; every query filters on the `repository_id` keyword. Thousands of
 * small repositories would otherwise mean thousands of indices (each with shards, mappings and
 * HNSW graphs to keep in cluster state), and a rebuild becomes one alias swap instead of one per
 * repository.
 */

/** Bump when the mapping changes; additive changes migrate in place, others need rebuildIndex. */
export const MAPPING_VERSION = 1;

export interface OpenSearchIndexOptions {
  /** URL(s) of the cluster, e.g. http://127.0.0.1:19200. */
  node: string | string[];
  /** Lowercase name prefix: the alias is `<prefix>-facts`, indices `<prefix>-facts-v<N>`. */
  indexPrefix: string;
  /** Dimension of the `embedding` knn_vector field (the embedding model's output size). */
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
}

export interface RebuildResult {
  previous: string | null;
  current: string;
  /** Documents the fill wrote. */
  written: number;
}

export interface OpenSearchSearchIndex extends SearchIndex {
  /** The alias readers and writers use. */
  readonly alias: string;
  /** Creates the versioned index and alias if missing, migrates an older mapping; returns the index behind the alias. */
  ensureIndex(): Promise<string>;
  /**
   * Builds a new versioned index, lets `fill` write every document into it, then moves the alias
   * in one atomic step and deletes the old index. Readers keep getting answers from the old
   * index until the switch. Writes this adapter makes meanwhile go to both indices. `target` is
   * the new index as a SearchIndex (writes and removals go to it alone), for replaying the log
   * through the search-index projection.
   */
  rebuildIndex(
    fill: (write: (docs: FactDocument[]) => Promise<void>, target: SearchIndex) => Promise<void>,
  ): Promise<RebuildResult>;
  close(): Promise<void>;
}

/** Bulk items OpenSearch rejected for good (not back-pressure), with their reasons. */
export class SearchIndexWriteError extends Error {
  constructor(
    message: string,
    readonly failures: { id: string; status: number; reason: string }[],
  ) {
    super(message);
    this.name = 'SearchIndexWriteError';
  }
}

/** What a document holds in `_source`. */
interface StoredFact {
  id: string;
  repository_id: string;
  content: string;
  content_hash: string;
  fact_kind: string;
  status: string;
  created_at: string;
  embedding?: number[];
}

const returnedFields = ['id', 'content', 'content_hash', 'fact_kind', 'status', 'created_at'];

function mappingFor(dimensions: number): Types.Common_Mapping.TypeMapping {
  return {
    // A typo in a field name must fail loudly, not grow the mapping.
    dynamic: 'strict',
    _meta: { factlog: { mapping_version: MAPPING_VERSION, dimensions } },
    properties: {
      id: { type: 'keyword' },
      repository_id: { type: 'keyword' },
      content: { type: 'text', analyzer: 'english' },
      content_hash: { type: 'keyword' },
      fact_kind: { type: 'keyword' },
      status: { type: 'keyword' },
      created_at: { type: 'date' },
      embedding: {
        type: 'knn_vector',
        dimension: dimensions,
        // lucene: the engine that needs no native library (the Maven Central plugin zip has none),
        // and it applies the repository filter inside the HNSW search, so k results come back.
        method: { name: 'hnsw', space_type: 'cosinesimil', engine: 'lucene', parameters: { m: 16, ef_construction: 128 } },
      },
    },
  };
}

/**
 * Upsert that keeps the earliest created_at (as the facts read model keeps the first insert),
 * touches the vector only when one is given, and reports 'noop' when nothing changes, so
 * re-applying an event rewrites nothing.
 */
const UPSERT_SCRIPT = `
  def s = ctx._source;
  boolean changed = false;
  for (entry in params.fields.entrySet()) {
    if (s.get(entry.getKey()) != entry.getValue()) { s.put(entry.getKey(), entry.getValue()); changed = true; }
  }
  if (s.created_at == null || params.created_at.compareTo(s.created_at) < 0) { s.created_at = params.created_at; changed = true; }
  if (params.vector_mode == 'set') {
    if (s.embedding != params.vector) { s.embedding = params.vector; changed = true; }
  } else if (params.vector_mode == 'remove') {
    if (s.containsKey('embedding')) { s.remove('embedding'); changed = true; }
  }
  if (!changed) { ctx.op = 'none'; }
`;

/**
 * Translates websearch_to_tsquery syntax into simple_query_string syntax, so both adapters read
 * a query alike: words are ANDed, "quoted text" is a phrase, `or` between terms is OR (binding
 * looser than AND, as in tsquery), and `-term` / `-"phrase"` is negation. Every other character
 * is escaped, so `*`, `~`, `+`, `|`, `(` mean nothing special, as in websearch syntax. Returns
 * null when the query holds no term (tsquery then matches nothing).
 */
export function websearchToSimpleQueryString(text: string): string | null {
  const escape = (value: string) => value.replace(/[+|\-"*()~\\]/g, (char) => `\\${char}`);
  const groups: string[][] = [[]];
  let pendingOr = false;
  let index = 0;
  while (index < text.length) {
    const char = text[index];
    if (/\s/.test(char)) {
      index += 1;
      continue;
    }
    let negated = false;
    if (char === '-' && index + 1 < text.length && !/\s/.test(text[index + 1])) {
      negated = true;
      index += 1;
    }
    let term: string;
    if (text[index] === '"') {
      const end = text.indexOf('"', index + 1);
      const inner = text.slice(index + 1, end < 0 ? text.length : end).trim();
      index = end < 0 ? text.length : end + 1;
      if (inner === '') continue;
      term = `"${escape(inner)}"`;
    } else {
      let end = index;
      while (end < text.length && !/\s/.test(text[end]) && text[end] !== '"') end += 1;
      const word = text.slice(index, end);
      index = end;
      if (!negated && word.toLowerCase() === 'or') {
        // OR between two terms; a leading, trailing or doubled `or` is ignored, as in tsquery.
        if (groups[groups.length - 1].length > 0) pendingOr = true;
        continue;
      }
      if (!/[\p{L}\p{N}]/u.test(word)) continue; // punctuation only: no lexeme
      term = escape(word);
    }
    if (pendingOr) {
      groups.push([]);
      pendingOr = false;
    }
    groups[groups.length - 1].push(negated ? `-${term}` : term);
  }
  const nonEmpty = groups.filter((group) => group.length > 0);
  if (nonEmpty.length === 0) return null;
  return nonEmpty.map((group) => `(${group.join(' + ')})`).join(' | ');
}

function errorStatus(error: unknown): number | undefined {
  return error instanceof openSearchErrors.ResponseError ? error.statusCode : undefined;
}

function errorType(error: unknown): string | undefined {
  if (!(error instanceof openSearchErrors.ResponseError)) return undefined;
  const body = error.body as { error?: { type?: string } } | undefined;
  return body?.error?.type;
}

function describe(error: unknown): string {
  if (error instanceof openSearchErrors.ResponseError) {
    const body = error.body as { error?: { type?: string; reason?: string } } | undefined;
    return `${error.statusCode} ${body?.error?.type ?? ''}: ${body?.error?.reason ?? error.message}`;
  }
  return error instanceof Error ? error.message : String(error);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function createOpenSearchIndex(options: OpenSearchIndexOptions): OpenSearchSearchIndex {
  const { indexPrefix, dimensions } = options;
  if (typeof indexPrefix !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,150}$/.test(indexPrefix)) {
    throw new RangeError('indexPrefix must be lowercase letters, digits, ".", "_" or "-", starting with a letter or digit');
  }
  validateDimensions(dimensions);
  const log = options.log ?? silentSearchLogger;
  const refresh = options.refresh ?? false;
  const bulkBatchSize = options.bulkBatchSize ?? 500;
  if (!Number.isInteger(bulkBatchSize) || bulkBatchSize < 1) throw new RangeError('bulkBatchSize must be a positive integer');
  const retireDelayMs = options.retireDelayMs ?? 1000;
  const alias = `${indexPrefix}-facts`;
  const versionPattern = new RegExp(`^${alias.replace(/[.]/g, '\\.')}-v(\\d+)$`);
  const client = new Client({ node: options.node, requestTimeout: options.requestTimeoutMs ?? 30_000, maxRetries: 2 });

  let ensured: Promise<string> | null = null;
  /** Indices being rebuilt by this process: live writes go to them as well as to the alias. */
  const rebuildTargets = new Set<string>();
  let rebuilding = false;

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
      .map((name) => versionPattern.exec(name)?.[1])
      .filter((version): version is string => version !== undefined)
      .map(Number);
  }

  async function createVersionedIndex(withAlias: boolean, extraSettings: Record<string, unknown> = {}): Promise<string> {
    for (let attempt = 0; ; attempt += 1) {
      const versions = await existingVersions();
      const name = `${alias}-v${Math.max(0, ...versions) + 1}`;
      try {
        await client.indices.create({
          index: name,
          body: {
            settings: {
              index: {
                knn: true,
                number_of_shards: options.shards ?? 1,
                number_of_replicas: options.replicas ?? 0,
                max_result_window: MAX_RESULT_WINDOW,
                ...extraSettings,
              },
            },
            mappings: mappingFor(dimensions),
            // Index and alias in one request: no moment where the alias points nowhere.
            ...(withAlias ? { aliases: { [alias]: {} } } : {}),
          },
        });
        return name;
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

  /** Checks the mapping behind the alias and brings an older one up to MAPPING_VERSION. */
  async function migrate(index: string): Promise<void> {
    const response = await client.indices.getMapping({ index });
    const body = response.body as Record<
      string,
      { mappings?: { _meta?: { factlog?: { mapping_version?: number; dimensions?: number } }; properties?: Record<string, unknown> } }
    >;
    const meta = body[index]?.mappings?._meta?.factlog ?? {};
    if (meta.dimensions !== undefined && meta.dimensions !== dimensions) {
      throw new SearchIndexMigrationError(
        `${index} holds ${meta.dimensions}-dimensional vectors but this service embeds ${dimensions}: ` +
          'rebuild into a new index (rebuildIndex, docs/search.md) to change the dimension',
      );
    }
    const version = meta.mapping_version ?? 0;
    if (version > MAPPING_VERSION) {
      log.warn({ index, mappingVersion: version, known: MAPPING_VERSION }, 'search index mapping is newer than this service');
      return;
    }
    if (version === MAPPING_VERSION) return;
    const wanted = mappingFor(dimensions);
    const present = body[index]?.mappings?.properties ?? {};
    const missing = Object.fromEntries(Object.entries(wanted.properties ?? {}).filter(([field]) => !(field in present)));
    try {
      // Only the fields the index lacks, and the new _meta: existing fields cannot change in place.
      await client.indices.putMapping({ index, body: { _meta: wanted._meta, properties: missing } });
      // Deep pages need the window the adapter promises (port.MAX_RESULT_WINDOW); a dynamic setting.
      await client.indices.putSettings({ index, body: { index: { max_result_window: MAX_RESULT_WINDOW } } });
      log.info({ index, from: version, to: MAPPING_VERSION, added: Object.keys(missing) }, 'search index mapping migrated in place');
    } catch (error) {
      throw new SearchIndexMigrationError(`cannot migrate the mapping of ${index} in place (${describe(error)}): rebuild the index`);
    }
  }

  async function ensure(): Promise<string> {
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

  function ensureIndex(): Promise<string> {
    if (ensured) return ensured;
    const attempt = ensure();
    ensured = attempt;
    // Not remembered when it fails (node down, bad mapping): the next call tries again.
    attempt.catch(() => {
      if (ensured === attempt) ensured = null;
    });
    return attempt;
  }

  /** The alias vanished behind our back (deleted by hand): forget it, so the next call recreates it. */
  function forgetIndexOn(error: unknown): void {
    const type = errorType(error);
    if (type === 'index_not_found_exception' || errorStatus(error) === 404) ensured = null;
  }

  function bulkBody(docs: FactDocument[]): Record<string, unknown>[] {
    return docs.flatMap((doc) => {
      const fields = {
        id: doc.id,
        repository_id: doc.repository_id,
        content: doc.content,
        content_hash: doc.content_hash,
        fact_kind: doc.fact_kind,
        status: doc.status,
      };
      const vectorMode = doc.vector === undefined ? 'keep' : doc.vector === null ? 'remove' : 'set';
      const upsert: StoredFact = { ...fields, created_at: doc.created_at, ...(Array.isArray(doc.vector) ? { embedding: doc.vector } : {}) };
      return [
        { update: { _id: doc.id, retry_on_conflict: 3 } },
        {
          script: {
            lang: 'painless',
            source: UPSERT_SCRIPT,
            params: { fields, created_at: doc.created_at, vector_mode: vectorMode, vector: doc.vector ?? null },
          },
          upsert,
        },
      ];
    });
  }

  /** One bulk request into `index`; items OpenSearch pushes back on (429) are sent again. */
  async function bulkInto(index: string, viaAlias: boolean, docs: FactDocument[]): Promise<void> {
    let pending = docs;
    for (let attempt = 1; pending.length > 0; attempt += 1) {
      const response = await client.bulk({
        index,
        require_alias: viaAlias,
        refresh: refresh === 'wait_for' ? 'wait_for' : refresh,
        body: bulkBody(pending),
      });
      const body = response.body as { errors: boolean; items: Record<string, { _id?: string; status: number; error?: { type?: string; reason?: string } }>[] };
      if (!body.errors) return;
      const retry: FactDocument[] = [];
      const failures: { id: string; status: number; reason: string }[] = [];
      body.items.forEach((item, position) => {
        const result = Object.values(item)[0];
        if (!result.error) return;
        if (result.status === 429 && attempt < 5) retry.push(pending[position]);
        else failures.push({ id: pending[position].id, status: result.status, reason: `${result.error.type}: ${result.error.reason}` });
      });
      if (failures.length > 0) {
        if (failures.some((failure) => failure.reason.startsWith('index_not_found_exception'))) ensured = null;
        throw new SearchIndexWriteError(
          `${failures.length} of ${pending.length} facts were not indexed into ${index}: ${failures.slice(0, 3).map((failure) => `${failure.id} (${failure.reason})`).join('; ')}`,
          failures,
        );
      }
      log.warn({ index, rejected: retry.length, attempt }, 'search index pushed back on a bulk request; retrying those facts');
      await sleep(200 * 2 ** attempt);
      pending = retry;
    }
  }

  async function write(targets: { index: string; viaAlias: boolean }[], docs: FactDocument[]): Promise<void> {
    for (let start = 0; start < docs.length; start += bulkBatchSize) {
      const batch = docs.slice(start, start + bulkBatchSize);
      for (const target of targets) await bulkInto(target.index, target.viaAlias, batch);
    }
  }

  /**
   * Deletes a repository's documents in rounds of search + bulk delete. Not delete-by-query: that
   * API lives in the reindex module, which minimal distributions (the integ-test zip) and some
   * managed offerings lack. Each round refreshes, so the next search sees what is left, including
   * documents indexed a moment before the call.
   */
  async function deleteRepositoryDocuments(target: string, repositoryId: string): Promise<void> {
    await client.indices.refresh({ index: target });
    for (;;) {
      const response = await client.search({
        index: target,
        body: { size: 1000, _source: false, query: { bool: { filter: [{ term: { repository_id: repositoryId } }] } } },
      });
      const hits = (response.body as unknown as { hits: { hits: { _id: string }[] } }).hits.hits;
      if (hits.length === 0) return;
      const deleted = await client.bulk({ index: target, refresh: true, body: hits.map((hit) => ({ delete: { _id: hit._id } })) });
      const body = deleted.body as { errors: boolean; items: Record<string, { status: number; error?: { type?: string; reason?: string } }>[] };
      // 404: deleted by someone else meanwhile, which is what we want.
      const failed = body.items.map((item) => Object.values(item)[0]).filter((result) => result.error && result.status !== 404);
      if (failed.length > 0) {
        throw new SearchIndexWriteError(
          `${failed.length} documents of repository ${repositoryId} were not deleted from ${target}: ${failed[0].error?.type}: ${failed[0].error?.reason}`,
          [],
        );
      }
    }
  }

  function hitFrom(source: StoredFact, score: number): FactHit {
    return {
      id: source.id,
      content: source.content,
      content_hash: source.content_hash,
      fact_kind: source.fact_kind,
      status: source.status,
      score,
      created_at: new Date(source.created_at).toISOString(),
    };
  }

  async function search(target: string, body: Record<string, unknown>) {
    if (target === alias) await ensureIndex();
    try {
      const response = await client.search({ index: target, body });
      return response.body as unknown as { hits: { total: { value: number }; hits: { _score: number | null; _source: StoredFact }[] } };
    } catch (error) {
      forgetIndexOn(error);
      throw error;
    }
  }

  async function searchFactsIn(target: string, query: FactQuery): Promise<{ total: number; items: FactHit[] }> {
    validateFactQuery(query);
    const text = query.query.trim();
    const repositoryFilter = { term: { repository_id: query.repositoryId } };
    let matcher: Record<string, unknown> | null = null;
    if (text !== '') {
      const translated = websearchToSimpleQueryString(text);
      if (translated === null) return { total: 0, items: [] };
      matcher = {
        simple_query_string: {
          query: translated,
          fields: ['content'],
          default_operator: 'and',
          flags: 'AND|OR|NOT|PHRASE|PRECEDENCE|WHITESPACE|ESCAPE',
        },
      };
    }
    const result = await search(target, {
      from: query.offset,
      size: query.limit,
      track_total_hits: true,
      _source: returnedFields,
      query: { bool: { filter: [repositoryFilter], ...(matcher ? { must: [matcher] } : {}) } },
      // The same order as the Postgres adapter: best first, then oldest, then id; newest first without a query.
      sort: matcher ? [{ _score: 'desc' }, { created_at: 'asc' }, { id: 'asc' }] : [{ created_at: 'desc' }, { id: 'asc' }],
      track_scores: matcher !== null,
    });
    return {
      total: result.hits.total.value,
      items: result.hits.hits.map((hit) => hitFrom(hit._source, matcher ? Number(hit._score ?? 0) : 0)),
    };
  }

  async function searchByVectorIn(target: string, query: VectorQuery): Promise<{ items: FactHit[] }> {
    validateVectorQuery(query, dimensions);
    const result = await search(target, {
      size: query.k,
      _source: returnedFields,
      query: { knn: { embedding: { vector: query.vector, k: query.k, filter: { term: { repository_id: query.repositoryId } } } } },
    });
    // The lucene engine scores cosinesimil as (1 + cosine) / 2: report the cosine itself.
    return { items: result.hits.hits.map((hit) => hitFrom(hit._source, 2 * Number(hit._score ?? 0) - 1)) };
  }

  function requireRepositoryId(repositoryId: string): void {
    if (typeof repositoryId !== 'string' || repositoryId === '') throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
  }

  const index: OpenSearchSearchIndex = {
    alias,
    ensureIndex,
    searchFacts: (query) => searchFactsIn(alias, query),
    searchFactsByVector: (query) => searchByVectorIn(alias, query),

    async indexFacts(docs: FactDocument[]) {
      const checked = normaliseFactDocuments(docs, dimensions);
      if (checked.length === 0) return;
      await ensureIndex();
      const targets = [{ index: alias, viaAlias: true }, ...[...rebuildTargets].map((target) => ({ index: target, viaAlias: false }))];
      try {
        await write(targets, checked);
      } catch (error) {
        forgetIndexOn(error);
        throw error;
      }
    },

    async removeRepository(repositoryId: string) {
      requireRepositoryId(repositoryId);
      await ensureIndex();
      for (const target of [alias, ...rebuildTargets]) {
        try {
          await deleteRepositoryDocuments(target, repositoryId);
        } catch (error) {
          forgetIndexOn(error);
          throw error;
        }
      }
    },

    async rebuildIndex(fill) {
      if (rebuilding) throw new Error(`a rebuild of ${alias} is already running in this process`);
      rebuilding = true;
      let next: string | null = null;
      try {
        const previous = await indicesBehindAlias();
        // No refreshes while filling: faster bulk loads; the index is refreshed once before the switch.
        next = await createVersionedIndex(false, { refresh_interval: '-1' });
        const target = next;
        log.info({ index: target, alias, previous }, 'search index rebuild started');
        rebuildTargets.add(target);
        let written = 0;
        const writeDocs = async (docs: FactDocument[]) => {
          const checked = normaliseFactDocuments(docs, dimensions);
          await write([{ index: target, viaAlias: false }], checked);
          written += checked.length;
        };
        // The new index as a SearchIndex, so the fill can replay the log through the projection.
        // Its searches see what was refreshed: refreshes are off until the fill ends.
        const targetIndex: SearchIndex = {
          indexFacts: writeDocs,
          async removeRepository(repositoryId) {
            requireRepositoryId(repositoryId);
            await deleteRepositoryDocuments(target, repositoryId);
          },
          searchFacts: (query) => searchFactsIn(target, query),
          searchFactsByVector: (query) => searchByVectorIn(target, query),
        };
        await fill(writeDocs, targetIndex);
        await client.indices.putSettings({ index: target, body: { index: { refresh_interval: '1s' } } });
        await client.indices.refresh({ index: target });
        // One atomic request: readers see the old index or the new one, never neither.
        await client.indices.updateAliases({
          body: {
            actions: [
              ...previous.map((old) => ({ remove: { index: old, alias } })),
              { add: { index: target, alias } },
            ],
          },
        });
        rebuildTargets.delete(target);
        ensured = Promise.resolve(target);
        log.info({ index: target, alias, previous, written }, 'search index rebuilt; alias switched');
        if (previous.length > 0) {
          // Searches that resolved the alias just before the switch may still be running there.
          await sleep(retireDelayMs);
          await client.indices.delete({ index: previous.join(','), ignore_unavailable: true });
        }
        return { previous: previous[0] ?? null, current: target, written };
      } catch (error) {
        let switched = false;
        if (next !== null) {
          rebuildTargets.delete(next);
          switched = (await indicesBehindAlias().catch(() => [] as string[])).includes(next);
          if (!switched) {
            await client.indices.delete({ index: next, ignore_unavailable: true }).catch((cleanupError: unknown) => {
              log.warn({ index: next, error: describe(cleanupError) }, 'could not delete the index of a failed rebuild');
            });
          }
        }
        log.error(
          { alias, index: next, error: describe(error) },
          switched
            ? 'search index rebuilt and switched, but the old index could not be deleted'
            : 'search index rebuild failed; the alias still points at the old index',
        );
        throw error;
      } finally {
        rebuilding = false;
      }
    },

    async close() {
      await client.close();
    },
  };
  return index;
}
