import type { Knex } from 'knex';
import {
  normaliseFactDocuments,
  validateDimensions,
  validateFactQuery,
  validateVectorQuery,
  InvalidSearchRequestError,
  SearchIndexMigrationError,
  VectorSearchUnavailableError,
  type FactDocument,
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
 */
export function createPostgresSearchIndex(knex: Knex, options: PostgresSearchOptions = {}): SearchIndex {
  const dimensions = options.hasVector && options.vectorDimensions !== undefined ? options.vectorDimensions : null;
  if (dimensions !== null) validateDimensions(dimensions);
  let vectorTable: Promise<{ iterativeScan: boolean }> | null = null;

  /**
   * Creates `fact_vectors` once per adapter (idempotent DDL, so racing processes are harmless).
   * Run inside a caller's transaction that later rolls back, the table vanishes: a missing-table
   * error resets the memo (see withVectorTable).
   */
  async function ensureVectorTable(executor: Executor): Promise<{ iterativeScan: boolean }> {
    if (dimensions === null) throw new Error('unreachable: no vector dimension');
    const existing = await executor.raw(
      `SELECT format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
        WHERE a.attrelid = to_regclass('fact_vectors') AND a.attname = 'embedding' AND NOT a.attisdropped`,
    );
    const type: string | undefined = existing.rows[0]?.type;
    if (type !== undefined && type !== `vector(${dimensions})`) {
      throw new SearchIndexMigrationError(
        `fact_vectors.embedding is ${type} but the index is configured for vector(${dimensions}): ` +
          `drop fact_vectors and re-embed (a new embedding model means new vectors)`,
      );
    }
    if (type === undefined) {
      await executor.raw(`CREATE TABLE IF NOT EXISTS fact_vectors (
        fact_id text PRIMARY KEY,
        repository_id text NOT NULL,
        embedding vector(${dimensions}) NOT NULL
      )`);
      await executor.raw('CREATE INDEX IF NOT EXISTS fact_vectors_repository ON fact_vectors (repository_id)');
      await executor.raw('CREATE INDEX IF NOT EXISTS fact_vectors_embedding ON fact_vectors USING hnsw (embedding vector_cosine_ops)');
    }
    // Iterative HNSW scans (pgvector 0.8) keep scanning until k rows pass the repository filter.
    const version = await executor.raw(`SELECT extversion FROM pg_extension WHERE extname = 'vector'`);
    const [major, minor] = String(version.rows[0]?.extversion ?? '0.0').split('.').map(Number);
    return { iterativeScan: major > 0 || minor >= 8 };
  }

  function vectorTableReady(executor: Executor): Promise<{ iterativeScan: boolean }> {
    if (vectorTable) return vectorTable;
    const attempt = ensureVectorTable(executor);
    vectorTable = attempt;
    // A failed attempt (connection lost, dimension mismatch) is not remembered: the next call tries again.
    attempt.catch(() => {
      if (vectorTable === attempt) vectorTable = null;
    });
    return attempt;
  }

  async function withVectorTable<T>(executor: Executor, body: (table: { iterativeScan: boolean }) => Promise<T>): Promise<T> {
    try {
      return await body(await vectorTableReady(executor));
    } catch (error) {
      if ((error as { code?: string }).code !== '42P01') throw error;
      // Created inside a transaction that rolled back: create it again, once.
      vectorTable = null;
      return await body(await vectorTableReady(executor));
    }
  }

  function view(executor: Executor): SearchIndex {
    return {
      async searchFacts(query: FactQuery) {
        validateFactQuery(query);
        const { repositoryId, limit, offset } = query;
        const text = query.query.trim();
        const base = executor('facts').where('facts.repository_id', repositoryId);
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
        let total = rows.length === 0 ? 0 : Number(rows[0].total);
        if (rows.length === 0 && (offset > 0 || limit === 0)) {
          // Past the last page, or a count-only request: count separately.
          const counted =
            text === ''
              ? await base.clone().count<{ n: string }[]>('* as n')
              : await base.clone().whereRaw(`facts.search @@ websearch_to_tsquery('english', ?)`, [text]).count<{ n: string }[]>('* as n');
          total = Number(counted[0].n);
        }
        return { total, items: rows.map(({ total: _total, ...row }) => toHit(row)) };
      },

      async indexFacts(docs: FactDocument[]) {
        const checked = normaliseFactDocuments(docs, dimensions);
        if (dimensions === null) return; // text lives in `facts`; no pgvector, so vectors live elsewhere
        const withVector = checked.filter((doc): doc is FactDocument & { vector: number[] } => Array.isArray(doc.vector));
        const withoutVector = checked.filter((doc) => doc.vector === null).map((doc) => doc.id);
        if (withVector.length === 0 && withoutVector.length === 0) return;
        await withVectorTable(executor, async () => {
          if (withVector.length > 0) {
            await executor('fact_vectors')
              .insert(
                withVector.map((doc) => ({
                  fact_id: doc.id,
                  repository_id: doc.repository_id,
                  embedding: vectorLiteral(doc.vector),
                })),
              )
              .onConflict('fact_id')
              .merge(['repository_id', 'embedding']);
          }
          if (withoutVector.length > 0) await executor('fact_vectors').whereIn('fact_id', withoutVector).delete();
        });
      },

      async removeRepository(repositoryId: string) {
        if (typeof repositoryId !== 'string' || repositoryId === '') throw new InvalidSearchRequestError('repositoryId must be a non-empty string');
        // The facts rows belong to the facts projection; only the vectors are this adapter's.
        if (dimensions === null) return;
        await withVectorTable(executor, () => executor('fact_vectors').where({ repository_id: repositoryId }).delete());
      },

      async searchFactsByVector(query: VectorQuery) {
        if (dimensions === null) {
          throw new VectorSearchUnavailableError(
            options.hasVector ? 'no vector dimension is configured for the Postgres search index' : 'this database has no pgvector extension',
          );
        }
        validateVectorQuery(query, dimensions);
        const search = async (trx: Executor, iterativeScan: boolean) => {
          if (iterativeScan) await trx.raw(`SET LOCAL hnsw.iterative_scan = strict_order`);
          // ef_search bounds how many neighbours HNSW returns: at least k.
          await trx.raw(`SELECT set_config('hnsw.ef_search', ?, true)`, [String(Math.max(40, query.k))]);
          const literal = vectorLiteral(query.vector);
          // The inner query orders by distance alone, so the HNSW index can serve it; ties and
          // the facts columns are settled on the k rows it returns.
          const nearest = trx('fact_vectors')
            .where('repository_id', query.repositoryId)
            .select('fact_id', trx.raw('embedding <=> ?::vector AS distance', [literal]))
            .orderByRaw('embedding <=> ?::vector', [literal])
            .limit(query.k)
            .as('n');
          const rows: FactRow[] = await trx
            .from(nearest)
            .join('facts as f', 'f.id', 'n.fact_id')
            .select(hitColumns.map((column) => `f.${column}`))
            .select(trx.raw('1 - n.distance AS score'))
            .orderBy([{ column: 'n.distance' }, { column: 'f.id' }]);
          return { items: rows.map(toHit) };
        };
        return withVectorTable(executor, ({ iterativeScan }) =>
          // SET LOCAL needs a transaction: the caller's, or one of our own.
          (executor as Knex.Transaction).isTransaction === true ? search(executor, iterativeScan) : executor.transaction((trx) => search(trx, iterativeScan)),
        );
      },

      withinTransaction(trx: Knex.Transaction) {
        return view(trx);
      },
    };
  }

  return view(knex);
}
