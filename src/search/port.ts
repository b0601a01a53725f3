/**
 * The SearchIndex port: lexical search now; k-NN and hybrid (RRF) search build on it.
 * Adapters: `postgres.ts` (full text on the read-model database) and, on the distributed tier,
 * `opensearch.ts`.
 */
export interface FactQuery {
  repositoryId: string;
  /** websearch_to_tsquery syntax: words, "quoted phrases", OR, -negation. Empty lists all facts. */
  query: string;
  limit: number;
  offset: number;
}

export interface FactHit {
  id: string;
  content: string;
  content_hash: string;
  fact_kind: string;
  status: string;
  /** Relevance score (higher is better); 0 when no query was given. */
  score: number;
  created_at: string;
}

export interface SearchIndex {
  searchFacts(query: FactQuery): Promise<{ total: number; items: FactHit[] }>;
}
