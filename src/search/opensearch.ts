import { Client, errors as openSearchErrors, type Types } from '@opensearch-project/opensearch';
import {
  MAX_RESULT_WINDOW,
  mergeAliases,
  normaliseConceptDocuments,
  normaliseFactDocuments,
  silentSearchLogger,
  validateConceptQuery,
  validateConceptUpdates,
  validateConceptVectorQuery,
  validateDimensions,
  validateFactQuery,
  validateFactUpdates,
  validateRemoval,
  validateVectorQuery,
  InvalidSearchRequestError,
  SearchIndexMigrationError,
  type ConceptDocument,
  type ConceptHit,
  type ConceptQuery,
  type ConceptUpdate,
  type ConceptVectorQuery,
  type FactDocument,
  type FactHit,
  type FactQuery,
  type FactUpdate,
  type SearchIndex,
  type SearchLogger,
  type VectorQuery,
} from './port.js';

/**
 * The distributed tier's search on OpenSearch (docs/search.md).
 *
 * Layout: two index families shared by all repositories, facts in `<prefix>-facts-v<N>` behind
 * the alias `<prefix>-facts`, concepts in `<prefix>-concepts-v<N>` behind `<prefix>-concepts`;
 * every query filters on the `repository_id` keyword. Thousands of small repositories would
 * otherwise mean thousands of indices (each with shards, mappings and HNSW graphs to keep in
 * cluster state), and a rebuild becomes one alias swap instead of one per repository.
 */

/** Bump when the facts mapping changes; additive changes migrate in place, others need rebuildIndex. */
export const MAPPING_VERSION = 1;
/** The same for the concepts mapping. */
export const CONCEPT_MAPPING_VERSION = 1;

export interface OpenSearchIndexOptions {
  /** URL(s) of the cluster, e.g. http://127.0.0.1:19200. */
  node: string | string[];
  /** Lowercase name prefix: aliases `<prefix>-facts` and `<prefix>-concepts`, indices `<alias>-v<N>`. */
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
}

export interface RebuildResult {
  /** The facts index behind the alias before and after, and the fact documents `write` put in. */
  previous: string | null;
  current: string;
  written: number;
  /** The concepts index behind its alias before and after. */
  concepts: { previous: string | null; current: string };
}

export interface OpenSearchSearchIndex extends SearchIndex {
  /** The facts alias readers and writers use. */
  readonly alias: string;
  /** The concepts alias. */
  readonly conceptAlias: string;
  /**
   * Creates the versioned indices and aliases of both families if missing, migrates older
   * mappings; returns the facts index behind its alias.
   */
  ensureIndex(): Promise<string>;
  /**
   * Builds a new versioned index of each family, lets `fill` write every document into them,
   * then moves both aliases in one atomic step and deletes the old indices. Readers keep getting
   * answers from the old indices until the switch. Writes this adapter makes meanwhile go to
   * both generations. `write` bulk-loads fact documents; `target` is the new pair as a
   * SearchIndex (its writes and removals go to the new indices alone), for replaying the log
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

/** What a fact document holds in `_source`. A document made by an update before its text arrived lacks the text fields. */
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

interface StoredConcept {
  id: string;
  repository_id: string;
  canonical_name: string;
  context: string;
  aliases: string[];
  fact_count: number;
  status: string;
  embedding?: number[];
}

const returnedFactFields = ['id', 'content', 'content_hash', 'fact_kind', 'status', 'created_at'];
const returnedConceptFields = ['id', 'canonical_name', 'context', 'aliases', 'fact_count', 'status'];

function knnField(dimensions: number) {
  return {
    type: 'knn_vector',
    dimension: dimensions,
    // lucene: the engine that needs no native library (the Maven Central plugin zip has none),
    // and it applies the repository filter inside the HNSW search, so k results come back.
    method: { name: 'hnsw', space_type: 'cosinesimil', engine: 'lucene', parameters: { m: 16, ef_construction: 128 } },
  } as const;
}

function factMapping(dimensions: number): Types.Common_Mapping.TypeMapping {
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
      embedding: knnField(dimensions),
    },
  };
}

function conceptMapping(dimensions: number): Types.Common_Mapping.TypeMapping {
  return {
    dynamic: 'strict',
    _meta: { factlog: { mapping_version: CONCEPT_MAPPING_VERSION, dimensions } },
    properties: {
      id: { type: 'keyword' },
      repository_id: { type: 'keyword' },
      // Names are not stemmed (the `standard` analyzer: lowercase words, no stop words), as the
      // Postgres adapter's `simple` text search configuration. `raw`: sorting by name.
      canonical_name: { type: 'text', analyzer: 'standard', fields: { raw: { type: 'keyword' } } },
      context: { type: 'keyword' },
      aliases: { type: 'text', analyzer: 'standard' },
      fact_count: { type: 'integer' },
      status: { type: 'keyword' },
      /** Version of the concept stream's last event applied: older events are ignored (redelivery). */
      version: { type: 'long' },
      embedding: knnField(dimensions),
    },
  };
}

/**
 * Upsert that keeps the earliest created_at (as the facts read model keeps the first insert),
 * touches the vector only when one is given, never moves a status back to `new` (a redelivered
 * FactsExtracted after FactStabilized), and reports 'noop' when nothing changes, so re-applying
 * an event rewrites nothing.
 */
const FACT_UPSERT_SCRIPT = `
  def s = ctx._source;
  if (s.status == 'removed') { ctx.op = 'none'; return; }
  boolean changed = false;
  for (entry in params.fields.entrySet()) {
    if (entry.getKey() == 'status' && entry.getValue() == 'new' && s.status != null && s.status != 'new') { continue; }
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

/** A partial fact change: status and/or vector. */
const FACT_UPDATE_SCRIPT = `
  def s = ctx._source;
  if (s.status == 'removed') { ctx.op = 'none'; return; }
  boolean changed = false;
  if (params.status != null && s.status != params.status) { s.status = params.status; changed = true; }
  if (params.vector_mode == 'set') {
    if (s.embedding != params.vector) { s.embedding = params.vector; changed = true; }
  } else if (params.vector_mode == 'remove') {
    if (s.containsKey('embedding')) { s.remove('embedding'); changed = true; }
  }
  if (!changed) { ctx.op = 'none'; }
`;

/**
 * A removed fact stays as a tombstone (id, repository, status \`removed\`) that the upsert and
 * update scripts never write over: on Kafka a fact's merge (its own stream) can overtake its
 * extraction or embedding (its source's stream, another partition), and a plain delete would let
 * the late write bring the merged fact back.
 */
const FACT_TOMBSTONE_SCRIPT = `
  def s = ctx._source;
  if (s.status == 'removed' && !s.containsKey('content')) { ctx.op = 'none'; return; }
  for (field in ['content', 'content_hash', 'fact_kind', 'created_at', 'embedding']) { s.remove(field); }
  s.status = 'removed';
`;

/** Shared head of the concept scripts: a write older than the stored stream version is ignored. */
const CONCEPT_VERSION_GUARD = `
  def s = ctx._source;
  if (params.version != null && s.version != null && params.version <= s.version) { ctx.op = 'none'; return; }
  boolean changed = false;
  if (params.version != null && s.version != params.version) { s.version = params.version; changed = true; }
`;

const VECTOR_STEP = `
  if (params.vector_mode == 'set') {
    if (s.embedding != params.vector) { s.embedding = params.vector; changed = true; }
  } else if (params.vector_mode == 'remove') {
    if (s.containsKey('embedding')) { s.remove('embedding'); changed = true; }
  }
`;

const CONCEPT_UPSERT_SCRIPT = `${CONCEPT_VERSION_GUARD}
  for (entry in params.fields.entrySet()) {
    if (s.get(entry.getKey()) != entry.getValue()) { s.put(entry.getKey(), entry.getValue()); changed = true; }
  }
  ${VECTOR_STEP}
  if (!changed) { ctx.op = 'none'; }
`;

/** Aliases gained and lost, case-insensitively (as mergeAliases in port.ts), and the vector. */
const CONCEPT_UPDATE_SCRIPT = `${CONCEPT_VERSION_GUARD}
  def aliases = s.aliases == null ? new ArrayList() : new ArrayList(s.aliases);
  for (r in params.remove) {
    String low = r.toLowerCase();
    for (int i = aliases.size() - 1; i >= 0; i--) {
      if (aliases.get(i).toLowerCase() == low) { aliases.remove(i); changed = true; }
    }
  }
  for (a in params.add) {
    String low = a.toLowerCase();
    boolean found = false;
    for (x in aliases) { if (x.toLowerCase() == low) { found = true; break; } }
    if (!found && a.trim() != '') { aliases.add(a); changed = true; }
  }
  s.aliases = aliases;
  ${VECTOR_STEP}
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

/** One bulk action (its request lines) and the document it is about, for retries and error reports. */
interface BulkAction {
  id: string;
  lines: Record<string, unknown>[];
  /** A partial update of a document that is not there is no error (the document was removed). */
  missingIsFine?: boolean;
}

interface WriteTarget {
  index: string;
  viaAlias: boolean;
}

interface SearchBody {
  hits: { total: { value: number }; hits: { _score: number | null; _source: Record<string, unknown> }[] };
}

/** One family of versioned indices behind one alias: creation, migration, bulk writes, deletes, searches. */
interface IndexFamily {
  readonly alias: string;
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
  const client = new Client({ node: options.node, requestTimeout: options.requestTimeoutMs ?? 30_000, maxRetries: 2 });

  function family(name: 'facts' | 'concepts', mapping: Types.Common_Mapping.TypeMapping, mappingVersion: number): IndexFamily {
    const alias = `${indexPrefix}-${name}`;
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
                  number_of_shards: options.shards ?? 1,
                  number_of_replicas: options.replicas ?? 0,
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
      if (meta.dimensions !== undefined && meta.dimensions !== dimensions) {
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
      if (errorType(error) === 'index_not_found_exception' || errorStatus(error) === 404) ensured = null;
    }

    /** One bulk request into `index`; items OpenSearch pushes back on (429) are sent again. */
    async function bulkInto(target: WriteTarget, actions: BulkAction[]): Promise<void> {
      let pending = actions;
      for (let attempt = 1; pending.length > 0; attempt += 1) {
        const response = await client.bulk({
          index: target.index,
          require_alias: target.viaAlias,
          refresh: refresh === 'wait_for' ? 'wait_for' : refresh,
          body: pending.flatMap((action) => action.lines),
        });
        const body = response.body as { errors: boolean; items: Record<string, { status: number; error?: { type?: string; reason?: string } }>[] };
        if (!body.errors) return;
        const retry: BulkAction[] = [];
        const failures: { id: string; status: number; reason: string }[] = [];
        body.items.forEach((item, position) => {
          const result = Object.values(item)[0];
          const action = pending[position];
          if (!result.error) return;
          if (result.status === 404 && action.missingIsFine) return;
          if (result.status === 429 && attempt < 5) retry.push(action);
          else failures.push({ id: action.id, status: result.status, reason: `${result.error.type}: ${result.error.reason}` });
        });
        if (failures.length > 0) {
          if (failures.some((failure) => failure.reason.startsWith('index_not_found_exception'))) ensured = null;
          throw new SearchIndexWriteError(
            `${failures.length} of ${pending.length} ${name} were not indexed into ${target.index}: ${failures.slice(0, 3).map((failure) => `${failure.id} (${failure.reason})`).join('; ')}`,
            failures,
          );
        }
        if (retry.length === 0) return;
        log.warn({ index: target.index, rejected: retry.length, attempt }, `search index pushed back on a bulk request; retrying those ${name}`);
        await sleep(200 * 2 ** attempt);
        pending = retry;
      }
    }

    async function write(targets: WriteTarget[], actions: BulkAction[]): Promise<void> {
      if (actions.length === 0) return;
      if (targets.some((target) => target.viaAlias)) await ensure();
      try {
        for (let start = 0; start < actions.length; start += bulkBatchSize) {
          const batch = actions.slice(start, start + bulkBatchSize);
          for (const target of targets) await bulkInto(target, batch);
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
    async function deleteRepositoryDocuments(target: string, repositoryId: string): Promise<void> {
      if (target === alias) await ensure();
      try {
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
              `${failed.length} ${name} of repository ${repositoryId} were not deleted from ${target}: ${failed[0].error?.type}: ${failed[0].error?.reason}`,
              [],
            );
          }
        }
      } catch (error) {
        forgetIndexOn(error);
        throw error;
      }
    }

    async function search(target: string, body: Record<string, unknown>): Promise<SearchBody> {
      if (target === alias) await ensure();
      try {
        const response = await client.search({ index: target, body });
        return response.body as unknown as SearchBody;
      } catch (error) {
        forgetIndexOn(error);
        throw error;
      }
    }

    return {
      alias,
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

  const facts = family('facts', factMapping(dimensions), MAPPING_VERSION);
  const concepts = family('concepts', conceptMapping(dimensions), CONCEPT_MAPPING_VERSION);
  let rebuilding = false;

  const vectorMode = (vector: number[] | null | undefined) => (vector === undefined ? 'keep' : vector === null ? 'remove' : 'set');

  function factUpserts(docs: FactDocument[]): BulkAction[] {
    return docs.map((doc) => {
      const fields = {
        id: doc.id,
        repository_id: doc.repository_id,
        content: doc.content,
        content_hash: doc.content_hash,
        fact_kind: doc.fact_kind,
        status: doc.status,
      };
      const upsert: StoredFact = { ...fields, created_at: doc.created_at, ...(Array.isArray(doc.vector) ? { embedding: doc.vector } : {}) };
      return {
        id: doc.id,
        lines: [
          { update: { _id: doc.id, retry_on_conflict: 3 } },
          {
            script: {
              lang: 'painless',
              source: FACT_UPSERT_SCRIPT,
              params: { fields, created_at: doc.created_at, vector_mode: vectorMode(doc.vector), vector: doc.vector ?? null },
            },
            upsert,
          },
        ],
      };
    });
  }

  /**
   * Partial fact updates. A fact not indexed yet (its FactStabilized overtook its FactsExtracted
   * on another Kafka topic) gets a partial document that the later upsert completes; searches
   * skip documents without text.
   */
  function factUpdates(updates: FactUpdate[]): BulkAction[] {
    return updates.map((update) => ({
      id: update.id,
      lines: [
        { update: { _id: update.id, retry_on_conflict: 3 } },
        {
          script: {
            lang: 'painless',
            source: FACT_UPDATE_SCRIPT,
            params: { status: update.status ?? null, vector_mode: vectorMode(update.vector), vector: update.vector ?? null },
          },
          upsert: {
            id: update.id,
            repository_id: update.repository_id,
            ...(update.status !== undefined ? { status: update.status } : {}),
            ...(Array.isArray(update.vector) ? { embedding: update.vector } : {}),
          },
        },
      ],
    }));
  }

  function conceptUpserts(docs: ConceptDocument[]): BulkAction[] {
    return docs.map((doc) => {
      const fields = {
        id: doc.id,
        repository_id: doc.repository_id,
        canonical_name: doc.canonical_name,
        context: doc.context,
        aliases: doc.aliases,
        fact_count: doc.fact_count,
        status: doc.status,
      };
      const upsert = {
        ...fields,
        ...(doc.version !== undefined ? { version: doc.version } : {}),
        ...(Array.isArray(doc.vector) ? { embedding: doc.vector } : {}),
      };
      return {
        id: doc.id,
        lines: [
          { update: { _id: doc.id, retry_on_conflict: 3 } },
          {
            script: {
              lang: 'painless',
              source: CONCEPT_UPSERT_SCRIPT,
              params: { fields, version: doc.version ?? null, vector_mode: vectorMode(doc.vector), vector: doc.vector ?? null },
            },
            upsert,
          },
        ],
      };
    });
  }

  /** Alias and vector changes of concepts; one that is not indexed (removed by a merge) is left alone. */
  function conceptUpdates(updates: ConceptUpdate[]): BulkAction[] {
    return updates.map((update) => ({
      id: update.id,
      missingIsFine: true,
      lines: [
        { update: { _id: update.id, retry_on_conflict: 3 } },
        {
          script: {
            lang: 'painless',
            source: CONCEPT_UPDATE_SCRIPT,
            params: {
              add: update.addAliases ?? [],
              remove: update.removeAliases ?? [],
              version: update.version ?? null,
              vector_mode: vectorMode(update.vector),
              vector: update.vector ?? null,
            },
          },
        },
      ],
    }));
  }

  function factTombstones(repositoryId: string, ids: readonly string[]): BulkAction[] {
    return [...new Set(ids)].map((id) => ({
      id,
      lines: [
        { update: { _id: id, retry_on_conflict: 3 } },
        { script: { lang: 'painless', source: FACT_TOMBSTONE_SCRIPT }, upsert: { id, repository_id: repositoryId, status: 'removed' } },
      ],
    }));
  }

  function deletions(ids: readonly string[]): BulkAction[] {
    return [...new Set(ids)].map((id) => ({ id, missingIsFine: true, lines: [{ delete: { _id: id } }] }));
  }

  function factHitFrom(source: StoredFact, score: number): FactHit {
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

  function conceptHitFrom(source: StoredConcept, score: number): ConceptHit {
    return {
      id: source.id,
      canonical_name: source.canonical_name,
      context: source.context,
      aliases: source.aliases ?? [],
      fact_count: Number(source.fact_count ?? 0),
      status: source.status,
      score,
    };
  }

  /**
   * Filters every fact search shares: the repository, no merged facts or tombstones, no
   * text-less partial documents, an id set.
   */
  function factFilters(repositoryId: string, factIds: readonly string[] | undefined) {
    return {
      filter: [
        { term: { repository_id: repositoryId } },
        { exists: { field: 'content_hash' } },
        ...(factIds !== undefined ? [{ terms: { id: [...factIds] } }] : []),
      ],
      must_not: [{ terms: { status: ['merged', 'removed'] } }],
    };
  }

  function conceptFilters(repositoryId: string, conceptIds: readonly string[] | undefined) {
    return {
      filter: [
        { term: { repository_id: repositoryId } },
        { exists: { field: 'canonical_name' } },
        ...(conceptIds !== undefined ? [{ terms: { id: [...conceptIds] } }] : []),
      ],
      must_not: [{ term: { status: 'merged' } }],
    };
  }

  /** The websearch query as simple_query_string over `fields`; undefined: no query; null: a query with no term. */
  function textMatcher(text: string, fields: string[]): Record<string, unknown> | null | undefined {
    if (text === '') return undefined;
    const translated = websearchToSimpleQueryString(text);
    if (translated === null) return null;
    return {
      simple_query_string: {
        query: translated,
        fields,
        default_operator: 'and',
        flags: 'AND|OR|NOT|PHRASE|PRECEDENCE|WHITESPACE|ESCAPE',
      },
    };
  }

  async function searchFactsIn(target: string, query: FactQuery): Promise<{ total: number; items: FactHit[] }> {
    validateFactQuery(query);
    if (query.factIds !== undefined && query.factIds.length === 0) return { total: 0, items: [] };
    const matcher = textMatcher(query.query.trim(), ['content']);
    if (matcher === null) return { total: 0, items: [] };
    const result = await facts.search(target, {
      from: query.offset,
      size: query.limit,
      track_total_hits: true,
      _source: returnedFactFields,
      query: { bool: { ...factFilters(query.repositoryId, query.factIds), ...(matcher ? { must: [matcher] } : {}) } },
      // The same order as the Postgres adapter: best first, then oldest, then id; newest first without a query.
      sort: matcher ? [{ _score: 'desc' }, { created_at: 'asc' }, { id: 'asc' }] : [{ created_at: 'desc' }, { id: 'asc' }],
      track_scores: matcher !== undefined,
    });
    return {
      total: result.hits.total.value,
      items: result.hits.hits.map((hit) => factHitFrom(hit._source as unknown as StoredFact, matcher ? Number(hit._score ?? 0) : 0)),
    };
  }

  async function searchFactsByVectorIn(target: string, query: VectorQuery): Promise<{ items: FactHit[] }> {
    validateVectorQuery(query, dimensions);
    if (query.factIds !== undefined && query.factIds.length === 0) return { items: [] };
    const result = await facts.search(target, {
      size: query.k,
      _source: returnedFactFields,
      query: { knn: { embedding: { vector: query.vector, k: query.k, filter: { bool: factFilters(query.repositoryId, query.factIds) } } } },
    });
    // The lucene engine scores cosinesimil as (1 + cosine) / 2: report the cosine itself.
    return { items: result.hits.hits.map((hit) => factHitFrom(hit._source as unknown as StoredFact, 2 * Number(hit._score ?? 0) - 1)) };
  }

  async function searchConceptsIn(target: string, query: ConceptQuery): Promise<{ total: number; items: ConceptHit[] }> {
    validateConceptQuery(query);
    if (query.conceptIds !== undefined && query.conceptIds.length === 0) return { total: 0, items: [] };
    const matcher = textMatcher(query.query.trim(), ['canonical_name', 'aliases']);
    if (matcher === null) return { total: 0, items: [] };
    const result = await concepts.search(target, {
      from: query.offset,
      size: query.limit,
      track_total_hits: true,
      _source: returnedConceptFields,
      query: { bool: { ...conceptFilters(query.repositoryId, query.conceptIds), ...(matcher ? { must: [matcher] } : {}) } },
      sort: matcher ? [{ _score: 'desc' }, { 'canonical_name.raw': 'asc' }, { id: 'asc' }] : [{ 'canonical_name.raw': 'asc' }, { id: 'asc' }],
      track_scores: matcher !== undefined,
    });
    return {
      total: result.hits.total.value,
      items: result.hits.hits.map((hit) => conceptHitFrom(hit._source as unknown as StoredConcept, matcher ? Number(hit._score ?? 0) : 0)),
    };
  }

  async function searchConceptsByVectorIn(target: string, query: ConceptVectorQuery): Promise<{ items: ConceptHit[] }> {
    validateConceptVectorQuery(query, dimensions);
    if (query.conceptIds !== undefined && query.conceptIds.length === 0) return { items: [] };
    const result = await concepts.search(target, {
      size: query.k,
      _source: returnedConceptFields,
      query: { knn: { embedding: { vector: query.vector, k: query.k, filter: { bool: conceptFilters(query.repositoryId, query.conceptIds) } } } },
    });
    return { items: result.hits.hits.map((hit) => conceptHitFrom(hit._source as unknown as StoredConcept, 2 * Number(hit._score ?? 0) - 1)) };
  }

  /**
   * The SearchIndex over one generation of indices: reads from `read`, writes to what `writes`
   * returns at call time (the live view writes to the alias and any index being rebuilt).
   */
  function view(read: { facts: string; concepts: string }, writes: { facts: () => WriteTarget[]; concepts: () => WriteTarget[] }): SearchIndex {
    const removeFrom = async (which: IndexFamily, targets: WriteTarget[], repositoryId: string) => {
      for (const target of targets) await which.deleteRepositoryDocuments(target.index, repositoryId);
    };
    return {
      searchFacts: (query) => searchFactsIn(read.facts, query),
      searchFactsByVector: (query) => searchFactsByVectorIn(read.facts, query),
      searchConcepts: (query) => searchConceptsIn(read.concepts, query),
      searchConceptsByVector: (query) => searchConceptsByVectorIn(read.concepts, query),
      async indexFacts(docs) {
        await facts.write(writes.facts(), factUpserts(normaliseFactDocuments(docs, dimensions)));
      },
      async updateFacts(updates) {
        validateFactUpdates(updates, dimensions);
        await facts.write(writes.facts(), factUpdates(updates));
      },
      async removeFacts(repositoryId, ids) {
        validateRemoval(repositoryId, ids);
        await facts.write(writes.facts(), factTombstones(repositoryId, ids));
      },
      async indexConcepts(docs) {
        await concepts.write(writes.concepts(), conceptUpserts(normaliseConceptDocuments(docs, dimensions)));
      },
      async updateConcepts(updates) {
        validateConceptUpdates(updates, dimensions);
        // Aliases are compared as mergeAliases does; blank ones are dropped here already.
        const cleaned = updates.map((update) => ({
          ...update,
          addAliases: mergeAliases([], update.addAliases ?? [], []),
          removeAliases: update.removeAliases ?? [],
        }));
        await concepts.write(writes.concepts(), conceptUpdates(cleaned));
      },
      async removeConcepts(repositoryId, ids) {
        validateRemoval(repositoryId, ids);
        await concepts.write(writes.concepts(), deletions(ids));
      },
      async removeRepository(repositoryId) {
        if (typeof repositoryId !== 'string' || repositoryId === '') throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
        await removeFrom(facts, writes.facts(), repositoryId);
        await removeFrom(concepts, writes.concepts(), repositoryId);
      },
    };
  }

  const live = view({ facts: facts.alias, concepts: concepts.alias }, { facts: facts.liveTargets, concepts: concepts.liveTargets });

  async function ensureIndex(): Promise<string> {
    const [factIndex] = await Promise.all([facts.ensure(), concepts.ensure()]);
    return factIndex;
  }

  const index: OpenSearchSearchIndex = {
    ...live,
    alias: facts.alias,
    conceptAlias: concepts.alias,
    ensureIndex,

    async rebuildIndex(fill) {
      if (rebuilding) throw new Error(`a rebuild of ${facts.alias} is already running in this process`);
      rebuilding = true;
      const created: { family: IndexFamily; index: string }[] = [];
      try {
        const previousFacts = await facts.indicesBehindAlias();
        const previousConcepts = await concepts.indicesBehindAlias();
        // No refreshes while filling: faster bulk loads; the indices are refreshed once before the switch.
        const nextFacts = await facts.createVersionedIndex(false, { refresh_interval: '-1' });
        created.push({ family: facts, index: nextFacts });
        const nextConcepts = await concepts.createVersionedIndex(false, { refresh_interval: '-1' });
        created.push({ family: concepts, index: nextConcepts });
        log.info({ index: nextFacts, concepts: nextConcepts, alias: facts.alias, previous: previousFacts }, 'search index rebuild started');
        facts.rebuildTargets.add(nextFacts);
        concepts.rebuildTargets.add(nextConcepts);
        const factTargets = () => [{ index: nextFacts, viaAlias: false }];
        const conceptTargets = () => [{ index: nextConcepts, viaAlias: false }];
        let written = 0;
        const writeDocs = async (docs: FactDocument[]) => {
          const checked = normaliseFactDocuments(docs, dimensions);
          await facts.write(factTargets(), factUpserts(checked));
          written += checked.length;
        };
        // The new pair as a SearchIndex, so the fill can replay the log through the projection.
        // Its searches see what was refreshed: refreshes are off until the fill ends.
        const target = view({ facts: nextFacts, concepts: nextConcepts }, { facts: factTargets, concepts: conceptTargets });
        const countingTarget: SearchIndex = {
          ...target,
          async indexFacts(docs) {
            await writeDocs(docs);
          },
        };
        await fill(writeDocs, countingTarget);
        for (const next of [nextFacts, nextConcepts]) {
          await client.indices.putSettings({ index: next, body: { index: { refresh_interval: '1s' } } });
          await client.indices.refresh({ index: next });
        }
        // One atomic request for both aliases: readers see the old pair or the new one, never neither.
        await client.indices.updateAliases({
          body: {
            actions: [
              ...previousFacts.map((old) => ({ remove: { index: old, alias: facts.alias } })),
              ...previousConcepts.map((old) => ({ remove: { index: old, alias: concepts.alias } })),
              { add: { index: nextFacts, alias: facts.alias } },
              { add: { index: nextConcepts, alias: concepts.alias } },
            ],
          },
        });
        facts.switched(nextFacts);
        concepts.switched(nextConcepts);
        created.length = 0;
        log.info({ index: nextFacts, concepts: nextConcepts, alias: facts.alias, previous: previousFacts, written }, 'search index rebuilt; aliases switched');
        const retired = [...previousFacts, ...previousConcepts];
        if (retired.length > 0) {
          // Searches that resolved an alias just before the switch may still be running there.
          await sleep(retireDelayMs);
          await client.indices.delete({ index: retired.join(','), ignore_unavailable: true });
        }
        return {
          previous: previousFacts[0] ?? null,
          current: nextFacts,
          written,
          concepts: { previous: previousConcepts[0] ?? null, current: nextConcepts },
        };
      } catch (error) {
        for (const { family: which, index: next } of created) {
          which.rebuildTargets.delete(next);
          const switched = (await which.indicesBehindAlias().catch(() => [] as string[])).includes(next);
          if (!switched) {
            await client.indices.delete({ index: next, ignore_unavailable: true }).catch((cleanupError: unknown) => {
              log.warn({ index: next, error: describe(cleanupError) }, 'could not delete the index of a failed rebuild');
            });
          }
        }
        log.error({ alias: facts.alias, error: describe(error) }, 'search index rebuild failed; the aliases still point at the old indices');
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
