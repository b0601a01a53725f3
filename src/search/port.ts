import type { Knex } from 'knex';

/**
 * The SearchIndex port: lexical search, k-NN search over given vectors, and the writes that keep
 * an index in step with the log, for facts and for concepts. Hybrid (RRF) search builds on it
 * (`hybrid.ts`). Adapters: `postgres.ts` (full text on the read-model database, pgvector where
 * present) and, on the distributed tier, `opensearch.ts`. docs/search.md describes both.
 */
export interface FactQuery {
  repositoryId: string;
  /** websearch_to_tsquery syntax: words, "quoted phrases", OR, -negation. Empty lists all facts. */
  query: string;
  /** 0..MAX_PAGE_SIZE; 0 asks for the total only. */
  limit: number;
  /** offset + limit must not pass MAX_RESULT_WINDOW. */
  offset: number;
  /** Only these facts (the concept filters of the facts API); an empty list matches nothing. */
  factIds?: readonly string[];
}

export interface FactHit {
  id: string;
  content: string;
  content_hash: string;
  fact_kind: string;
  status: string;
  /**
   * Relevance (higher is better); 0 when no query was given. Lexical scores are the adapter's
   * own (ts_rank_cd, BM25) and not comparable across adapters; k-NN scores are the cosine
   * similarity (-1..1) on every adapter.
   */
  score: number;
  created_at: string;
}

/** A fact as an index stores it (the `facts` read model's columns, plus an optional vector). */
export interface FactDocument {
  id: string;
  repository_id: string;
  content: string;
  content_hash: string;
  fact_kind: string;
  status: string;
  /** RFC 3339. When a fact is indexed again, the index keeps the earliest time it was given. */
  created_at: string;
  /** Omitted or undefined: keep the stored vector; null: remove it; numbers: set it. */
  vector?: number[] | null;
}

export interface VectorQuery {
  repositoryId: string;
  /** Compared by cosine similarity; must have the index's dimension and not be all zeros. */
  vector: number[];
  /** 1..MAX_K nearest facts of the repository, nearest first. */
  k: number;
  /** Only these facts; an empty list matches nothing. */
  factIds?: readonly string[];
}

/**
 * A partial change to an indexed fact: what later events of the pipeline know (a status, a
 * vector) without the fact's text. Fields left undefined are kept.
 */
export interface FactUpdate {
  id: string;
  repository_id: string;
  status?: string;
  /** null removes the stored vector. */
  vector?: number[] | null;
}

/** A concept as an index stores it (the `concepts` read model's columns, aliases, optional vector). */
export interface ConceptDocument {
  id: string;
  repository_id: string;
  canonical_name: string;
  context: string;
  aliases: string[];
  /**
   * Facts linked when the document was written. Informational on OpenSearch (the projection does
   * not follow links); the API reads live counts from the `concepts` read model.
   */
  fact_count: number;
  /** `active` or `merged`; merged concepts are never found. */
  status: string;
  /** Omitted: keep the stored vector; null: remove it; numbers: set it. */
  vector?: number[] | null;
  /**
   * Version of the concept stream's event that wrote this. An index that keeps text ignores a
   * write not newer than the one it holds, so a redelivered event cannot undo later ones.
   */
  version?: number;
}

/** A partial change to an indexed concept: aliases gained or lost, a vector. */
export interface ConceptUpdate {
  id: string;
  repository_id: string;
  /** Added unless present already (case-insensitively). */
  addAliases?: string[];
  /** Removed wherever present (case-insensitively). */
  removeAliases?: string[];
  vector?: number[] | null;
  /** As ConceptDocument.version. */
  version?: number;
}

export interface ConceptQuery {
  repositoryId: string;
  /** websearch syntax over the canonical name and the aliases; empty lists every active concept. */
  query: string;
  limit: number;
  offset: number;
  /** Only these concepts (the context and small-concept filters of the concepts API). */
  conceptIds?: readonly string[];
}

export interface ConceptVectorQuery {
  repositoryId: string;
  vector: number[];
  k: number;
  conceptIds?: readonly string[];
}

export interface ConceptHit {
  id: string;
  canonical_name: string;
  context: string;
  aliases: string[];
  fact_count: number;
  status: string;
  /** As FactHit.score: the adapter's lexical score, or the cosine for k-NN. */
  score: number;
}

export interface SearchIndex {
  /**
   * Lexical search within one repository, best match first, with the total number of matches.
   * Merged facts (status `merged`) are never found.
   */
  searchFacts(query: FactQuery): Promise<{ total: number; items: FactHit[] }>;
  /**
   * Upserts facts by id. Idempotent: indexing the same documents again leaves the index as it
   * was, so a projection may re-apply an event after a crash or a redelivery.
   */
  indexFacts(docs: FactDocument[]): Promise<void>;
  /** Sets the status and/or vector of indexed facts. Idempotent. */
  updateFacts(updates: FactUpdate[]): Promise<void>;
  /** Removes facts (and their vectors) by id. Idempotent: unknown ids are ignored. */
  removeFacts(repositoryId: string, ids: readonly string[]): Promise<void>;
  /** Removes every document of the repository, facts and concepts. Idempotent. */
  removeRepository(repositoryId: string): Promise<void>;
  /**
   * k-NN by cosine similarity, merged facts excluded. Throws VectorSearchUnavailableError where
   * the adapter has no vectors.
   */
  searchFactsByVector(query: VectorQuery): Promise<{ items: FactHit[] }>;
  /** Upserts concepts by id. Idempotent, as indexFacts. */
  indexConcepts(docs: ConceptDocument[]): Promise<void>;
  /** Changes aliases and/or the vector of indexed concepts. Idempotent. */
  updateConcepts(updates: ConceptUpdate[]): Promise<void>;
  /** Removes concepts (and their vectors) by id. Idempotent. */
  removeConcepts(repositoryId: string, ids: readonly string[]): Promise<void>;
  /** Lexical search over canonical names and aliases; merged concepts are never found. */
  searchConcepts(query: ConceptQuery): Promise<{ total: number; items: ConceptHit[] }>;
  /** k-NN over concept vectors. Throws VectorSearchUnavailableError where the adapter has no vectors. */
  searchConceptsByVector(query: ConceptVectorQuery): Promise<{ items: ConceptHit[] }>;
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

function requireRepositoryId(repositoryId: unknown): void {
  if (typeof repositoryId !== 'string' || repositoryId === '') {
    throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
  }
}

function validateIdFilter(ids: unknown, what: string): void {
  if (ids === undefined) return;
  if (!Array.isArray(ids) || ids.some((id) => typeof id !== 'string' || id === '')) {
    throw new InvalidSearchRequestError(`${what} must be an array of non-empty strings`);
  }
}

export function validateConceptQuery(query: ConceptQuery): void {
  validateFactQuery({ repositoryId: query.repositoryId, query: query.query, limit: query.limit, offset: query.offset });
  validateIdFilter(query.conceptIds, 'conceptIds');
}

export function validateConceptVectorQuery(query: ConceptVectorQuery, dimensions: number): void {
  validateVectorQuery({ repositoryId: query.repositoryId, vector: query.vector, k: query.k }, dimensions);
  validateIdFilter(query.conceptIds, 'conceptIds');
}

export function validateFactQuery(query: FactQuery): void {
  requireRepositoryId(query.repositoryId);
  validateIdFilter(query.factIds, 'factIds');
  if (typeof query.query !== 'string') throw new InvalidSearchRequestError('query must be a string');
  const { limit, offset } = query;
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_PAGE_SIZE) {
    throw new InvalidSearchRequestError(`limit must be an integer from 0 to ${MAX_PAGE_SIZE}`);
  }
  if (!Number.isInteger(offset) || offset < 0) throw new InvalidSearchRequestError('offset must be a non-negative integer');
  if (offset + limit > MAX_RESULT_WINDOW) {
    throw new InvalidSearchRequestError(`offset + limit must not exceed ${MAX_RESULT_WINDOW}; narrow the query instead`);
  }
}

/** Checks a vector against the index's dimension; cosine similarity is undefined for a zero vector. */
export function validateVector(vector: unknown, dimensions: number, what = 'vector'): asserts vector is number[] {
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

export function validateVectorQuery(query: VectorQuery, dimensions: number): void {
  requireRepositoryId(query.repositoryId);
  validateIdFilter(query.factIds, 'factIds');
  if (!Number.isInteger(query.k) || query.k < 1 || query.k > MAX_K) {
    throw new InvalidSearchRequestError(`k must be an integer from 1 to ${MAX_K}`);
  }
  validateVector(query.vector, dimensions);
}

/**
 * Checks documents before any is written (a batch is all or nothing at this gate) and returns
 * them with created_at normalised to UTC RFC 3339, so stored times compare as strings.
 * `dimensions` null: the adapter keeps no vectors, so any vector is accepted and ignored.
 */
export function normaliseFactDocuments(docs: FactDocument[], dimensions: number | null): FactDocument[] {
  if (!Array.isArray(docs)) throw new InvalidSearchRequestError('docs must be an array');
  const seen = new Set<string>();
  return docs.map((doc, position) => {
    const where = `docs[${position}]`;
    if (doc === null || typeof doc !== 'object') throw new InvalidSearchRequestError(`${where} must be an object`);
    for (const field of ['id', 'repository_id', 'content_hash', 'fact_kind', 'status'] as const) {
      if (typeof doc[field] !== 'string' || doc[field] === '') throw new InvalidSearchRequestError(`${where}.${field} must be a non-empty string`);
    }
    if (typeof doc.content !== 'string') throw new InvalidSearchRequestError(`${where}.content must be a string`);
    if (seen.has(doc.id)) throw new InvalidSearchRequestError(`${where}.id ${doc.id} appears twice in one batch`);
    seen.add(doc.id);
    const createdAt = typeof doc.created_at === 'string' ? new Date(doc.created_at) : null;
    if (!createdAt || Number.isNaN(createdAt.getTime())) throw new InvalidSearchRequestError(`${where}.created_at must be an RFC 3339 time`);
    if (doc.vector !== undefined && doc.vector !== null && dimensions !== null) validateVector(doc.vector, dimensions, `${where}.vector`);
    return { ...doc, created_at: createdAt.toISOString() };
  });
}

/** Checks a removal's arguments: a repository and a list of ids. */
export function validateRemoval(repositoryId: unknown, ids: unknown): asserts ids is string[] {
  requireRepositoryId(repositoryId);
  validateIdFilter(ids, 'ids');
  if (ids === undefined) throw new InvalidSearchRequestError('ids must be an array of non-empty strings');
}

/** Checks partial fact updates before any is written, and their vectors against the dimension (null: no vectors kept). */
export function validateFactUpdates(updates: FactUpdate[], dimensions: number | null): void {
  if (!Array.isArray(updates)) throw new InvalidSearchRequestError('updates must be an array');
  updates.forEach((update, position) => {
    const where = `updates[${position}]`;
    if (update === null || typeof update !== 'object') throw new InvalidSearchRequestError(`${where} must be an object`);
    for (const field of ['id', 'repository_id'] as const) {
      if (typeof update[field] !== 'string' || update[field] === '') throw new InvalidSearchRequestError(`${where}.${field} must be a non-empty string`);
    }
    if (update.status !== undefined && (typeof update.status !== 'string' || update.status === '')) {
      throw new InvalidSearchRequestError(`${where}.status must be a non-empty string`);
    }
    if (update.vector !== undefined && update.vector !== null && dimensions !== null) validateVector(update.vector, dimensions, `${where}.vector`);
  });
}

export function validateConceptUpdates(updates: ConceptUpdate[], dimensions: number | null): void {
  if (!Array.isArray(updates)) throw new InvalidSearchRequestError('updates must be an array');
  updates.forEach((update, position) => {
    const where = `updates[${position}]`;
    if (update === null || typeof update !== 'object') throw new InvalidSearchRequestError(`${where} must be an object`);
    for (const field of ['id', 'repository_id'] as const) {
      if (typeof update[field] !== 'string' || update[field] === '') throw new InvalidSearchRequestError(`${where}.${field} must be a non-empty string`);
    }
    for (const field of ['addAliases', 'removeAliases'] as const) {
      const aliases = update[field];
      if (aliases !== undefined && (!Array.isArray(aliases) || aliases.some((alias) => typeof alias !== 'string'))) {
        throw new InvalidSearchRequestError(`${where}.${field} must be an array of strings`);
      }
    }
    if (update.vector !== undefined && update.vector !== null && dimensions !== null) validateVector(update.vector, dimensions, `${where}.vector`);
  });
}

/** Checks concept documents before any is written; aliases are deduplicated case-insensitively. */
export function normaliseConceptDocuments(docs: ConceptDocument[], dimensions: number | null): ConceptDocument[] {
  if (!Array.isArray(docs)) throw new InvalidSearchRequestError('docs must be an array');
  const seen = new Set<string>();
  return docs.map((doc, position) => {
    const where = `docs[${position}]`;
    if (doc === null || typeof doc !== 'object') throw new InvalidSearchRequestError(`${where} must be an object`);
    for (const field of ['id', 'repository_id', 'canonical_name', 'context', 'status'] as const) {
      if (typeof doc[field] !== 'string' || doc[field] === '') throw new InvalidSearchRequestError(`${where}.${field} must be a non-empty string`);
    }
    if (!Array.isArray(doc.aliases) || doc.aliases.some((alias) => typeof alias !== 'string')) {
      throw new InvalidSearchRequestError(`${where}.aliases must be an array of strings`);
    }
    if (!Number.isInteger(doc.fact_count) || doc.fact_count < 0) throw new InvalidSearchRequestError(`${where}.fact_count must be a non-negative integer`);
    if (seen.has(doc.id)) throw new InvalidSearchRequestError(`${where}.id ${doc.id} appears twice in one batch`);
    seen.add(doc.id);
    if (doc.vector !== undefined && doc.vector !== null && dimensions !== null) validateVector(doc.vector, dimensions, `${where}.vector`);
    return { ...doc, aliases: mergeAliases([], doc.aliases, []) };
  });
}

/** `current` plus `added` minus `removed`, case-insensitively, first spelling kept, in order. */
export function mergeAliases(current: readonly string[], added: readonly string[], removed: readonly string[]): string[] {
  const gone = new Set(removed.map((alias) => alias.toLowerCase()));
  const result: string[] = [];
  const seen = new Set<string>();
  for (const alias of [...current, ...added]) {
    const key = alias.toLowerCase();
    if (alias.trim() === '' || seen.has(key) || gone.has(key)) continue;
    seen.add(key);
    result.push(alias);
  }
  return result;
}

/** A vector dimension given to a factory: a positive integer (OpenSearch's knn_vector allows up to 16000). */
export function validateDimensions(dimensions: unknown): asserts dimensions is number {
  if (!Number.isInteger(dimensions) || (dimensions as number) < 1 || (dimensions as number) > 16_000) {
    throw new RangeError('dimensions must be an integer from 1 to 16000');
  }
}
