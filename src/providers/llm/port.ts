/**
 * The chat-model role used by source decomposition: turn one chunk of a source into atomic,
 * self-contained facts. Adapters: `local.ts` (rule-based, no network) and, later, an
 * OpenAI-compatible client. Chunking, normalization, hashing and deduplication are the
 * caller's job (`providers/decomposition/decompose.ts`), so adapters stay thin.
 */

export interface FactExtractionInput {
  /** The chunk to decompose. */
  text: string;
  /** The source's title, when known: a topic hint for resolving references. */
  title?: string | null;
  /** 0-based position of the chunk in the source. */
  chunkIndex: number;
  /**
   * The source text immediately before `text` (empty or absent for the first chunk). It is for
   * resolving references only: facts are extracted from `text`, never from this context.
   * Because it is contiguous with `text`, a sentence cut by the chunk start can be recognized.
   */
  previousContext?: string;
  /**
   * The source text immediately after `text` (absent for the last chunk). Lets an extractor
   * finish a sentence that the chunk end cuts; facts still come from sentences that start in
   * `text`. Adapters may ignore it.
   */
  nextContext?: string;
}

export interface ExtractedFact {
  /** The fact as a self-contained statement: references resolved, markup removed. */
  content: string;
  /** The span of the chunk the fact came from (provenance only). */
  sourceText: string;
}

export interface FactExtractor {
  /** The chat model's identifier, recorded as the decomposition package's `model_id`. */
  readonly modelId: string;
  /**
   * Facts of `input.text`, in text order. Rejects with the signal's reason when aborted.
   * Adapters throw on failure; classifying failures as transient or permanent is theirs.
   */
  extractFacts(input: FactExtractionInput, signal?: AbortSignal): Promise<ExtractedFact[]>;
}
