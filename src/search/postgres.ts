import type { Knex } from 'knex';
import {
  normaliseConceptDocuments,
  normaliseFactDocuments,
  validateConceptQuery,
  validateConceptUpdates,
  validateConceptVectorQuery,
  validateFactUpdates,
  validateRemoval,
  validateDimensions,
  validateFactQuery,
  validateVectorQuery,
  InvalidSearchRequestError,
  SearchIndexMigrationError,
  VectorSearchUnavailableError,
  type ConceptDocument,
  type ConceptHit,
  type ConceptQuery,
  type ConceptUpdate,
  type ConceptVectorQuery,
  type FactDocument,
  type FactUpdate,
  type FactHit,
  type FactQuery,
  type SearchIndex,
  type VectorQuery,
} from './port.js';

export interface PostgresSearchOptions {
  /** Whether the database has pgvector (`Database.hasVector`). Without it there is no k-NN. */
  hasVector?: boolean;
  /**
   * Dimension of the stored vectors: one embedding model per deployment, so one fixed dimension
   * (the `fact_vectors.embedding` column type). Without it there is no k-NN.
   */
  vectorDimensions?: number;
}

type Executor = Knex | Knex.Transaction;

type FactRow = Omit<FactHit, 'score' | 'created_at'> & { score: number | string; created_at: Date | string };

const hitColumns = ['id', 'content', 'content_hash', 'fact_kind', 'status', 'created_at'];

function toHit({ score, created_at, ...row }: FactRow): FactHit {
  return { ...row, score: Number(score), created_at: new Date(created_at).toISOString() };
}

/** pgvector's `[1,2,3]` text form; numbers only (validated), so nothing to escape. */
function vectorLiteral(vector: number[]): string {
  return `[${vector.join(',')}]`;
}

type ConceptRow = Omit<ConceptHit, 'score' | 'fact_count'> & { score: number | string; fact_count: number | string };

function toConceptHit({ score, fact_count, ...row }: ConceptRow): ConceptHit {
  return { ...row, aliases: row.aliases ?? [], fact_count: Number(fact_count), score: Number(score) };
}

/** The two vector tables: one embedding model per deployment, so one dimension for both. */
type VectorTable = 'fact_vectors' | 'concept_vectors';
const vectorKey: Record<VectorTable, string> = { fact_vectors: 'fact_id', concept_vectors: 'concept_id' };

/**
 * Search on the read-model database.
 *
 * Lexical: the `facts.search` tsvector column (english configuration), `websearch_to_tsquery`
 * for the query and `ts_rank_cd` for ranking, ties broken by age so pages are stable. The
 * `facts` read model is the index, so `indexFacts` writes no text.
 *
 * Vectors: with pgvector and a configured dimension, `indexFacts` keeps the documents' vectors in
 * `fact_vectors (fact_id pk, repository_id, embedding vector(N))` with an HNSW cosine index,
 * created on first use; `searchFactsByVector` answers from it, joined to `facts`. Without
 * pgvector (the PostgreSQL server of the distributed tier) vectors are ignored on write and
 * `searchFactsByVector` throws VectorSearchUnavailableError: vectors live in OpenSearch there.
 *
 * Concepts alike: the `concepts` read model (its `search` tsvector over the canonical name and
 * the aliases, `simple` configuration: names are not stemmed) is the lexical index, so `indexConcepts` and alias updates write no text; concept
 * vectors live in `concept_vectors (concept_id pk, repository_id, embedding vector(N))`.
 * Merged facts and merged concepts are never found.
 */
export function createPostgresSearchIndex(knex: Knex, options: PostgresSearchOptions = {}): SearchIndex {
  const dimensions = options.hasVector && options.vectorDimensions !== undefined ? options.vectorDimensions : null;
  if (dimensions !== null) validateDimensions(dimensions);
  const vectorTables = new Map<VectorTable, Promise<{ iterativeScan: boolean }>>();

  /**
   * Creates a vector table once per adapter (idempotent DDL, so racing processes are harmless).
   * Run inside a caller's transaction that later rolls back, the table vanishes: a missing-table
   * error resets the memo (see withVectorTable).
   */
  async function ensureVectorTable(executor: Executor, table: VectorTable): Promise<{ iterativeScan: boolean }> {
    if (dimensions === null) throw new Error('unreachable: no vector dimension');
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
    if (type === undefined) {
      await executor.raw(`CREATE TABLE IF NOT EXISTS ${table} (
        ${vectorKey[table]} text PRIMARY KEY,
        repository_id text NOT NULL,
        embedding vector(${dimensions}) NOT NULL
      )`);
      await executor.raw(`CREATE INDEX IF NOT EXISTS ${table}_repository ON ${table} (repository_id)`);
      await executor.raw(`CREATE INDEX IF NOT EXISTS ${table}_embedding ON ${table} USING hnsw (embedding vector_cosine_ops)`);
    }
    // Iterative HNSW scans (pgvector 0.8) keep scanning until k rows pass the repository filter.
    const version = await executor.raw(`SELECT extversion FROM pg_extension WHERE extname = 'vector'`);
    const [major, minor] = String(version.rows[0]?.extversion ?? '0.0').split('.').map(Number);
    return { iterativeScan: major > 0 || minor >= 8 };
  }

  function vectorTableReady(executor: Executor, table: VectorTable): Promise<{ iterativeScan: boolean }> {
    const known = vectorTables.get(table);
    if (known) return known;
    const attempt = ensureVectorTable(executor, table);
    vectorTables.set(table, attempt);
    // A failed attempt (connection lost, dimension mismatch) is not remembered: the next call tries again.
    attempt.catch(() => {
      if (vectorTables.get(table) === attempt) vectorTables.delete(table);
    });
    return attempt;
  }

  async function withVectorTable<T>(executor: Executor, table: VectorTable, body: (info: { iterativeScan: boolean }) => Promise<T>): Promise<T> {
    try {
      return await body(await vectorTableReady(executor, table));
    } catch (error) {
      if ((error as { code?: string }).code !== '42P01') throw error;
      // Created inside a transaction that rolled back: create it again, once.
      vectorTables.delete(table);
      return await body(await vectorTableReady(executor, table));
    }
  }

  /** Sets (numbers) or removes (null) vectors of one table; undefined leaves them. */
  async function writeVectors(
    executor: Executor,
    table: VectorTable,
    items: { id: string; repository_id: string; vector?: number[] | null }[],
  ): Promise<void> {
    if (dimensions === null) return; // no pgvector here: vectors live elsewhere
    const withVector = items.filter((item): item is typeof item & { vector: number[] } => Array.isArray(item.vector));
    const withoutVector = items.filter((item) => item.vector === null).map((item) => item.id);
    if (withVector.length === 0 && withoutVector.length === 0) return;
    const key = vectorKey[table];
    await withVectorTable(executor, table, async () => {
      if (withVector.length > 0) {
        // One row per id: the last vector given wins.
        const latest = new Map(withVector.map((item) => [item.id, item]));
        await executor(table)
          .insert([...latest.values()].map((item) => ({ [key]: item.id, repository_id: item.repository_id, embedding: vectorLiteral(item.vector) })))
          .onConflict(key)
          .merge(['repository_id', 'embedding']);
      }
      if (withoutVector.length > 0) await executor(table).whereIn(key, withoutVector).delete();
    });
  }

  async function removeVectors(executor: Executor, table: VectorTable, repositoryId: string, ids: readonly string[] | null): Promise<void> {
    if (dimensions === null) return;
    if (ids !== null && ids.length === 0) return;
    await withVectorTable(executor, table, async () => {
      const query = executor(table).where({ repository_id: repositoryId });
      if (ids !== null) query.whereIn(vectorKey[table], [...ids]);
      await query.delete();
    });
  }

  function unavailable(): VectorSearchUnavailableError {
    return new VectorSearchUnavailableError(
      options.hasVector ? 'no vector dimension is configured for the Postgres search index' : 'this database has no pgvector extension',
    );
  }

  /** Runs a k-NN query with the HNSW settings it needs (SET LOCAL needs a transaction: the caller's, or one of our own). */
  function nearest<T>(executor: Executor, table: VectorTable, k: number, body: (trx: Executor) => Promise<T>): Promise<T> {
    return withVectorTable(executor, table, ({ iterativeScan }) => {
      const search = async (trx: Executor) => {
        if (iterativeScan) await trx.raw(`SET LOCAL hnsw.iterative_scan = strict_order`);
        // ef_search bounds how many neighbours HNSW returns: at least k.
        await trx.raw(`SELECT set_config('hnsw.ef_search', ?, true)`, [String(Math.max(40, k))]);
        return body(trx);
      };
      return (executor as Knex.Transaction).isTransaction === true ? search(executor) : executor.transaction((trx) => search(trx));
    });
  }

  /** Page rows of a query carrying `count(*) OVER () AS total`; counts separately when the page is empty. */
  async function paged<Row extends { total: string | number }>(
    rows: Row[],
    offset: number,
    limit: number,
    count: () => Promise<number>,
  ): Promise<{ total: number; rows: Omit<Row, 'total'>[] }> {
    let total = rows.length === 0 ? 0 : Number(rows[0].total);
    // Past the last page, or a count-only request: count separately.
    if (rows.length === 0 && (offset > 0 || limit === 0)) total = await count();
    return { total, rows: rows.map(({ total: _total, ...row }) => row) };
  }

  const aliasesColumn = (executor: Executor, conceptColumn: string) =>
    executor.raw(
      // The concepts projection keeps the canonical name among the alias rows (lookup by name); it is no alias.
      `coalesce((SELECT array_agg(ca.alias ORDER BY ca.alias) FROM concept_aliases ca
         WHERE ca.concept_id = ${conceptColumn} AND ca.alias_lower <> lower(${conceptColumn.replace(/\.id$/, '.canonical_name')})), ARRAY[]::text[]) AS aliases`,
    );
  const conceptColumns = ['id', 'canonical_name', 'context', 'fact_count', 'status'];

  function view(executor: Executor): SearchIndex {
    return {
      async searchFacts(query: FactQuery) {
        validateFactQuery(query);
        const { repositoryId, limit, offset, factIds } = query;
        if (factIds !== undefined && factIds.length === 0) return { total: 0, items: [] };
        const text = query.query.trim();
        const base = executor('facts').where('facts.repository_id', repositoryId).whereNot('facts.status', 'merged');
        if (factIds !== undefined) base.whereIn('facts.id', [...factIds]);
        const rows: (FactRow & { total: string | number })[] =
          limit === 0
            ? []
            : text === ''
              ? await base
                  .clone()
                  .select(hitColumns)
                  .select(executor.raw('0 AS score'), executor.raw('count(*) OVER () AS total'))
                  .orderBy([{ column: 'created_at', order: 'desc' }, { column: 'id' }])
                  .limit(limit)
                  .offset(offset)
              : await base
                  .clone()
                  .crossJoin(executor.raw(`websearch_to_tsquery('english', ?) AS q`, [text]))
                  .whereRaw('facts.search @@ q')
                  .select(hitColumns.map((column) => `facts.${column}`))
                  .select(executor.raw('ts_rank_cd(facts.search, q) AS score'), executor.raw('count(*) OVER () AS total'))
                  .orderBy([{ column: 'score', order: 'desc' }, { column: 'facts.created_at' }, { column: 'facts.id' }])
                  .limit(limit)
                  .offset(offset);
        const page = await paged(rows, offset, limit, async () => {
          const counted =
            text === ''
              ? await base.clone().count<{ n: string }[]>('* as n')
              : await base.clone().whereRaw(`facts.search @@ websearch_to_tsquery('english', ?)`, [text]).count<{ n: string }[]>('* as n');
          return Number(counted[0].n);
        });
        return { total: page.total, items: page.rows.map(toHit) };
      },

      async indexFacts(docs: FactDocument[]) {
        const checked = normaliseFactDocuments(docs, dimensions);
        // Text lives in `facts`; only vectors are this adapter's.
        await writeVectors(executor, 'fact_vectors', checked);
      },

      async updateFacts(updates: FactUpdate[]) {
        validateFactUpdates(updates, dimensions);
        // Status lives in `facts` (the facts projection); only vectors are this adapter's.
        await writeVectors(executor, 'fact_vectors', updates);
      },

      async removeFacts(repositoryId: string, ids: readonly string[]) {
        validateRemoval(repositoryId, ids);
        await removeVectors(executor, 'fact_vectors', repositoryId, ids);
      },

      async removeRepository(repositoryId: string) {
        if (typeof repositoryId !== 'string' || repositoryId === '') throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
        // The facts and concepts rows belong to their projections; only the vectors are this adapter's.
        await removeVectors(executor, 'fact_vectors', repositoryId, null);
        await removeVectors(executor, 'concept_vectors', repositoryId, null);
      },

      async searchFactsByVector(query: VectorQuery) {
        if (dimensions === null) throw unavailable();
        validateVectorQuery(query, dimensions);
        if (query.factIds !== undefined && query.factIds.length === 0) return { items: [] };
        return nearest(executor, 'fact_vectors', query.k, async (trx) => {
          const literal = vectorLiteral(query.vector);
          // The inner query orders by distance alone, so the HNSW index can serve it; ties and
          // the facts columns are settled on the k rows it returns. Only vectors of live facts
          // (a row that is not merged) count in the inner query, so k live facts come back, even
          // when a late vector arrived after its fact was merged and removed (Kafka: another
          // partition).
          const inner = trx('fact_vectors')
            .where('fact_vectors.repository_id', query.repositoryId)
            .whereExists(trx('facts as live').whereRaw('live.id = fact_vectors.fact_id').whereNot('live.status', 'merged').select(trx.raw('1')))
            .select('fact_id', trx.raw('embedding <=> ?::vector AS distance', [literal]))
            .orderByRaw('embedding <=> ?::vector', [literal])
            .limit(query.k);
          if (query.factIds !== undefined) inner.whereIn('fact_vectors.fact_id', [...query.factIds]);
          const rows: FactRow[] = await trx
            .from(inner.as('n'))
            .join('facts as f', 'f.id', 'n.fact_id')
            .select(hitColumns.map((column) => `f.${column}`))
            .select(trx.raw('1 - n.distance AS score'))
            .orderBy([{ column: 'n.distance' }, { column: 'f.id' }]);
          return { items: rows.map(toHit) };
        });
      },

      async indexConcepts(docs: ConceptDocument[]) {
        const checked = normaliseConceptDocuments(docs, dimensions);
        // Names and aliases live in `concepts` and `concept_aliases`; only vectors are this adapter's.
        await writeVectors(executor, 'concept_vectors', checked);
      },

      async updateConcepts(updates: ConceptUpdate[]) {
        validateConceptUpdates(updates, dimensions);
        await writeVectors(executor, 'concept_vectors', updates);
      },

      async removeConcepts(repositoryId: string, ids: readonly string[]) {
        validateRemoval(repositoryId, ids);
        await removeVectors(executor, 'concept_vectors', repositoryId, ids);
      },

      async searchConcepts(query: ConceptQuery) {
        validateConceptQuery(query);
        const { repositoryId, limit, offset, conceptIds } = query;
        if (conceptIds !== undefined && conceptIds.length === 0) return { total: 0, items: [] };
        const text = query.query.trim();
        const base = executor('concepts').where('concepts.repository_id', repositoryId).whereNot('concepts.status', 'merged');
        if (conceptIds !== undefined) base.whereIn('concepts.id', [...conceptIds]);
        const columns = conceptColumns.map((column) => `concepts.${column}`);
        const rows: (ConceptRow & { total: string | number })[] =
          limit === 0
            ? []
            : text === ''
              ? await base
                  .clone()
                  .select(columns)
                  .select(aliasesColumn(executor, 'concepts.id'), executor.raw('0 AS score'), executor.raw('count(*) OVER () AS total'))
                  .orderBy([{ column: 'concepts.canonical_name' }, { column: 'concepts.id' }])
                  .limit(limit)
                  .offset(offset)
              : await base
                  .clone()
                  .crossJoin(executor.raw(`websearch_to_tsquery('simple', ?) AS q`, [text]))
                  .whereRaw('concepts.search @@ q')
                  .select(columns)
                  .select(
                    aliasesColumn(executor, 'concepts.id'),
                    executor.raw('ts_rank_cd(concepts.search, q) AS score'),
                    executor.raw('count(*) OVER () AS total'),
                  )
                  .orderBy([{ column: 'score', order: 'desc' }, { column: 'concepts.canonical_name' }, { column: 'concepts.id' }])
                  .limit(limit)
                  .offset(offset);
        const page = await paged(rows, offset, limit, async () => {
          const counted =
            text === ''
              ? await base.clone().count<{ n: string }[]>('* as n')
              : await base.clone().whereRaw(`concepts.search @@ websearch_to_tsquery('simple', ?)`, [text]).count<{ n: string }[]>('* as n');
          return Number(counted[0].n);
        });
        return { total: page.total, items: page.rows.map(toConceptHit) };
      },

      async searchConceptsByVector(query: ConceptVectorQuery) {
        if (dimensions === null) throw unavailable();
        validateConceptVectorQuery(query, dimensions);
        if (query.conceptIds !== undefined && query.conceptIds.length === 0) return { items: [] };
        return nearest(executor, 'concept_vectors', query.k, async (trx) => {
          const literal = vectorLiteral(query.vector);
          const inner = trx('concept_vectors')
            .where('concept_vectors.repository_id', query.repositoryId)
            .whereNotExists(
              trx('concepts as m').whereRaw('m.id = concept_vectors.concept_id').where('m.status', 'merged').select(trx.raw('1')),
            )
            .select('concept_id', trx.raw('embedding <=> ?::vector AS distance', [literal]))
            .orderByRaw('embedding <=> ?::vector', [literal])
            .limit(query.k);
          if (query.conceptIds !== undefined) inner.whereIn('concept_vectors.concept_id', [...query.conceptIds]);
          const rows: ConceptRow[] = await trx
            .from(inner.as('n'))
            .join('concepts as c', 'c.id', 'n.concept_id')
            .select(conceptColumns.map((column) => `c.${column}`))
            .select(aliasesColumn(trx, 'c.id'), trx.raw('1 - n.distance AS score'))
            .orderBy([{ column: 'n.distance' }, { column: 'c.id' }]);
          return { items: rows.map(toConceptHit) };
        });
      },

      withinTransaction(trx: Knex.Transaction) {
        return view(trx);
      },
    };
  }

  return view(knex);
}
