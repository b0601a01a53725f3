import type { Knex } from 'knex';
import { SearchIndexMigrationError } from '../port.js';
import { chunked } from '../../util/chunked.js';

export type Executor = Knex | Knex.Transaction;

/**
 * Rows one INSERT writes. PostgreSQL's wire protocol counts a statement's parameters in 16 bits
 * (at most 65,535): one insert of a 40,000-fact page's vectors (three parameters a row) was
 * refused, and the search-index projection stopped on it. Deletions name their ids as one array
 * parameter (`= ANY(?)`) instead, however many.
 */
export const VECTOR_ROWS_PER_STATEMENT = 5000;

/** Rows a vector table grows by before its first ANALYZE (see keepAnalyzed). */
const ANALYZE_MIN_ROWS = 200;

/** A collection's vector table: `<table> (<key> text pk, repository_id text, embedding vector(N))`. */
export interface VectorTable {
  readonly table: string;
  readonly key: string;
}

/** pgvector's `[1,2,3]` text form; numbers only (validated), so nothing to escape. */
export function vectorLiteral(vector: number[]): string {
  return `[${vector.join(',')}]`;
}

/** pgvector's default `hnsw.ef_search`, and the least this adapter asks for. */
const DEFAULT_EF_SEARCH = 40;

/**
 * pgvector's HNSW index holds `vector` columns of at most 2,000 dimensions ("column cannot have
 * more than 2000 dimensions for hnsw index") and `halfvec` ones (pgvector 0.7) of at most 4,000;
 * the `vector` type itself holds 16,000 (MAX_VECTOR_DIMENSIONS, ../port.ts).
 */
const HNSW_MAX_VECTOR_DIMENSIONS = 2000;
const HNSW_MAX_HALFVEC_DIMENSIONS = 4000;

/**
 * What serves a vector table's k-NN: pgvector's HNSW index over the column (up to 2,000
 * dimensions), over the column as unit-length half precision (up to 4,000, `halfvec` in pgvector
 * 0.7 and later), or no index: each query then compares the repository's vectors exactly.
 */
type NearestIndex = 'vector' | 'halfvec' | null;

/** Whether pgvector's `version` (`major.minor…`, from pg_extension) is `0.minor` or later. */
function pgvectorAtLeast(version: string, minor: number): boolean {
  const [major, found] = version.split('.').map(Number);
  return major > 0 || found >= minor;
}

/** The index a table of `dimensions` gets with pgvector `version` when it is to have one. */
function nearestIndexFor(dimensions: number, version: string): NearestIndex {
  if (dimensions <= HNSW_MAX_VECTOR_DIMENSIONS) return 'vector';
  const hasHalfvec = pgvectorAtLeast(version, 7);
  return dimensions <= HNSW_MAX_HALFVEC_DIMENSIONS && hasHalfvec ? 'halfvec' : null;
}

/**
 * The cosine distance an inner k-NN query orders by: the expression its table's index holds, so
 * the planner can walk the index. Normalised before the cast: halfvec refuses a component past
 * ±65,504, and cosine does not change with a vector's length.
 */
function indexedDistance(index: NearestIndex, dimensions: number, column: string, query: string): string {
  if (index !== 'halfvec') return `${column} <=> ${query}`;
  const half = (vector: string) => `l2_normalize(${vector})::halfvec(${dimensions})`;
  return `${half(column)} <=> ${half(query)}`;
}

/** The HNSW index's operator class over its column or expression. */
function indexedColumn(index: Exclude<NearestIndex, null>, dimensions: number): string {
  return index === 'vector' ? 'embedding vector_cosine_ops' : `(l2_normalize(embedding)::halfvec(${dimensions})) halfvec_cosine_ops`;
}

/** What a k-NN statement needs to know of its table: whether iterative scans exist, and its index. */
interface TableInfo {
  iterativeScan: boolean;
  index: NearestIndex;
}

/**
 * The vector tables of the Postgres adapter, one per collection with vectors: created on first
 * use with an HNSW cosine index where pgvector can build one for the dimension (nearestIndexFor;
 * beyond 4,000 none, so k-NN compares exactly), written, cleared, and searched with the HNSW
 * settings k-NN needs. One embedding model per deployment, so one dimension for every table.
 *
 * With `hnswIndex: false` (the graphs in memory answer k-NN, `neighbourGraphs.ts`) a table has no
 * HNSW index (one left by an earlier version is dropped): k-NN statements then look vectors up
 * by id, and keeping that index cost each insert a walk of the graph inside the database.
 */
export function createVectorTables(dimensions: number, options: { oneConnection?: boolean; hnswIndex?: boolean } = {}) {
  const hnswIndex = options.hnswIndex !== false;
  const settled = new Map<string, TableInfo>();
  const inFlight = new Map<string, Promise<TableInfo>>();
  /** On one connection: the session's HNSW setting, set once (see nearest). */
  let sessionSettings: Promise<void> | null = null;
  /** Per table: rows counted by its last ANALYZE, and rows written since. */
  const growth = new Map<string, { analyzed: number; written: number }>();

  /**
   * Keeps the planner's statistics of a vector table in step with its size. Without them (PGlite
   * runs no autovacuum) the planner takes a repository's rows for a few and sorts all of them by
   * distance instead of walking the HNSW index, so each k-NN query costs time in proportion to
   * the repository (at 12,000 facts about 10× the indexed query). ANALYZE runs whenever the
   * table has grown by as many rows as it held at the last one (at least ANALYZE_MIN_ROWS), so
   * a growing table is analyzed a logarithmic number of times.
   */
  async function keepAnalyzed(executor: Executor, table: string, written: number): Promise<void> {
    let known = growth.get(table);
    if (!known) {
      const stats = await executor.raw(`SELECT reltuples FROM pg_class WHERE oid = to_regclass(?)`, [table]);
      known = { analyzed: Math.max(0, Number(stats.rows[0]?.reltuples ?? 0)), written: 0 };
      growth.set(table, known);
    }
    known.written += written;
    if (known.written < Math.max(ANALYZE_MIN_ROWS, known.analyzed)) return;
    known.analyzed += known.written;
    known.written = 0;
    await executor.raw(`ANALYZE ${table}`);
  }

  /**
   * Creates a vector table (idempotent DDL, so racing processes are harmless). Run inside a
   * caller's transaction that later rolls back, the table vanishes: a missing-table error resets
   * the memo (see withTable).
   */
  async function ensure(executor: Executor, { table, key }: VectorTable): Promise<TableInfo> {
    const existing = await executor.raw(
      `SELECT format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
        WHERE a.attrelid = to_regclass(?) AND a.attname = 'embedding' AND NOT a.attisdropped`,
      [table],
    );
    const type: string | undefined = existing.rows[0]?.type;
    if (type !== undefined && type !== `vector(${dimensions})`) {
      throw new SearchIndexMigrationError(
        `${table}.embedding is ${type} but the index is configured for vector(${dimensions}): ` +
          `drop ${table} and re-embed (a new embedding model means new vectors)`,
      );
    }
    const version = String((await executor.raw(`SELECT extversion FROM pg_extension WHERE extname = 'vector'`)).rows[0]?.extversion ?? '0.0');
    const index = hnswIndex ? nearestIndexFor(dimensions, version) : null;
    if (type === undefined) {
      await executor.raw(`CREATE TABLE IF NOT EXISTS ${table} (
        ${key} text PRIMARY KEY,
        repository_id text NOT NULL,
        embedding vector(${dimensions}) NOT NULL
      )`);
      await executor.raw(`CREATE INDEX IF NOT EXISTS ${table}_repository ON ${table} (repository_id)`);
    }
    // Also on a table that exists: before halfvec indexes, a first use outside a transaction
    // created the table and then failed on its index, leaving the table without one.
    if (index !== null) await executor.raw(`CREATE INDEX IF NOT EXISTS ${table}_embedding ON ${table} USING hnsw (${indexedColumn(index, dimensions)})`);
    if (!hnswIndex) await executor.raw(`DROP INDEX IF EXISTS ${table}_embedding`);
    // Iterative HNSW scans (pgvector 0.8) keep scanning until k rows pass the repository filter.
    return { iterativeScan: pgvectorAtLeast(version, 8), index };
  }

  /**
   * A table's readiness, checked once per process. Only non-transaction callers share an attempt in
   * flight: a caller inside a transaction holds its connection, and waiting there for an attempt
   * on another connection deadlocks on PGlite's one connection (that attempt waits for this
   * transaction to end). Such a caller checks on its own transaction instead (idempotent DDL).
   */
  function tableReady(executor: Executor, vectors: VectorTable): Promise<TableInfo> {
    const known = settled.get(vectors.table);
    if (known) return Promise.resolve(known);
    const inTransaction = (executor as Knex.Transaction).isTransaction === true;
    const shared = inTransaction ? undefined : inFlight.get(vectors.table);
    if (shared) return shared;
    const attempt = ensure(executor, vectors).then((info) => {
      settled.set(vectors.table, info);
      return info;
    });
    if (!inTransaction) {
      inFlight.set(vectors.table, attempt);
      // A failed attempt (connection lost, dimension mismatch) is not remembered: the next call tries again.
      const forget = () => {
        if (inFlight.get(vectors.table) === attempt) inFlight.delete(vectors.table);
      };
      attempt.then(forget, forget);
    }
    return attempt;
  }

  async function withTable<T>(executor: Executor, vectors: VectorTable, body: (info: TableInfo) => Promise<T>): Promise<T> {
    try {
      return await body(await tableReady(executor, vectors));
    } catch (error) {
      if ((error as { code?: string }).code !== '42P01') throw error;
      // Created inside a transaction that rolled back: create it again, once.
      settled.delete(vectors.table);
      return await body(await tableReady(executor, vectors));
    }
  }

  return {
    /** Sets (numbers) or removes (null) vectors; undefined leaves them. */
    async write(executor: Executor, vectors: VectorTable, items: readonly { id: string; repository_id: string; vector?: number[] | null }[]): Promise<void> {
      const withVector = items.filter((item): item is typeof item & { vector: number[] } => Array.isArray(item.vector));
      const withoutVector = items.filter((item) => item.vector === null).map((item) => item.id);
      if (withVector.length === 0 && withoutVector.length === 0) return;
      await withTable(executor, vectors, async () => {
        if (withVector.length > 0) {
          // One row per id: the last vector given wins.
          const latest = new Map(withVector.map((item) => [item.id, item]));
          for (const rows of chunked([...latest.values()], VECTOR_ROWS_PER_STATEMENT)) {
            await executor(vectors.table)
              .insert(rows.map((item) => ({ [vectors.key]: item.id, repository_id: item.repository_id, embedding: vectorLiteral(item.vector) })))
              .onConflict(vectors.key)
              .merge(['repository_id', 'embedding']);
          }
          await keepAnalyzed(executor, vectors.table, latest.size);
        }
        if (withoutVector.length > 0) await executor(vectors.table).whereRaw('?? = ANY(?)', [vectors.key, withoutVector]).delete();
      });
    },

    /** Removes the vectors of `ids`, or of the whole repository (null). */
    async remove(executor: Executor, vectors: VectorTable, repositoryId: string, ids: readonly string[] | null): Promise<void> {
      if (ids !== null && ids.length === 0) return;
      await withTable(executor, vectors, async () => {
        const query = executor(vectors.table).where({ repository_id: repositoryId });
        if (ids !== null) query.whereRaw('?? = ANY(?)', [vectors.key, [...ids]]);
        await query.delete();
      });
    },

    /**
     * Runs a k-NN query with the HNSW settings it needs. On a server, `SET LOCAL` in a
     * transaction (the caller's, or one of our own). On a database that is one connection for
     * the process's life (PGlite), outside a transaction, the iterative scan is set once for the
     * session and the query is one statement: `body` gets the `ef_search` its statement must set
     * itself (`efSearchInStatement`, see knnManyOn), or null when pgvector's default of 40
     * covers k. One round trip instead of five (BEGIN, two settings, the query, COMMIT), each a
     * message to PGlite's thread while the connection is held, with the same settings.
     * `distance(column, query)` is the SQL the inner query orders by (indexedDistance).
     */
    nearest<T>(
      executor: Executor,
      vectors: VectorTable,
      k: number,
      body: (trx: Executor, efSearchInStatement: number | null, distance: (column: string, query: string) => string) => Promise<T>,
    ): Promise<T> {
      return withTable(executor, vectors, async ({ iterativeScan, index }) => {
        const distance = (column: string, query: string) => indexedDistance(index, dimensions, column, query);
        // No HNSW index: nothing for its settings to steer.
        if (index === null) return body(executor, null, distance);
        const inTransaction = (executor as Knex.Transaction).isTransaction === true;
        if (options.oneConnection && !inTransaction) {
          if (iterativeScan) {
            sessionSettings ??= executor.raw(`SET hnsw.iterative_scan = strict_order`).then(() => undefined);
            // A failed SET is not remembered: the next query tries again.
            await sessionSettings.catch((error: unknown) => {
              sessionSettings = null;
              throw error;
            });
          }
          return body(executor, k <= DEFAULT_EF_SEARCH ? null : k, distance);
        }
        const search = async (trx: Executor) => {
          if (iterativeScan) await trx.raw(`SET LOCAL hnsw.iterative_scan = strict_order`);
          // ef_search bounds how many neighbours HNSW returns: at least k.
          await trx.raw(`SELECT set_config('hnsw.ef_search', ?, true)`, [String(Math.max(DEFAULT_EF_SEARCH, k))]);
          return body(trx, null, distance);
        };
        return inTransaction ? search(executor) : executor.transaction((trx) => search(trx));
      });
    },
  };
}
