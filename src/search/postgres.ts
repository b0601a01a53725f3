import { nextTurnOfEventLoop } from '../util/concurrency.js';
import type { Knex } from 'knex';
import type { HitOf, IndexedDocument, SearchCollection, SortKey } from './collection.js';
import { searchCollections } from './collections/index.js';
import {
  collectionRegistry,
  filterValues,
  hitFrom,
  matchesNothing,
  normaliseDocuments,
  normaliseUpdates,
  validateDimensions,
  validateKnnQuery,
  knnAnswerOf,
  validateRemoval,
  validateRepositoryRemoval,
  validateSearchQuery,
  VectorSearchUnavailableError,
  websearchQueryText,
  type KnnQuery,
  type SearchIndex,
} from './port.js';
import { createNeighbourGraphs } from './postgres/neighbourGraphs.js';
import { createVectorTables, vectorLiteral, type Executor, type VectorTable } from './postgres/vectors.js';

export interface PostgresSearchOptions {
  /** Whether the database has pgvector (`Database.hasVector`). Without it there is no k-NN. */
  hasVector?: boolean;
  /**
   * Dimension of the stored vectors: one embedding model per deployment, so one fixed dimension
   * (the `embedding` column type of every vector table). Without it there is no k-NN.
   */
  vectorDimensions?: number;
  /** The collections served (default: `searchCollections`, `collections/index.ts`). */
  collections?: readonly SearchCollection[];
  /**
   * The database is one connection for the process's life (PGlite: `Database.kind`): k-NN
   * settings are then set once for the session instead of in a transaction per query.
   */
  oneConnection?: boolean;
  /**
   * This process alone writes the database (the embedded tier's PGlite, one owner per data
   * directory): k-NN candidates come from HNSW graphs in its memory, mirrored from the vector
   * tables (`postgres/neighbourGraphs.ts`), instead of pgvector's HNSW index inside the database.
   * Never with a database other processes write: their vectors would be missing from the graphs.
   */
  nearestInMemory?: boolean;
}

type Row = Record<string, unknown>;

/** On one connection, outside a transaction: k-NN queries per statement (see knnManyOn). */
export const KNN_QUERIES_PER_STATEMENT = 4;

/**
 * Candidates first asked of the graphs in memory for k neighbours: a few more than k, since the
 * exact ordering may drop some for others and a filter may leave some out (merged facts mostly
 * have no vector left); then CANDIDATES_GROWTH times as many while too few pass. Each candidate
 * is a lookup by id in the statement (500 pages: 6.6 s of PGlite with 2k + 10, 5.2 s with k + 10).
 */
const firstCandidateCount = (k: number) => k + 10;
/** Graph searches done in one turn of the event loop before it is let go (see knnManyOn). */
const GRAPH_SEARCH_TURN_MS = 8;
const CANDIDATES_GROWTH = 4;

/** A k-NN query of knnMany, its place in the answers, and the graph's candidates (null: none asked). */
interface Asked<Doc extends IndexedDocument> {
  query: KnnQuery<Doc>;
  index: number;
  candidates: readonly string[] | null;
}

/**
 * Search on the read-model database.
 *
 * Lexical: each collection's read model is its index (`collection.postgres.table`, written by its
 * projection): the table's tsvector column, built from the text fields in the collection's
 * language, is matched with `websearch_to_tsquery` and ranked with `ts_rank_cd`, ties broken by
 * the collection's order and the id, so pages are stable. So `index` and `update` write no text.
 *
 * Vectors: with pgvector and a configured dimension, a collection's vectors live in its vector
 * table (`fact_vectors`, `concept_vectors`) with an HNSW cosine index where pgvector can build
 * one for the dimension (`postgres/vectors.ts`), created on first use;
 * `knn` answers from it, joined to the read model, counting only vectors of visible rows.
 * Without pgvector (the PostgreSQL server of the distributed tier) vectors are ignored on write
 * and `knn` throws VectorSearchUnavailableError: vectors live in OpenSearch there.
 * Hidden documents (merged facts and concepts) are never found.
 */
export function createPostgresSearchIndex(knex: Knex, options: PostgresSearchOptions = {}): SearchIndex {
  const dimensions = options.hasVector && options.vectorDimensions !== undefined ? options.vectorDimensions : null;
  if (dimensions !== null) validateDimensions(dimensions);
  const registry = collectionRegistry(options.collections ?? searchCollections);
  const graphs = dimensions !== null && options.nearestInMemory === true ? createNeighbourGraphs(knex, dimensions) : null;
  const vectorTables = dimensions === null ? null : createVectorTables(dimensions, { oneConnection: options.oneConnection === true, hnswIndex: graphs === null });

  /** The names of a hit's columns: the id and the collection's declared fields. */
  const columnNames = (collection: SearchCollection): string[] => ['id', ...Object.keys(collection.fields)];

  /** The id and declared fields of `row` (a table alias), computed ones by their SQL. */
  function columns(executor: Executor, collection: SearchCollection, row: string): (string | Knex.Raw)[] {
    return columnNames(collection).map((name) => {
      const computed = collection.postgres.computed?.[name];
      return computed ? executor.raw(`${computed(row)} AS ??`, [name]) : `${row}.${name}`;
    });
  }

  /** Hidden rows, and those the query hides, left out; the filters of the query applied. */
  function visible(builder: Knex.QueryBuilder, collection: SearchCollection, row: string, query: Pick<KnnQuery, 'filters' | 'hide'>): Knex.QueryBuilder {
    if (collection.hidden) builder.whereNotIn(`${row}.${collection.hidden.field}`, [...collection.hidden.values]);
    // One array parameter however many ids (see the lexical search's ids).
    if (query.hide !== undefined && query.hide.length > 0) builder.whereRaw('NOT (??.id = ANY(?::text[]))', [row, [...query.hide]]);
    for (const [name, values] of filterValues(query.filters)) builder.whereIn(`${row}.${name}`, values);
    return builder;
  }

  const ordered = (row: string, keys: readonly SortKey[]) => [...keys.map((key) => ({ column: `${row}.${key.field}`, order: key.order })), { column: `${row}.id` }];

  /** Page rows of a query carrying `count(*) OVER () AS total`; counts separately when the page is empty. */
  async function paged(rows: Row[], offset: number, limit: number, count: () => Promise<number>): Promise<{ total: number; rows: Row[] }> {
    let total = rows.length === 0 ? 0 : Number(rows[0].total);
    // Past the last page, or a count-only request: count separately.
    if (rows.length === 0 && (offset > 0 || limit === 0)) total = await count();
    return { total, rows };
  }

  function unavailable(collection: SearchCollection): VectorSearchUnavailableError {
    if (!collection.vectors) return new VectorSearchUnavailableError(`the ${collection.name} collection has no vectors`);
    return new VectorSearchUnavailableError(
      options.hasVector ? 'no vector dimension is configured for the Postgres search index' : 'this database has no pgvector extension',
    );
  }

  /**
   * k-NN queries in one statement (see knnMany), except on one connection outside a transaction:
   * there a statement holds PGlite's connection for all its queries, and a request waited for
   * the deduplication's twelve (up to 1.7 s on a loaded machine, docs/performance.md "Fifth
   * round"), so the queries go in statements of `KNN_QUERIES_PER_STATEMENT`, between which a
   * request has its turn. Each query's answer is its own either way.
   */
  async function knnManyOn<Doc extends IndexedDocument>(executor: Executor, collection: SearchCollection<Doc>, queries: readonly KnnQuery<Doc>[]): Promise<{ items: HitOf<Doc>[] }[]> {
    const served = registry.resolve(collection);
    const vectors = served.postgres.vectors;
    if (vectorTables === null || dimensions === null || vectors === undefined) throw unavailable(served);
    for (const query of queries) validateKnnQuery(served, query, dimensions);
    // Each query as run (k widened by its excluded ids) and how its answer is kept (knnAnswerOf).
    const answerPlans = queries.map((query) => knnAnswerOf(query));
    const asked = answerPlans.map(({ asked: query }, index) => ({ query, index })).filter(({ query }) => !matchesNothing(query));
    const answers = queries.map((): { items: HitOf<Doc>[] } => ({ items: [] }));
    if (asked.length === 0) return answers;
    return vectorTables.nearest(executor, vectors, Math.max(...asked.map(({ query }) => query.k)), async (trx, efSearchInStatement, distance) => {
      const answer = async (entries: readonly Asked<Doc>[]) => {
        for (const { index } of entries) answers[index].items = [];
        const rows = await nearestRows(trx, served, vectors, efSearchInStatement, distance, entries);
        for (const row of rows) answers[Number(row.query_index)].items.push(hitFrom(collection, row, Number(row.score)));
      };
      const keptAnswers = () => answers.map((answer, index) => ({ items: answerPlans[index].kept(answer.items) }));
      if (graphs === null) {
        await answer(asked.map((entry) => ({ ...entry, candidates: null })));
        return keptAnswers();
      }
      // Queries restricted to ids compare those ids' vectors exactly (their own statements either
      // way); the others take candidates from the graph, widened while too few of them pass the
      // filters and the graph has more.
      await answer(asked.filter(({ query }) => query.ids !== undefined).map((entry) => ({ ...entry, candidates: null })));
      let round = asked.filter(({ query }) => query.ids === undefined).map((entry) => ({ ...entry, count: firstCandidateCount(entry.query.k) }));
      while (round.length > 0) {
        // A graph search runs on this thread (native, ~0.3 ms): a catch-up slice's 200 queries
        // would hold the event loop for 100 ms at once, so it lets the loop turn every few ms.
        const planned = [];
        let turnStarted = performance.now();
        for (const entry of round) {
          planned.push({ ...entry, found: await graphs.nearest(trx, vectors, entry.query.repositoryId, entry.query.vector, entry.count, entry.query.minScore) });
          if (performance.now() - turnStarted >= GRAPH_SEARCH_TURN_MS) {
            await nextTurnOfEventLoop();
            turnStarted = performance.now();
          }
        }
        // An excluded id is never looked up: a query whose only candidate it is sends nothing.
        await answer(planned.map((entry) => ({ ...entry, candidates: entry.found.ids.filter((id) => !answerPlans[entry.index].excluded.has(id)) })));
        round = planned
          .filter((entry) => !entry.found.exhausted && answers[entry.index].items.length < entry.query.k)
          .map((entry) => ({ ...entry, count: entry.count * CANDIDATES_GROWTH }));
      }
      return keptAnswers();
    });
  }

  /**
   * The rows of k-NN queries, each tagged with its `query_index` and score, in as few statements
   * as their restrictions allow (see knnManyOn): a LATERAL k-NN per row of a recordset of
   * (query, repository, vector, k, candidates), whose inner query is ordered by distance alone so
   * an HNSW index can serve it, or, with candidates from the graphs in memory, looks them up by id.
   */
  async function nearestRows<Doc extends IndexedDocument>(
    trx: Executor,
    served: SearchCollection,
    vectors: VectorTable,
    efSearchInStatement: number | null,
    distance: (column: string, query: string) => string,
    entries: readonly Asked<Doc>[],
  ): Promise<Row[]> {
    const { table } = served.postgres;
    // Queries with the same restrictions (filters, ids and hidden ids) go in one statement: one inner query
    // and one parameter however many queries come (annotate_report sends one per sentence; a
    // UNION of them, five parameters a query, would reach PostgreSQL's limit of 65,535). Only
    // vectors of visible rows (not merged, passing the filters) count in the inner query, so k of
    // them come back, even when a late vector arrived after its fact was merged and removed
    // (Kafka: another partition). The inner query also takes the row's columns, by its primary
    // key for each of the k vectors: joined outside, the planner guessed the LATERAL's size from
    // nothing and hashed the whole row table per query (a scan that grew with the repository:
    // docs/performance.md, "Fifth round"). Ties are settled on the k rows each returns.
    const groups = new Map<string, Asked<Doc>[]>();
    for (const entry of entries) {
      if (entry.candidates !== null && entry.candidates.length === 0) continue;
      const key = JSON.stringify([entry.query.ids ?? null, entry.query.hide ?? null, [...filterValues(entry.query.filters)], entry.candidates !== null]);
      groups.set(key, [...(groups.get(key) ?? []), entry]);
    }
    const perStatement = options.oneConnection === true && (trx as Knex.Transaction).isTransaction !== true ? KNN_QUERIES_PER_STATEMENT : entries.length;
    const statements = [...groups.values()].flatMap((group) =>
      Array.from({ length: Math.ceil(group.length / perStatement) }, (_, index) => group.slice(index * perStatement, (index + 1) * perStatement)),
    );
    const rows: Row[] = [];
    for (const group of statements) {
      const restrictions = group[0].query;
      const inner = visible(
        trx(`${vectors.table} as v`)
          .join(`${table} as r`, 'r.id', `v.${vectors.key}`)
          .whereRaw('v.repository_id = qv.repository_id'),
        served,
        'r',
        restrictions,
      )
        .select(columns(trx, served, 'r'))
        // Ordered by what the table's index holds (half precision beyond 2,000 dimensions), scored
        // and ranked outside by the exact distance.
        .select(trx.raw('v.embedding <=> qv.vector AS distance'))
        .orderByRaw(distance('v.embedding', 'qv.vector'));
      // One array parameter however many ids (see the lexical search).
      if (restrictions.ids !== undefined) inner.whereRaw('v.?? = ANY(?::text[])', [vectors.key, [...restrictions.ids]]);
      if (group[0].candidates !== null) inner.whereRaw(`v.?? = ANY(qv.candidates)`, [vectors.key]);
      const { sql, bindings } = inner.toSQL();
      const recordset = JSON.stringify(
        group.map(({ query, index, candidates }) => ({ query_index: index, repository_id: query.repositoryId, vector: vectorLiteral(query.vector), k: query.k, candidates })),
      );
      // ef_search carried by the statement (one connection, outside a transaction): a
      // transaction-local set_config outside a transaction lasts for the statement's own
      // implicit transaction, and the recordset depends on it (LATERAL), so it is set before
      // any HNSW scan begins and is gone when the statement ends.
      const [recordsetSql, settingBindings] =
        efSearchInStatement === null
          ? ['jsonb_to_recordset(?::jsonb)', []]
          : [
              `(SELECT set_config('hnsw.ef_search', ?, true) AS ef_search) AS settings
               CROSS JOIN LATERAL jsonb_to_recordset(CASE WHEN settings.ef_search IS NOT NULL THEN ?::jsonb END)`,
              [String(efSearchInStatement)],
            ];
      const from = trx.raw(
        `${recordsetSql} AS qv(query_index integer, repository_id text, vector vector, k integer, candidates text[]) CROSS JOIN LATERAL (${sql} LIMIT qv.k) AS n`,
        [...settingBindings, recordset, ...bindings],
      );
      rows.push(
        ...(await trx
          .from(from)
          .select(columnNames(served).map((name) => `n.${name}`))
          .select('qv.query_index', trx.raw('1 - n.distance AS score'))
          .orderBy([{ column: 'qv.query_index' }, { column: 'n.distance' }, { column: 'n.id' }])),
      );
    }
    return rows;
  }

  /** Sets (numbers) or removes (null) the vectors of a collection with vectors, in its table and in the graphs (neighbourGraphs.ts: sets at once, removals on commit). */
  async function writeVectors(executor: Executor, served: SearchCollection, items: readonly { id: string; repository_id: string; vector?: number[] | null }[]): Promise<void> {
    const vectors = served.postgres.vectors;
    if (vectorTables === null || vectors === undefined) return;
    await vectorTables.write(executor, vectors, items);
    graphs?.written(executor, vectors, items);
  }

  /** Removes the vectors of `ids`, or of the whole repository (null), in the table and, on commit, in the graphs. */
  async function removeVectors(executor: Executor, served: SearchCollection, repositoryId: string, ids: readonly string[] | null): Promise<void> {
    const vectors = served.postgres.vectors;
    if (vectorTables === null || vectors === undefined) return;
    await vectorTables.remove(executor, vectors, repositoryId, ids);
    graphs?.removed(executor, vectors, repositoryId, ids);
  }

  function view(executor: Executor): SearchIndex {
    return {
      async search(collection, query) {
        const served = registry.resolve(collection);
        validateSearchQuery(served, query);
        if (matchesNothing(query)) return { total: 0, items: [] };
        const { limit, offset } = query;
        const { table } = served.postgres;
        const searchColumn = `${table}.${served.postgres.searchColumn ?? 'search'}`;
        // The language is one of the checked TextLanguage names, so it may stand in the SQL.
        const tsquery = `websearch_to_tsquery('${served.language}', ?)`;
        const text = query.query.trim();
        const searched = websearchQueryText(text);
        const base = visible(executor(table).where(`${table}.repository_id`, query.repositoryId), served, table, query);
        // One array parameter however many ids: a concept or context may link any number of facts,
        // and IN with a parameter per id failed past PostgreSQL's 65,535 parameters (a 500).
        if (query.ids !== undefined) base.whereRaw('??.id = ANY(?::text[])', [table, [...query.ids]]);
        const rows: Row[] =
          limit === 0
            ? []
            : text === ''
              ? await base
                  .clone()
                  .select(columns(executor, served, table))
                  .select(executor.raw('0 AS score'), executor.raw('count(*) OVER () AS total'))
                  .orderBy(ordered(table, query.sort ?? served.order.listed))
                  .limit(limit)
                  .offset(offset)
              : await base
                  .clone()
                  .crossJoin(executor.raw(`${tsquery} AS q`, [searched]))
                  .whereRaw(`${searchColumn} @@ q`)
                  .select(columns(executor, served, table))
                  .select(executor.raw(`ts_rank_cd(${searchColumn}, q) AS score`), executor.raw('count(*) OVER () AS total'))
                  .orderBy(query.sort ? ordered(table, query.sort) : [{ column: 'score', order: 'desc' }, ...ordered(table, served.order.ranked)])
                  .limit(limit)
                  .offset(offset);
        const page = await paged(rows, offset, limit, async () => {
          const counting = text === '' ? base.clone() : base.clone().whereRaw(`${searchColumn} @@ ${tsquery}`, [searched]);
          const counted = await counting.count<{ n: string }[]>('* as n');
          return Number(counted[0].n);
        });
        return { total: page.total, items: page.rows.map((row) => hitFrom(collection, row, Number(row.score))) };
      },

      async knn(collection, query) {
        const [answer] = await knnManyOn(executor, collection, [query]);
        return answer;
      },

      knnMany: (collection, queries) => knnManyOn(executor, collection, queries),

      async index(collection, docs) {
        const served = registry.resolve(collection);
        const checked = normaliseDocuments(collection, docs, dimensions);
        // Text lives in the read model (its projection's); only vectors are this adapter's.
        await writeVectors(executor, served, checked);
      },

      async update(collection, updates) {
        const served = registry.resolve(collection);
        const checked = normaliseUpdates(collection, updates, dimensions);
        // Fields and lists live in the read model; only vectors are this adapter's.
        await writeVectors(executor, served, checked);
      },

      async remove(collection, repositoryId, ids) {
        const served = registry.resolve(collection);
        validateRemoval(repositoryId, ids);
        await removeVectors(executor, served, repositoryId, ids);
      },

      async removeRepository(repositoryId) {
        validateRepositoryRemoval(repositoryId);
        // The rows belong to their projections; only the vectors are this adapter's.
        for (const served of registry.all) {
          await removeVectors(executor, served, repositoryId, null);
        }
      },

      withinTransaction(trx: Knex.Transaction) {
        return view(trx);
      },
    };
  }

  return view(knex);
}
