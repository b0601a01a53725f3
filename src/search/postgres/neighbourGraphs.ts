import type { Knex } from 'knex';
import { Index, MetricKind, ScalarKind } from 'usearch';
import type { Executor, VectorTable } from './vectors.js';
import { cosineSimilarity } from '../../interchange/vectors.js';

/**
 * HNSW graphs in this process's memory, one per vector table and repository, mirroring the
 * vector tables of the Postgres adapter (`vectors.ts`) on a database that this process alone
 * writes (the embedded tier's PGlite, whose data directory has one owner).
 *
 * Why: pgvector's HNSW index runs inside PGlite, on the one thread every statement of the
 * service shares, compiled to WebAssembly. Inserting a page's twelve vectors and the
 * deduplication's twelve k-NN queries took about 76 ms of that thread per page
 * (docs/performance.md, "Eleventh round"); here (usearch, native) they take well under a
 * millisecond each, on the caller's thread.
 *
 * The graphs only propose candidates: the adapter reads the candidates' rows and exact distances
 * from the vector table and the read model (visibility, filters, ordering), so a graph that holds
 * a vector the table lost (a write whose outer transaction rolled back after a savepoint was
 * released) or an older vector of an id costs a candidate, never a wrong answer.
 *
 * A graph is loaded from its table on first use and then follows every write the adapter makes.
 * A vector set is in the graph at once, so a k-NN inside the writing transaction finds it as the
 * table does; if that transaction rolls back, the ids are read again from the table. A removal
 * takes effect when its transaction commits: a k-NN before then still finds the vector, as the
 * table still has it. Writes made while a graph loads win over the rows the load reads,
 * whichever came first: a write that committed before the load's read carries that read's vector.
 *
 * A vector set is first held in the graph's pending list, compared exactly by every k-NN, and
 * added to the HNSW index afterwards, a few milliseconds of additions at a turn of the event
 * loop. Why: one HNSW addition costs about 0.6 ms of this thread at 12,000 vectors, and a
 * projection batch writes some 70 vectors inside its transaction; added there, they held the
 * embedded tier's one connection (and the event loop) for about 45 ms a batch, 8 s of a
 * 1,000-page run (docs/performance.md, "Twenty-sixth round").
 */

/** The graphs' HNSW parameters: usearch's defaults, stated so that a new version of it does not change them. */
const CONNECTIVITY = 16;
const EXPANSION_ADD = 128;
const EXPANSION_SEARCH = 64;

/**
 * How far below a query's minScore a candidate's similarity may be by the graph's arithmetic
 * (float32, its own order of summation) and still be sent to the database, whose exact score
 * decides: far more than the two computations can differ by.
 */
const SCORE_SLACK = 1e-3;

/** How long pending vectors are added to the graphs at one turn of the event loop. */
const ADD_TURN_MS = 4;

/** The nearest ids of a graph, nearest first, and whether the graph has no more to give. */
export interface Candidates {
  ids: string[];
  exhausted: boolean;
}

/** One repository's vectors of one table: the usearch index and the mapping of ids to its integer keys, and the vectors not yet added to it. */
class NeighbourGraph {
  private readonly index: Index;
  private readonly keyOf = new Map<string, bigint>();
  private readonly idOf = new Map<bigint, string>();
  private nextKey = 0n;
  /** Vectors set but not yet in the index, oldest first; every k-NN compares them exactly. */
  private readonly pending = new Map<string, Float32Array>();
  /** Ids written while the graph loads (see `loaded`); null once loaded. */
  private writtenWhileLoading: Set<string> | null = new Set();

  constructor(dimensions: number) {
    this.index = new Index({
      dimensions,
      metric: MetricKind.Cos,
      quantization: ScalarKind.F32,
      connectivity: CONNECTIVITY,
      expansion_add: EXPANSION_ADD,
      expansion_search: EXPANSION_SEARCH,
      multi: false,
    });
  }

  /** Sets an id's vector: pending until `addPending` puts it in the index. */
  set(id: string, vector: Float32Array): void {
    this.writtenWhileLoading?.add(id);
    this.unset(id);
    this.pending.set(id, vector);
  }

  remove(id: string): void {
    this.writtenWhileLoading?.add(id);
    this.unset(id);
  }

  /** Adds pending vectors to the index, oldest first, until `deadline` (performance.now()); whether any are left. */
  addPending(deadline: number): boolean {
    for (const [id, vector] of this.pending) {
      this.pending.delete(id);
      this.add(id, vector);
      if (performance.now() >= deadline) break;
    }
    return this.pending.size > 0;
  }

  /** A new key each time: usearch removes by marking, so a key is never reused. */
  private add(id: string, vector: Float32Array): void {
    const key = this.nextKey++;
    // One thread: the service's other work needs the second core.
    this.index.add(key, vector, 1);
    this.keyOf.set(id, key);
    this.idOf.set(key, id);
  }

  private unset(id: string): void {
    this.pending.delete(id);
    const key = this.keyOf.get(id);
    if (key === undefined) return;
    this.index.remove(key);
    this.keyOf.delete(id);
    this.idOf.delete(key);
  }

  /** The table's rows as read by the load, added to the index at once; ids written since the load began keep their writes. */
  loaded(rows: readonly { id: string; vector: Float32Array }[]): void {
    const written = this.writtenWhileLoading ?? new Set<string>();
    this.writtenWhileLoading = null;
    for (const row of rows) if (!written.has(row.id)) this.add(row.id, row.vector);
  }

  /**
   * The ids of the `count` nearest vectors: the index's (approximate) and the pending ones
   * (exact), merged by distance. With `minScore`, only those that may be that similar (within
   * SCORE_SLACK of it by the graph's own arithmetic; the database computes the exact score), and
   * exhausted once every vector not returned is known to be farther.
   */
  nearest(vector: Float32Array, count: number, minScore?: number): Candidates {
    if (this.size === 0) return { ids: [], exhausted: true };
    // usearch's cosine distance is 1 - similarity.
    const farthest = minScore === undefined ? Infinity : 1 - minScore + SCORE_SLACK;
    const found: Array<{ id: string; distance: number }> = [];
    let indexHasNoMore = count >= this.keyOf.size;
    if (this.keyOf.size > 0) {
      const matches = this.index.search(vector, Math.min(count, this.keyOf.size), 1);
      for (const [position, key] of matches.keys.entries()) {
        const distance = matches.distances[position];
        if (distance > farthest) {
          indexHasNoMore = true;
          break;
        }
        const id = this.idOf.get(key);
        if (id !== undefined) found.push({ id, distance });
      }
    }
    for (const [id, pendingVector] of this.pending) {
      const distance = 1 - cosineSimilarity(vector, pendingVector);
      if (distance <= farthest) found.push({ id, distance });
    }
    if (this.pending.size > 0) found.sort((a, b) => a.distance - b.distance);
    const ids = found.slice(0, count).map(({ id }) => id);
    return { ids, exhausted: indexHasNoMore && found.length <= count };
  }

  get size(): number {
    return this.keyOf.size + this.pending.size;
  }

  get pendingCount(): number {
    return this.pending.size;
  }
}

/** Runs `apply` once the executor's transaction commits (at once outside one), `undo` if it rolls back. */
function onOutcome(executor: Executor, apply: () => void, undo: () => void): void {
  const transaction = executor as Knex.Transaction;
  if (transaction.isTransaction !== true) {
    apply();
    return;
  }
  // executionPromise settles when the transaction commits or rolls back.
  transaction.executionPromise.then(apply, undo);
}

/** The vectors a table holds for a repository, or for some ids (pgvector's text form `[1,2,3]`, parsed). */
async function storedVectors(
  executor: Executor,
  { table, key }: VectorTable,
  where: { repositoryId: string } | { ids: readonly string[] },
): Promise<Array<{ id: string; repository_id: string; vector: Float32Array }>> {
  const [condition, value] = 'ids' in where ? [`?? = ANY(?)`, [key, [...where.ids]]] : ['repository_id = ?', [where.repositoryId]];
  const rows: { id: string; repository_id: string; embedding: string }[] = (
    await executor.raw(`SELECT ?? AS id, repository_id, embedding::text AS embedding FROM ?? WHERE ${condition}`, [key, table, ...value])
  ).rows;
  return rows.map((row) => ({ id: row.id, repository_id: row.repository_id, vector: Float32Array.from(row.embedding.slice(1, -1).split(','), Number) }));
}

export function createNeighbourGraphs(knex: Knex, dimensions: number) {
  /** Per table, per repository: the graph, or its load in flight. */
  const graphs = new Map<string, Map<string, { graph: NeighbourGraph; ready: Promise<NeighbourGraph> }>>();

  const graphsOf = (table: string) => {
    let byRepository = graphs.get(table);
    if (!byRepository) graphs.set(table, (byRepository = new Map()));
    return byRepository;
  };

  /** Graphs with pending vectors, and the turn of the event loop at which some are added. */
  const withPending = new Set<NeighbourGraph>();
  let adding: { done: Promise<void>; resolve: () => void } | null = null;

  const addPendingAtATurn = () => {
    const deadline = performance.now() + ADD_TURN_MS;
    for (const graph of withPending) {
      if (performance.now() >= deadline) break;
      if (!graph.addPending(deadline)) withPending.delete(graph);
    }
    if (withPending.size > 0) {
      setImmediate(addPendingAtATurn).unref();
      return;
    }
    adding?.resolve();
    adding = null;
  };

  /** Sets a vector in a graph, to be added to its index at a later turn. */
  const setPending = (graph: NeighbourGraph, id: string, vector: Float32Array) => {
    graph.set(id, vector);
    withPending.add(graph);
    if (adding !== null) return;
    let resolve = () => {};
    const done = new Promise<void>((settle) => (resolve = settle));
    adding = { done, resolve };
    // Unref'd: the additions never keep the process alive; a graph dies with it.
    setImmediate(addPendingAtATurn).unref();
  };

  /** The graph writes go to: the loaded or loading one; none when nothing asked for the repository yet (its load will read the table). */
  const existing = (table: string, repositoryId: string) => graphs.get(table)?.get(repositoryId)?.graph;

  /** The repository's graph, loaded from the table the first time it is asked for. */
  function graphFor(executor: Executor, vectors: VectorTable, repositoryId: string): Promise<NeighbourGraph> {
    const byRepository = graphsOf(vectors.table);
    const known = byRepository.get(repositoryId);
    if (known) return known.ready;
    const graph = new NeighbourGraph(dimensions);
    const ready = (async () => {
      graph.loaded(await storedVectors(executor, vectors, { repositoryId }));
      return graph;
    })();
    const entry = { graph, ready };
    byRepository.set(repositoryId, entry);
    // A failed load is forgotten (with the writes applied to its graph: the table has them): the next query loads again.
    ready.catch(() => {
      if (byRepository.get(repositoryId) !== entry) return;
      byRepository.delete(repositoryId);
      withPending.delete(graph);
    });
    return ready;
  }

  /**
   * After a rollback, the rolled-back vectors' ids as the table has them again. A failure to read
   * leaves a graph with vectors the table lacks: candidates the adapter's exact read drops.
   */
  async function reread(vectors: VectorTable, items: readonly { id: string; repository_id: string }[]): Promise<void> {
    if (items.length === 0) return;
    try {
      const stored = new Map((await storedVectors(knex, vectors, { ids: items.map((item) => item.id) })).map((row) => [row.id, row]));
      for (const item of items) {
        const row = stored.get(item.id);
        const graph = existing(vectors.table, item.repository_id);
        if (graph === undefined) continue;
        if (row === undefined || row.repository_id !== item.repository_id) graph.remove(item.id);
        else setPending(graph, item.id, row.vector);
      }
    } catch {
      // The table itself rolled back with the transaction that created it, or the database closed.
    }
  }

  return {
    /** Up to `count` ids nearest to `vector` in the repository's graph, nearest first (approximate). */
    async nearest(executor: Executor, vectors: VectorTable, repositoryId: string, vector: readonly number[], count: number, minScore?: number): Promise<Candidates> {
      const graph = await graphFor(executor, vectors, repositoryId);
      return graph.nearest(Float32Array.from(vector), count, minScore);
    },

    /** Follows `VectorTables.write`: vectors set (numbers) at once, removed (null) once the executor's transaction commits. */
    written(executor: Executor, vectors: VectorTable, items: readonly { id: string; repository_id: string; vector?: number[] | null }[]): void {
      const set = items.filter((item): item is typeof item & { vector: number[] } => Array.isArray(item.vector));
      for (const item of set) {
        const graph = existing(vectors.table, item.repository_id);
        if (graph !== undefined) setPending(graph, item.id, Float32Array.from(item.vector));
      }
      const removedIds = items.filter((item) => item.vector === null);
      onOutcome(
        executor,
        () => {
          for (const item of removedIds) existing(vectors.table, item.repository_id)?.remove(item.id);
        },
        () => void reread(vectors, set),
      );
    },

    /** Follows `VectorTables.remove`: the ids' vectors, or the whole repository's (null), once the executor's transaction commits. */
    removed(executor: Executor, { table }: VectorTable, repositoryId: string, ids: readonly string[] | null): void {
      onOutcome(
        executor,
        () => {
          const graph = existing(table, repositoryId);
          if (ids === null) {
            graphs.get(table)?.delete(repositoryId);
            // A dropped graph's pending vectors are not worth adding.
            if (graph !== undefined) withPending.delete(graph);
            return;
          }
          for (const id of ids) graph?.remove(id);
        },
        () => undefined,
      );
    },

    /** The vectors held for a repository (tests and diagnostics); null when its graph is not loaded. */
    sizeOf(table: string, repositoryId: string): number | null {
      return existing(table, repositoryId)?.size ?? null;
    },

    /** Of those, the vectors not yet in the HNSW index (tests and diagnostics). */
    pendingOf(table: string, repositoryId: string): number | null {
      return existing(table, repositoryId)?.pendingCount ?? null;
    },

    /** Resolves once every pending vector is in its graph's index. */
    added(): Promise<void> {
      return adding?.done ?? Promise.resolve();
    },
  };
}
