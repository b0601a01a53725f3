/**
 * The chat-model role (DESIGN.md, "Providers"). Adapters: `local.ts` (rule-based, no network)
 * and `openai.ts` (an OpenAI-compatible `/v1/chat/completions` client). Chunking, hashing,
 * deduplication and concept resolution are the callers' job, so adapters stay thin: they turn
 * one prompt's worth of input into structured output and classify their failures.
 *
 * Failures: an adapter throws `ModelCallError` with `permanent` set when a retry cannot help
 * (401/403/404/400 from the provider, output that fails validation after the retries of
 * `providers.llm_retry`); anything else (timeouts, 429, 5xx, resets) is transient.
 */
import type { ThinkingLevel } from '../../config/types.js';
import type { Promptset } from './promptsets.js';

export type { ThinkingLevel };

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
  /** The repository's effective promptset (the `fact_extraction` phase is used here). */
  promptset?: Promptset;
}

export interface ExtractedFact {
  /** The fact as a self-contained statement: references resolved, markup removed. */
  content: string;
  /** The span of the chunk the fact came from (provenance only). */
  sourceText: string;
  /**
   * 0-based index, within the chunk, of the sentence the fact came from (sentence provenance);
   * adapters that cannot tell leave it undefined.
   */
  sentenceIndex?: number;
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

/** One image of a source, for image fact extraction. */
export interface ImageInput {
  bytes: Uint8Array;
  contentType: string;
  /** alt text, title or figure caption found next to the image, when any. */
  altText?: string | null;
  caption?: string | null;
  /** Text around the image in the source (a few hundred characters), when known. */
  surroundingText?: string | null;
  sourceTitle?: string | null;
  promptset?: Promptset;
}

/** A concept context the model may assign: a built-in ontology level or a custom context. */
export interface ConceptContextChoice {
  name: string;
  description: string;
}

export interface ConceptExtractionInput {
  /** Up to `providers.decomposition.concept.fact_batch_size` facts. */
  facts: ReadonlyArray<{ id: string; content: string }>;
  /** The contexts allowed in this repository (never empty). */
  contexts: readonly ConceptContextChoice[];
  promptset?: Promptset;
}

export interface ConceptCandidate {
  /** The preferred full name ("Marie Curie", "X-ray crystallography"). */
  canonicalName: string;
  /** One of the input contexts' names. */
  context: string;
  ontologyClass?: string | null;
  /** Other surface forms seen in the facts ("Curie", "Madame Curie"); may be empty. */
  aliases: string[];
  /** Ids of the input facts that mention the concept (never empty). */
  factIds: string[];
}

export interface RefinementInput {
  /** Concepts of one context that may name the same thing, or carry too many aliases. */
  concepts: ReadonlyArray<{ id: string; canonicalName: string; context: string; aliases: string[]; factCount: number }>;
  /** Concepts with at least this many aliases get their aliases pruned (`providers.refinement.prune_threshold`). */
  pruneThreshold: number;
  promptset?: Promptset;
}

export type RefinementDecision =
  | { type: 'merge'; loserId: string; survivorId: string; reason: string }
  | { type: 'remove_alias'; conceptId: string; alias: string; reason: string };

/** A report sentence and the facts hybrid search matched it to, for posture judgement. */
export interface PostureInput {
  sentence: string;
  facts: ReadonlyArray<{ id: string; content: string }>;
  promptset?: Promptset;
}

/** How a fact stands to a sentence, as a model may answer; `irrelevant` pairs are left out of judgements. */
export type PostureLabel = 'supports' | 'contradicts' | 'related' | 'irrelevant';

export interface PostureJudgement {
  factId: string;
  posture: Exclude<PostureLabel, 'irrelevant'>;
}

/** The concept a summary or synthesis is about. */
export interface ConceptIdentity {
  id: string;
  canonicalName: string;
  context: string;
  aliases: readonly string[];
}

/** One summary slice's worth of a concept's facts (`providers.summarization`). */
export interface SliceSummaryInput {
  concept: ConceptIdentity;
  /** The slice's facts in their stable order (at most batch_size). The summary cites only these. */
  facts: ReadonlyArray<{ id: string; content: string }>;
  /** `providers.summarization.max_tokens`: the length the summary must stay within. */
  maxTokens: number;
  promptset?: Promptset;
}


/** Everything a concept's synthesis is made from (`providers.synthesis`). */
export interface SynthesisInput {
  concept: ConceptIdentity;
  /** The concept's summary slices, in slice order (empty when summarization is off). */
  summaries: ReadonlyArray<{ id: string; content: string; factIds: readonly string[] }>;
  /** The facts the synthesis may cite: the slices' facts (or the concept's, without slices). */
  facts: ReadonlyArray<{ id: string; content: string }>;
  /** Concepts sharing most facts with it, strongest first, with their synthesis when they have one. */
  relatedConcepts: ReadonlyArray<{ id: string; canonicalName: string; summary: string | null }>;
  /** The syntheses of the strongest related concepts: context only, never cited. */
  relatedSyntheses: ReadonlyArray<{ conceptId: string; canonicalName: string; content: string }>;
  /** Image candidates: image facts of the concept (their caption is the fact). */
  images: ReadonlyArray<{ factId: string; imageId: string; caption: string }>;
  maxImages: number;
  maxTokens: number;
  /** Passed to models that reason before answering; others ignore it. */
  thinkingLevel: ThinkingLevel;
  promptset?: Promptset;
}

export interface SynthesisOutput {
  /** Markdown citing facts of the input as `[text](<fact:FACT_ID>)`. */
  content: string;
  /** Chosen images (fact ids of image facts among the candidates), best first, at most maxImages. */
  imageFactIds: string[];
}

export interface ChatModel extends FactExtractor {
  /** Whether `extractImageFacts` looks at the pixels (vision) rather than only at the text around an image. */
  readonly canSeeImages: boolean;
  /** Facts an image shows, as self-contained statements. */
  extractImageFacts(input: ImageInput, signal?: AbortSignal): Promise<ExtractedFact[]>;
  /** Concepts the facts mention, each linked to the facts that mention it. */
  extractConcepts(input: ConceptExtractionInput, signal?: AbortSignal): Promise<ConceptCandidate[]>;
  /** Merges of concepts naming the same thing, and aliases to prune. */
  refineConcepts(input: RefinementInput, signal?: AbortSignal): Promise<RefinementDecision[]>;
  /**
   * How each fact stands to the sentence (report annotation). A fact the model leaves out is
   * irrelevant; ids it invents are ignored by the adapters.
   */
  judgePostures(input: PostureInput, signal?: AbortSignal): Promise<PostureJudgement[]>;
  /** Markdown summarising one slice of a concept's facts, citing only those facts. The caller checks the citations. */
  summarizeFacts(input: SliceSummaryInput, signal?: AbortSignal): Promise<{ content: string }>;
  /** The concept's synthesis. The caller checks the citations and the images chosen. */
  synthesizeConcept(input: SynthesisInput, signal?: AbortSignal): Promise<SynthesisOutput>;
  /** Releases what the adapter holds (the built-in models' worker threads); no calls after it. */
  close?(): Promise<void>;
}

/** A model call that failed; `permanent` says whether a retry could help. */
export class ModelCallError extends Error {
  override readonly name = 'ModelCallError';
  constructor(
    message: string,
    readonly permanent: boolean,
    /** HTTP status of the provider's answer, when there was one. */
    readonly status?: number,
    /**
     * How long the provider asked to be left alone (its Retry-After), when it did: the job
     * runtime schedules the job's next attempt no sooner (retryAfterMsOf, pipeline/types.ts).
     */
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }
}
