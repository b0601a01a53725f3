import type { Embedder } from '../providers/embeddings/port.js';
import type { HitOf, IndexedDocument, SearchCollection } from './collection.js';
import { InvalidSearchRequestError, MAX_K, MAX_PAGE_SIZE, VectorSearchUnavailableError, websearchQueryText, type SearchIndex, type SearchQuery } from './port.js';
import { parseWebsearch } from './websearch.js';
import { errorMessage } from '../util/errorMessage.js';

/**
 * Hybrid search (spec "What the service does", item 2; docs/search.md, "Hybrid search"): the
 * lexical and the vector ranking of one query over any collection fused by reciprocal rank
 * fusion. Falls back to lexical, saying why, when hybrid is disabled, no embedder is configured,
 * the index (or the collection) keeps no vectors, or the query is empty or names no word to look
 * for. The vector side honours the query's exclusions (`-word`): it embeds the words looked for
 * and leaves out the documents that hold an excluded term.
 */

export interface HybridSettings {
  /** search.hybrid.enabled */
  enabled: boolean;
  /** search.hybrid.rrf_k: the rank offset k of 1 / (k + rank). */
  rrfK: number;
  /** search.hybrid.min_score: fused scores below it are dropped (0 accepts every result). */
  minScore: number;
  /** search.hybrid.over_fetch_multiplier: each side fetches (offset + limit) times this. */
  overFetchMultiplier: number;
}

/** How a search ranks: both rankings fused (falling back to lexical when it cannot), or lexical only. */
export const searchModes = ['hybrid', 'lexical'] as const;
export type SearchMode = (typeof searchModes)[number];

/** A lexical query (its ids, hidden ids and filters restrict both sides) and the mode asked for. */
export interface HybridQuery<Doc extends IndexedDocument = IndexedDocument> extends Omit<SearchQuery<Doc>, 'sort'> {
  /** Default hybrid. */
  mode?: SearchMode;
  /**
   * The query's vector when the caller embedded it already (a batch of queries embedded in one
   * call): the vector side uses it instead of embedding `query` again.
   */
  vector?: number[];
  /**
   * What the vector side embeds when no `vector` is given (default: `query`): a caller that
   * rewrites its text for the lexical side (words OR-ed) keeps the text itself for meaning.
   */
  vectorText?: string;
}

export interface HybridReply<Hit> {
  /** The mode that answered. */
  mode: SearchMode;
  /** Why hybrid was asked for but lexical answered; null otherwise. */
  fallback_reason: string | null;
  total: number;
  /** Hybrid: `score` is the fused score; lexical: the lexical one. */
  items: Hit[];
  /**
   * Hybrid: the cosine similarity to the query of every candidate the vector side ranked (also
   * those past the page); empty when lexical answered.
   */
  similarities: ReadonlyMap<string, number>;
}

export interface HybridSearch {
  search<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>): Promise<HybridReply<HitOf<Doc>>>;
  /**
   * Several searches at once, each answered as `search` would answer it (fallbacks included):
   * the queries without a `vector` are embedded in one call and the vector sides run as one
   * `knnMany`, so a batch costs one embedding call and one k-NN round trip.
   */
  searchMany<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, queries: readonly HybridQuery<Doc>[]): Promise<HybridReply<HitOf<Doc>>[]>;
  /**
   * The vector side alone, batched as `searchMany` is: each query's `offset + limit` nearest by
   * cosine, ranked as deep as hybrid ranks (reply mode `hybrid`, `score` and `similarities` the
   * cosine of every candidate ranked), or, where vectors cannot
   * answer, lexical search with the reason, as `searchMany` falls back. For callers that keep only
   * candidates above a cosine threshold (report annotation): a hit only the lexical side finds has
   * no cosine, so ranking that side would be work thrown away.
   */
  nearestMany<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, queries: readonly HybridQuery<Doc>[]): Promise<HybridReply<HitOf<Doc>>[]>;
}

/**
 * Reciprocal rank fusion: each list adds 1 / (k + rank) (rank 1-based) to every id it holds.
 * Returns ids by fused score, best first; ties go to the better rank in the earlier list
 * (lexical), then to the id, so the order is stable.
 */
export function reciprocalRankFusion(lists: readonly (readonly { id: string }[])[], k: number): { id: string; score: number }[] {
  const fused = new Map<string, { score: number; firstRanks: number[] }>();
  lists.forEach((list, listIndex) => {
    list.forEach((item, position) => {
      const entry = fused.get(item.id) ?? { score: 0, firstRanks: lists.map(() => Number.POSITIVE_INFINITY) };
      if (entry.firstRanks[listIndex] !== Number.POSITIVE_INFINITY) return; // an id twice in one list counts once
      entry.score += 1 / (k + position + 1);
      entry.firstRanks[listIndex] = position + 1;
      fused.set(item.id, entry);
    });
  });
  return [...fused.entries()]
    .sort(([idA, a], [idB, b]) => {
      if (b.score !== a.score) return b.score - a.score;
      for (let list = 0; list < lists.length; list++) {
        if (a.firstRanks[list] !== b.firstRanks[list]) return a.firstRanks[list] - b.firstRanks[list];
      }
      return idA < idB ? -1 : idA > idB ? 1 : 0;
    })
    .map(([id, entry]) => ({ id, score: entry.score }));
}

/** The settings of `search.hybrid` in the config. */
export function hybridSettingsOf(config: { enabled: boolean; rrf_k: number; min_score: number; over_fetch_multiplier: number }): HybridSettings {
  return { enabled: config.enabled, rrfK: config.rrf_k, minScore: config.min_score, overFetchMultiplier: config.over_fetch_multiplier };
}

function validateSettings(settings: HybridSettings): void {
  if (!Number.isFinite(settings.rrfK) || settings.rrfK < 0) throw new RangeError('rrfK must be a number >= 0');
  if (!Number.isFinite(settings.minScore) || settings.minScore < 0) throw new RangeError('minScore must be a number >= 0');
  if (!Number.isInteger(settings.overFetchMultiplier) || settings.overFetchMultiplier < 1) {
    throw new RangeError('overFetchMultiplier must be an integer >= 1');
  }
}

export function createHybridSearch(deps: { search: SearchIndex; embedder: Embedder | null; settings: HybridSettings }): HybridSearch {
  const { embedder, settings } = deps;
  validateSettings(settings);

  /**
   * What a query needs: a lexical answer (with the reason hybrid could not run), or both sides
   * `pool` deep, the vector side embedding `text` and leaving out what `excluded` (websearch
   * syntax, the query's negated terms ORed) matches.
   */
  type Plan = { kind: 'lexical'; reason: string | null } | { kind: 'hybrid'; pool: number; text: string; excluded: string | null };

  function planOf(collection: SearchCollection, query: HybridQuery<IndexedDocument>): Plan {
    const mode = query.mode ?? 'hybrid';
    if (mode !== 'hybrid' && mode !== 'lexical') throw new InvalidSearchRequestError(`mode must be hybrid or lexical, not ${String(mode)}`);
    if (mode === 'lexical') return { kind: 'lexical', reason: null };
    if (!settings.enabled) return { kind: 'lexical', reason: 'hybrid search is disabled (search.hybrid.enabled is false)' };
    if (embedder === null) return { kind: 'lexical', reason: 'no embedding provider is configured' };
    const text = typeof query.query === 'string' ? query.query.trim() : '';
    if (text === '') return { kind: 'lexical', reason: 'the query is empty: results are listed, not ranked' };
    if (!Number.isInteger(query.limit) || !Number.isInteger(query.offset) || query.limit < 0 || query.offset < 0) {
      return { kind: 'lexical', reason: null }; // the lexical side refuses it with the reason
    }
    const depth = query.offset + query.limit;
    const deepest = Math.min(MAX_PAGE_SIZE, MAX_K);
    // Each side ranks (offset + limit) × multiplier candidates. A count only (limit 0) ranks as
    // deep as hybrid goes, so its total is the largest any page reports.
    const pool = query.limit === 0 ? deepest : Math.min(depth * settings.overFetchMultiplier, deepest);
    if (depth > pool) return { kind: 'lexical', reason: `the page ends past result ${pool}, the deepest hybrid search ranks` };
    // Read as the lexical side reads it: `cats -dogs` looks for cats by meaning too, and "-dogs"
    // embedded would look for dogs. A query of operators, punctuation or exclusions alone has no
    // meaning to embed: its nearest documents would be noise ranked as matches.
    const terms = parseWebsearch(websearchQueryText(text)).flat();
    const wanted = terms.filter((term) => !term.negated);
    const excluded = terms.filter((term) => term.negated);
    const vectorText = query.vectorText?.trim() || (excluded.length > 0 ? wanted.map((term) => term.text).join(' ') : wanted.length > 0 ? text : '');
    if (vectorText === '') return { kind: 'lexical', reason: 'the query names no word to look for (only operators, punctuation or excluded words)' };
    // Known before anything is embedded: each summary search paid an embedding call (and, the
    // provider down, said "embedding the query failed") for a k-NN its collection cannot answer.
    if (!collection.vectors) return { kind: 'lexical', reason: `the ${collection.name} collection keeps no vectors` };
    return {
      kind: 'hybrid',
      pool,
      // Composed as the indexed text is (websearchQueryText), so both sides read the query alike.
      text: vectorText.normalize('NFC'),
      excluded: excluded.length > 0 ? excluded.map((term) => (term.phrase ? `"${term.text}"` : term.text)).join(' or ') : null,
    };
  }

  /**
   * The vector side's hits without those holding a term the query excludes (`cats -dogs`: no fact
   * about dogs, however near): one lexical search for the excluded terms among the hits. A hit
   * the lexical side finds still counts there (`cats or -dogs` allows a fact with both words).
   */
  async function withoutExcluded<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>, excluded: string | null, nearest: HitOf<Doc>[]): Promise<HitOf<Doc>[]> {
    if (excluded === null || nearest.length === 0) return nearest;
    const holding = await deps.search.search(collection, {
      repositoryId: query.repositoryId,
      query: excluded,
      limit: nearest.length,
      offset: 0,
      ids: nearest.map((hit) => hit.id),
      filters: query.filters,
    });
    const dropped = new Set(holding.items.map((hit) => hit.id));
    return nearest.filter((hit) => !dropped.has(hit.id));
  }

  const lexicalPage = <Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>, limit: number, offset: number) =>
    deps.search.search(collection, { repositoryId: query.repositoryId, query: query.query, limit, offset, ids: query.ids, hide: query.hide, filters: query.filters });

  async function lexicalOnly<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>, reason: string | null): Promise<HybridReply<HitOf<Doc>>> {
    const result = await lexicalPage(collection, query, query.limit, query.offset);
    return { mode: 'lexical', fallback_reason: reason, total: result.total, items: result.items, similarities: new Map() };
  }

  /** Why a failed k-NN search leaves lexical search to answer; null when the failure is not one to fall back from. */
  function knnFallbackReason(error: unknown): string | null {
    if (error instanceof VectorSearchUnavailableError) return error.message;
    // The embedder's vectors do not fit the index (another dimension): a configuration fault, not the caller's.
    if (error instanceof InvalidSearchRequestError) return `the query vector does not fit the index: ${error.message}`;
    return null;
  }

  function fuse<Hit extends { id: string; score: number }>(query: HybridQuery<IndexedDocument>, lexical: readonly Hit[], nearest: readonly Hit[]): HybridReply<Hit> {
    const hits = new Map<string, Hit>();
    for (const hit of [...lexical, ...nearest]) if (!hits.has(hit.id)) hits.set(hit.id, hit);
    const fused = reciprocalRankFusion([lexical, nearest], settings.rrfK).filter((entry) => entry.score >= settings.minScore);
    return {
      mode: 'hybrid',
      fallback_reason: null,
      similarities: new Map(nearest.map((hit) => [hit.id, hit.score])),
      total: fused.length,
      items: fused.slice(query.offset, query.offset + query.limit).map((entry) => ({ ...(hits.get(entry.id) as Hit), score: entry.score })),
    };
  }

  async function search<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>): Promise<HybridReply<HitOf<Doc>>> {
    type Hit = HitOf<Doc>;
    const plan = planOf(collection, query);
    if (plan.kind === 'lexical' || embedder === null) return lexicalOnly(collection, query, plan.kind === 'lexical' ? plan.reason : null);
    // The query is embedded while the lexical side runs, and the k-NN is asked as soon as the
    // vector is there: on one connection (PGlite) it then waits right behind the lexical
    // statement instead of behind whatever took the connection while the embedding ran.
    const lexical = lexicalPage(collection, query, plan.pool, 0);
    // Settled either way below; a failure surfaces where it is awaited.
    lexical.catch(() => undefined);
    let vector: number[];
    try {
      vector = query.vector ?? (await embedder.embed([plan.text]))[0];
    } catch (error) {
      await lexical;
      return lexicalOnly(collection, query, `embedding the query failed: ${errorMessage(error)}`);
    }
    const nearest = deps.search.knn(collection, { repositoryId: query.repositoryId, vector, k: plan.pool, ids: query.ids, hide: query.hide, filters: query.filters });
    nearest.catch(() => undefined);
    const lexicalItems = (await lexical).items;
    let nearestItems: Hit[];
    try {
      nearestItems = (await nearest).items;
    } catch (error) {
      const reason = knnFallbackReason(error);
      if (reason === null) throw error;
      return lexicalOnly(collection, query, reason);
    }
    return fuse(query, lexicalItems, await withoutExcluded(collection, query, plan.excluded, nearestItems));
  }

  /** The vector side's k nearest as a reply: cosine scores, nothing fused. */
  function nearestReply<Hit extends { id: string; score: number }>(query: HybridQuery<IndexedDocument>, nearest: readonly Hit[]): HybridReply<Hit> {
    return {
      mode: 'hybrid',
      fallback_reason: null,
      similarities: new Map(nearest.map((hit) => [hit.id, hit.score])),
      total: nearest.length,
      items: nearest.slice(query.offset, query.offset + query.limit),
    };
  }

  /**
   * searchMany and nearestMany: one embedding call and one knnMany for the batch, then per query
   * either the lexical side fused in (`withLexical`) or the nearest alone.
   */
  async function answerMany<Doc extends IndexedDocument>(collection: SearchCollection<Doc>, queries: readonly HybridQuery<Doc>[], withLexical: boolean): Promise<HybridReply<HitOf<Doc>>[]> {
    type Hit = HitOf<Doc>;
    // The vector side ranks as deep as in a hybrid search (over-fetched) even when nothing is
    // fused: HNSW's recall grows with k (ef_search follows it), and the nearest must be the ones
    // hybrid search would find.
    const plans = queries.map((query) => planOf(collection, query));
    const answers: Array<HybridReply<Hit> | null> = queries.map(() => null);
    for (const [index, plan] of plans.entries()) if (plan.kind === 'lexical') answers[index] = await lexicalOnly(collection, queries[index], plan.reason);
    const hybrid = plans.flatMap((plan, index) => (plan.kind === 'hybrid' ? [{ index, pool: plan.pool, text: plan.text, excluded: plan.excluded }] : []));
    if (hybrid.length > 0 && embedder !== null) {
      // The vectors not given are embedded in one call; when it fails, those queries answer lexically, as `search` would.
      const vectors = new Map(hybrid.flatMap(({ index }) => (queries[index].vector ? [[index, queries[index].vector as number[]] as const] : [])));
      const missing = hybrid.filter(({ index }) => !vectors.has(index));
      let embedFailure: string | null = null;
      if (missing.length > 0) {
        try {
          const embedded = await embedder.embed(missing.map(({ text }) => text));
          missing.forEach(({ index }, position) => vectors.set(index, embedded[position]));
        } catch (error) {
          embedFailure = `embedding the query failed: ${errorMessage(error)}`;
        }
      }
      for (const { index } of hybrid) if (!vectors.has(index)) answers[index] = await lexicalOnly(collection, queries[index], embedFailure);
      const ready = hybrid.filter(({ index }) => vectors.has(index));
      if (ready.length > 0) {
        // One k-NN call for the batch (one statement on PostgreSQL); the lexical sides one by one.
        let nearest: Array<{ items: Hit[] }>;
        try {
          nearest = await deps.search.knnMany(
            collection,
            ready.map(({ index, pool }) => ({ repositoryId: queries[index].repositoryId, vector: vectors.get(index) as number[], k: pool, ids: queries[index].ids, hide: queries[index].hide, filters: queries[index].filters })),
          );
        } catch (error) {
          const reason = knnFallbackReason(error);
          if (reason === null) throw error;
          for (const { index } of ready) answers[index] = await lexicalOnly(collection, queries[index], reason);
          nearest = [];
        }
        for (const [position, { index, pool, excluded }] of ready.entries()) {
          const found = nearest[position];
          if (found === undefined) continue;
          const kept = await withoutExcluded(collection, queries[index], excluded, found.items);
          if (!withLexical) {
            answers[index] = nearestReply(queries[index], kept);
            continue;
          }
          const lexical = await lexicalPage(collection, queries[index], pool, 0);
          answers[index] = fuse(queries[index], lexical.items, kept);
        }
      }
    }
    return answers.map((answer) => {
      if (answer === null) throw new Error('hybrid searchMany left a query unanswered');
      return answer;
    });
  }

  return {
    search,
    searchMany: (collection, queries) => answerMany(collection, queries, true),
    nearestMany: (collection, queries) => answerMany(collection, queries, false),
  };
}
