/**
 * The embedding role (DESIGN.md, "Providers"). Adapters: `local.ts` (word vectors shipped in
 * an npm package, no network) and `openai.ts` (an OpenAI-compatible `/v1/embeddings` client
 * with `embed_batch_size` batches and rate-limit waits). Failures are `ModelCallError`s
 * (providers/llm/port.ts), transient unless the provider says otherwise.
 */
export interface Embedder {
  /** Recorded with every vector (EmbeddingData.model); vectors of two models never mix. */
  readonly modelId: string;
  readonly dimensions: number;
  /**
   * One vector per text, in order, each of length `dimensions` and not all zeros (a text with
   * nothing to embed gets a fixed non-zero vector, so cosine similarity stays defined).
   */
  embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]>;
  /** Releases what the adapter holds (the built-in models' worker threads); no calls after it. */
  close?(): Promise<void>;
}
