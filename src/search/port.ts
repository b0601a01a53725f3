import type { Knex } from 'knex';
import {
  filterableFields,
  listFields,
  mergeAliases,
  type DocumentUpdate,
  type FieldName,
  type FieldSpec,
  type HitOf,
  type IndexedDocument,
  type SearchCollection,
  type SortKey,
} from './collection.js';

/**
 * The SearchIndex port: lexical search, k-NN search over given vectors, and the writes that keep
 * an index in step with the log, for any named collection (`collection.ts`; facts and concepts
 * in `collections/`). Hybrid (RRF) search builds on it (`hybrid.ts`). Adapters: `postgres.ts`
 * (full text on the read-model database, pgvector where present) and, on the distributed tier,
 * `opensearch.ts`. docs/search.md describes both.
 */

/** The field names a query may use: the collection's, or any string where the collection is not known (checked at runtime). */
type QueryField<Doc> = [FieldName<Doc>] extends [never] ? string : FieldName<Doc>;

export interface SearchQuery<Doc extends IndexedDocument = IndexedDocument> {
  repositoryId: string;
  /** websearch_to_tsquery syntax: words, "quoted phrases", OR, -negation. Empty lists every document. */
  query: string;
  /** 0..MAX_PAGE_SIZE; 0 asks for the total only. */
  limit: number;
  /** offset + limit must not pass MAX_RESULT_WINDOW. */
  offset: number;
  /** Only these documents (the concept filters of the facts API); an empty list matches nothing. */
  ids?: readonly string[];
  /**
   * Documents never found, as hidden ones are, however many: the caller knows they are gone
   * before the index does (the facts of a deleted source, until cleanup_facts retracts them).
   */
  hide?: readonly string[];
  /** Filterable fields: a value, or any of a list (an empty list matches nothing). */
  filters?: { readonly [K in QueryField<Doc>]?: string | readonly string[] };
  /** Sortable fields, replacing the collection's order (score first, or its listing order); the id breaks ties. */
  sort?: readonly SortKey<QueryField<Doc>>[];
}

export interface KnnQuery<Doc extends IndexedDocument = IndexedDocument> {
  repositoryId: string;
  /** Compared by cosine similarity; must have the index's dimension and not be all zeros. */
  vector: number[];
  /** 1..MAX_K nearest documents of the repository, nearest first. */
  k: number;
  ids?: readonly string[];
  /** As in SearchQuery: left out as hidden documents are, so k of the others come back. */
  hide?: readonly string[];
  filters?: SearchQuery<Doc>['filters'];
  /**
   * Only documents at least this similar (cosine similarity, -1..1): of the k nearest, those at
   * or above it. An adapter may look at fewer candidates for it (the embedded tier's graphs send
   * only the close ones to the database, and none when none is close).
   */
  minScore?: number;
  /**
   * Documents never in the answer: the k nearest of the others. Deduplication leaves out the
   * fact it asks about, which is in the index by then.
   */
  exclude?: readonly string[];
}

/**
 * How an adapter answers `exclude` and `minScore`: it runs `asked` (k plus the excluded ids'
 * number, without them) and `kept` makes the answer of its nearest-first hits: those not
 * excluded and at least `minScore` similar, at most k. So the k nearest of the others, of them
 * the close enough ones.
 */
export function knnAnswerOf<Doc extends IndexedDocument>(query: KnnQuery<Doc>) {
  const excluded = new Set(query.exclude ?? []);
  const minScore = query.minScore ?? -Infinity;
  return {
    excluded,
    asked: { ...query, k: query.k + excluded.size, exclude: undefined },
    kept: <Hit extends { id: string; score: number }>(items: readonly Hit[]): Hit[] =>
      items
        .filter((item) => !excluded.has(item.id))
        .slice(0, query.k)
        .filter((item) => item.score >= minScore),
  };
}

export interface SearchPage<Hit> {
  total: number;
  items: Hit[];
}

export interface SearchIndex {
  /**
   * Lexical search within one repository, best match first, with the total number of matches.
   * Hidden documents (merged ones) are never found.
   */
  search<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: SearchQuery<Doc>): Promise<SearchPage<HitOf<Doc>>>;
  /**
   * k-NN by cosine similarity, hidden documents excluded. Throws VectorSearchUnavailableError
   * where the adapter (or the collection) has no vectors.
   */
  knn<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: KnnQuery<Doc>): Promise<{ items: HitOf<Doc>[] }>;
  /**
   * Several k-NN queries at once (one round trip where the adapter can): the answers in the
   * order of `queries`, each what `knn` would have returned for it. Throws as `knn` does.
   */
  knnMany<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, queries: readonly KnnQuery<Doc>[]): Promise<{ items: HitOf<Doc>[] }[]>;
  /**
   * Upserts documents by id. Idempotent: indexing the same documents again leaves the index as it
   * was, so a projection may re-apply an event after a crash or a redelivery.
   */
  index<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, docs: readonly Doc[]): Promise<void>;
  /** Applies partial changes (fields, list members, vectors) to indexed documents. Idempotent. */
  update<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, updates: readonly DocumentUpdate<Doc>[]): Promise<void>;
  /**
   * Removes documents (and their vectors) by id. Idempotent: unknown ids are ignored. In a
   * collection with tombstones a removed document is never revived by a late write.
   */
  remove<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, repositoryId: string, ids: readonly string[]): Promise<void>;
  /** Removes every document of the repository, in every collection. Idempotent. */
  removeRepository(repositoryId: string): Promise<void>;
  /**
   * For adapters that live in the read-model database: a view whose writes join the projection
   * runner's transaction, so they commit with its checkpoint (and do not wait for a second
   * connection that PGlite does not have). Adapters outside the database leave it undefined.
   */
  withinTransaction?(trx: Knex.Transaction): SearchIndex;
}

/** The part of a pino logger the search adapters use (pino loggers and test spies fit). */
export interface SearchLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

export const silentSearchLogger: SearchLogger = { info() {}, warn() {}, error() {} };

/** Largest page a search returns. */
export const MAX_PAGE_SIZE = 1000;
/** Deepest result a search reaches (offset + limit): OpenSearch's index.max_result_window, on both adapters. */
export const MAX_RESULT_WINDOW = 100_000;
/** Most neighbours a k-NN search returns (pgvector's hnsw.ef_search ceiling). */
export const MAX_K = 1000;

/** No vector index behind this adapter: callers fall back to lexical search. */
export class VectorSearchUnavailableError extends Error {
  constructor(reason: string) {
    super(`vector search is unavailable: ${reason}`);
    this.name = 'VectorSearchUnavailableError';
  }
}

/**
 * The search cluster did not answer (refused, unreachable, timed out): a request may succeed
 * once it is back, so the API answers 503 rather than 500. The reason (with the cluster's
 * address) is for the log, not the caller.
 */
export class SearchUnavailableError extends Error {
  constructor(
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super('search is unavailable: the search cluster cannot be reached; retry in a moment', options);
    this.name = 'SearchUnavailableError';
  }
}

/**
 * A request the index cannot answer as asked (bad paging, bad vector, bad document). Carries
 * statusCode 400 so the API's error handler answers 400 rather than 500.
 */
export class InvalidSearchRequestError extends Error {
  readonly statusCode = 400;
  readonly code = 'bad_request';
  constructor(message: string) {
    super(message);
    this.name = 'InvalidSearchRequestError';
  }
}

/** The index holds vectors of another dimension, or a mapping it cannot migrate in place. */
export class SearchIndexMigrationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SearchIndexMigrationError';
  }
}

/**
 * The collections an adapter serves (for removeRepository and rebuilds), looked up by the
 * collection a call names; a collection it was not given is a programming error.
 */
export function collectionRegistry(collections: readonly SearchCollection[]): {
  all: readonly SearchCollection[];
  resolve(collection: SearchCollection): SearchCollection;
} {
  const byName = new Map<string, SearchCollection>();
  for (const collection of collections) {
    if (byName.has(collection.name)) throw new Error(`search collection ${collection.name} is registered twice`);
    byName.set(collection.name, collection);
  }
  return {
    all: [...byName.values()],
    resolve(collection) {
      const known = byName.get(collection?.name);
      if (known === undefined || known !== collection) {
        throw new Error(`search collection ${String(collection?.name)} is not registered with this search index`);
      }
      return known;
    },
  };
}

function requireRepositoryId(repositoryId: unknown): void {
  if (typeof repositoryId !== 'string' || repositoryId === '') {
    throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
  }
}

function validateStringList(values: unknown, what: string): void {
  if (!Array.isArray(values) || values.some((value) => typeof value !== 'string' || value === '')) {
    throw new InvalidSearchRequestError(`${what} must be an array of non-empty strings`);
  }
}

/** Ids and filters: every filter field filterable, every value a non-empty string. */
function validateRestrictions(collection: SearchCollection, query: { ids?: unknown; hide?: unknown; filters?: unknown }): void {
  if (query.ids !== undefined) validateStringList(query.ids, 'ids');
  if (query.hide !== undefined) validateStringList(query.hide, 'hide');
  if (query.filters === undefined) return;
  if (query.filters === null || typeof query.filters !== 'object') throw new InvalidSearchRequestError('filters must be an object');
  const allowed = filterableFields(collection);
  for (const [name, value] of Object.entries(query.filters)) {
    if (!allowed.includes(name)) {
      throw new InvalidSearchRequestError(`${collection.name} cannot be filtered by ${name}; filterable: ${allowed.join(', ') || 'none'}`);
    }
    if (value === undefined) continue;
    if (typeof value === 'string') {
      if (value === '') throw new InvalidSearchRequestError(`filters.${name} must be a non-empty string or a list of them`);
    } else validateStringList(value, `filters.${name}`);
  }
}

/** True when an id list or a filter list is empty: such a query matches nothing. */
export function matchesNothing(query: { ids?: readonly string[]; filters?: Readonly<Record<string, string | readonly string[] | undefined>> }): boolean {
  if (query.ids !== undefined && query.ids.length === 0) return true;
  return Object.values(query.filters ?? {}).some((value) => Array.isArray(value) && value.length === 0);
}

/** The filters of a query as field → values, undefined ones left out. */
export function filterValues(filters: Readonly<Record<string, string | readonly string[] | undefined>> | undefined): [string, string[]][] {
  return Object.entries(filters ?? {}).flatMap(([name, value]): [string, string[]][] =>
    value === undefined ? [] : [[name, typeof value === 'string' ? [value] : [...value]]],
  );
}

export function validateSearchQuery(collection: SearchCollection, query: SearchQuery): void {
  requireRepositoryId(query.repositoryId);
  validateRestrictions(collection, query);
  if (typeof query.query !== 'string') throw new InvalidSearchRequestError('query must be a string');
  const { limit, offset } = query;
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_PAGE_SIZE) {
    throw new InvalidSearchRequestError(`limit must be an integer from 0 to ${MAX_PAGE_SIZE}`);
  }
  if (!Number.isInteger(offset) || offset < 0) throw new InvalidSearchRequestError('offset must be a non-negative integer');
  if (offset + limit > MAX_RESULT_WINDOW) {
    throw new InvalidSearchRequestError(`offset + limit must not exceed ${MAX_RESULT_WINDOW}; narrow the query instead`);
  }
  if (query.sort !== undefined) {
    if (!Array.isArray(query.sort)) throw new InvalidSearchRequestError('sort must be an array of { field, order }');
    for (const key of query.sort) {
      if (key === null || typeof key !== 'object' || collection.fields[key.field]?.sort !== true) {
        throw new InvalidSearchRequestError(`${collection.name} cannot be sorted by ${String(key?.field)}`);
      }
      if (key.order !== 'asc' && key.order !== 'desc') throw new InvalidSearchRequestError(`sort order must be asc or desc, not ${String(key.order)}`);
    }
  }
}

/** Checks a vector against the index's dimension; cosine similarity is undefined for a zero vector. */
function validateVector(vector: unknown, dimensions: number, what = 'vector'): asserts vector is number[] {
  if (!Array.isArray(vector)) throw new InvalidSearchRequestError(`${what} must be an array of numbers`);
  if (vector.length !== dimensions) {
    throw new InvalidSearchRequestError(`${what} has ${vector.length} dimensions; the index holds ${dimensions}`);
  }
  let zero = true;
  for (const value of vector) {
    if (typeof value !== 'number' || !Number.isFinite(value)) throw new InvalidSearchRequestError(`${what} must hold finite numbers only`);
    if (value !== 0) zero = false;
  }
  if (zero) throw new InvalidSearchRequestError(`${what} is all zeros: cosine similarity is undefined for it`);
}

export function validateKnnQuery(collection: SearchCollection, query: KnnQuery, dimensions: number): void {
  requireRepositoryId(query.repositoryId);
  validateRestrictions(collection, query);
  if (!Number.isInteger(query.k) || query.k < 1 || query.k > MAX_K) {
    throw new InvalidSearchRequestError(`k must be an integer from 1 to ${MAX_K}`);
  }
  if (query.minScore !== undefined && !(Number.isFinite(query.minScore) && query.minScore >= -1 && query.minScore <= 1)) {
    throw new InvalidSearchRequestError('minScore must be a number from -1 to 1');
  }
  if (query.exclude !== undefined && (!Array.isArray(query.exclude) || query.exclude.length > MAX_K || query.exclude.some((id) => typeof id !== 'string'))) {
    throw new InvalidSearchRequestError(`exclude must be a list of at most ${MAX_K} ids`);
  }
  validateVector(query.vector, dimensions);
}

/** A field's value checked against its declaration; returns it normalised (UTC times, list as a set). */
function checkedValue(spec: FieldSpec, value: unknown, where: string): unknown {
  switch (spec.type) {
    case 'keyword':
      if (typeof value !== 'string' || value === '') throw new InvalidSearchRequestError(`${where} must be a non-empty string`);
      return value;
    case 'text':
      if (spec.list) {
        if (!Array.isArray(value) || value.some((item) => typeof item !== 'string')) throw new InvalidSearchRequestError(`${where} must be an array of strings`);
        return mergeAliases([], value as string[], []);
      }
      if (typeof value !== 'string' || (value === '' && !spec.mayBeEmpty)) {
        throw new InvalidSearchRequestError(`${where} must be a ${spec.mayBeEmpty ? '' : 'non-empty '}string`);
      }
      return value;
    case 'date': {
      const time = typeof value === 'string' ? new Date(value) : null;
      if (!time || Number.isNaN(time.getTime())) throw new InvalidSearchRequestError(`${where} must be an RFC 3339 time`);
      return time.toISOString();
    }
    case 'integer':
      if (!Number.isInteger(value) || (value as number) < 0) throw new InvalidSearchRequestError(`${where} must be a non-negative integer`);
      return value;
  }
}

function checkIdentity(item: unknown, where: string): void {
  if (item === null || typeof item !== 'object') throw new InvalidSearchRequestError(`${where} must be an object`);
  for (const name of ['id', 'repository_id'] as const) {
    const value = (item as Record<string, unknown>)[name];
    if (typeof value !== 'string' || value === '') throw new InvalidSearchRequestError(`${where}.${name} must be a non-empty string`);
  }
}

function checkVersionAndVector(item: { vector?: unknown; version?: unknown }, where: string, dimensions: number | null): void {
  if (item.version !== undefined && (!Number.isInteger(item.version) || (item.version as number) < 0)) {
    throw new InvalidSearchRequestError(`${where}.version must be a non-negative integer`);
  }
  if (item.vector !== undefined && item.vector !== null && dimensions !== null) validateVector(item.vector, dimensions, `${where}.vector`);
}

/**
 * Checks documents before any is written (a batch is all or nothing at this gate) and returns
 * them normalised: times in UTC RFC 3339 (so stored times compare as strings), lists as sets.
 * `dimensions` null: the adapter keeps no vectors, so any vector is accepted and ignored.
 */
export function normaliseDocuments<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, docs: readonly Doc[], dimensions: number | null): Doc[] {
  if (!Array.isArray(docs)) throw new InvalidSearchRequestError('docs must be an array');
  const seen = new Set<string>();
  return docs.map((doc, position) => {
    const where = `docs[${position}]`;
    checkIdentity(doc, where);
    const normalised: Record<string, unknown> = { ...doc };
    for (const [name, spec] of Object.entries(collection.fields)) {
      normalised[name] = checkedValue(spec, normalised[name], `${where}.${name}`);
    }
    if (seen.has(doc.id)) throw new InvalidSearchRequestError(`${where}.id ${doc.id} appears twice in one batch`);
    seen.add(doc.id);
    checkVersionAndVector(doc, where, dimensions);
    // Every declared field was checked against its spec just above, so this is a Doc.
    return normalised as Doc;
  });
}

/** Checks partial updates before any is written, and normalises their values and list members as documents'. */
export function normaliseUpdates<Doc extends IndexedDocument>(
  collection: SearchCollection<Doc>,
  updates: readonly DocumentUpdate<Doc>[],
  dimensions: number | null,
): DocumentUpdate<Doc>[] {
  if (!Array.isArray(updates)) throw new InvalidSearchRequestError('updates must be an array');
  const lists = listFields(collection);
  return updates.map((update, position) => {
    const where = `updates[${position}]`;
    checkIdentity(update, where);
    const set: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(update.set ?? {})) {
      const spec = collection.fields[name];
      if (spec === undefined) throw new InvalidSearchRequestError(`${where}.set.${name} is no field of ${collection.name}`);
      if (value !== undefined) set[name] = checkedValue(spec, value, `${where}.set.${name}`);
    }
    const members = (which: 'addTo' | 'removeFrom'): Record<string, string[]> => {
      const given: Record<string, unknown> = update[which] ?? {};
      const result: Record<string, string[]> = {};
      for (const [name, values] of Object.entries(given)) {
        if (!lists.includes(name)) throw new InvalidSearchRequestError(`${where}.${which}.${name} is no list field of ${collection.name}`);
        if (values === undefined) continue;
        if (!Array.isArray(values) || values.some((value) => typeof value !== 'string')) {
          throw new InvalidSearchRequestError(`${where}.${which}.${name} must be an array of strings`);
        }
        // Members are spelt and compared as mergeAliases does, blanks dropped; a removal matches every spelling of its key.
        result[name] = which === 'addTo' ? mergeAliases([], values as string[], []) : [...(values as string[])];
      }
      return result;
    };
    const addTo = members('addTo');
    const removeFrom = members('removeFrom');
    checkVersionAndVector(update, where, dimensions);
    return {
      id: update.id,
      repository_id: update.repository_id,
      // Values were checked field by field against the collection just above.
      set: set as DocumentUpdate<Doc>['set'],
      addTo: addTo as DocumentUpdate<Doc>['addTo'],
      removeFrom: removeFrom as DocumentUpdate<Doc>['removeFrom'],
      ...(update.vector !== undefined ? { vector: update.vector } : {}),
      ...(update.version !== undefined ? { version: update.version } : {}),
    };
  });
}

/** Checks a removal's arguments: a repository and a list of ids. */
export function validateRemoval(repositoryId: unknown, ids: unknown): asserts ids is string[] {
  requireRepositoryId(repositoryId);
  if (ids === undefined) throw new InvalidSearchRequestError('ids must be an array of non-empty strings');
  validateStringList(ids, 'ids');
}

export function validateRepositoryRemoval(repositoryId: unknown): void {
  requireRepositoryId(repositoryId);
}

/**
 * The most dimensions a vector may have on either adapter: pgvector's `vector` type holds at most
 * 16,000, and so does OpenSearch 2.19's `knn_vector` with the lucene engine ("Dimension value
 * cannot be greater than 16000 for vector with engine: lucene"). The configuration refuses more
 * (`providers.embeddings.dimensions`, src/config/validate.ts).
 */
export const MAX_VECTOR_DIMENSIONS = 16_000;

/** A vector dimension given to a factory: a positive integer, at most MAX_VECTOR_DIMENSIONS. */
export function validateDimensions(dimensions: unknown): asserts dimensions is number {
  if (!Number.isInteger(dimensions) || (dimensions as number) < 1 || (dimensions as number) > MAX_VECTOR_DIMENSIONS) {
    throw new RangeError(`dimensions must be an integer from 1 to ${MAX_VECTOR_DIMENSIONS}`);
  }
}

/** A stored row or `_source` as a hit: times as UTC RFC 3339, counts as numbers, lists never null. */
export function hitFrom<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, stored: Record<string, unknown>, score: number): HitOf<Doc> {
  const hit: Record<string, unknown> = { id: stored.id };
  for (const [name, spec] of Object.entries(collection.fields)) {
    const value = stored[name];
    if (spec.type === 'date') hit[name] = new Date(value as string | Date).toISOString();
    else if (spec.type === 'integer') hit[name] = Number(value ?? 0);
    else if (spec.type === 'text' && spec.list) hit[name] = value ?? [];
    else hit[name] = value;
  }
  hit.score = score;
  // Built from the collection's declared fields, which the definition checked against Doc.
  return hit as HitOf<Doc>;
}

export type { DocumentUpdate, HitOf, IndexedDocument, SearchCollection } from './collection.js';

/**
 * A query's text as both adapters and the report and investigation searches read it: composed
 * (NFC), as the indexed text is, so `Zu\u0308rich` finds Zürich; a sign attached to no term (`cats
 * - dogs`, `Paris -`) left out, as OpenSearch's translation reads it: it is a dash, not a negation
 * (websearch_to_tsquery negated the next term, so the tiers disagreed); and each run of negation
 * signs before a term (`--x`) reduced to what it means, one sign or none. websearch_to_tsquery
 * nests such a run (`---x` is NOT NOT NOT x) and fails past about 32 with "tsquery stack too small".
 */
export function websearchQueryText(text: string): string {
  return text
    .normalize('NFC')
    .replace(/(^|\s)-+(?=\s|$)/g, '$1')
    .replace(/-(?:\s*-)+/g, (run) => ((run.match(/-/g) ?? []).length % 2 === 1 ? '-' : ' '));
}
