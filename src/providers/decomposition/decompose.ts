import { contentHash, normalizeContent } from '../../interchange/hashing.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import type { ExtractedFact, FactExtractor } from '../llm/port.js';
import type { Promptset } from '../llm/promptsets.js';
import { chunkText, DEFAULT_CHUNKING, type ChunkingSettings, type TextChunk } from './chunking.js';

export interface DecomposableDocument {
  text: string;
  title?: string | null;
}

export interface DecomposedFact {
  /** Normalized per the content_hash contract, so `contentHash === sha256(content)`. */
  content: string;
  contentHash: string;
  /** Provenance span as the extractor reported it, trimmed. */
  sourceText: string;
  /** The chunk the fact was first extracted from. */
  chunkIndex: number;
  /** 0-based sentence of that chunk the fact came from; -1 when unknown. */
  sentenceIndex: number;
}

export interface DecompositionOptions {
  /** Chunks extracted at once (`providers.decomposition.concurrency.fact`); default 1. */
  concurrency?: number;
  /** The repository's effective promptset, passed to the extractor. */
  promptset?: Promptset;
}

export interface DecompositionResult {
  modelId: string;
  facts: DecomposedFact[];
}

/**
 * How much text around a chunk is passed as `previousContext` and `nextContext`: enough for the
 * last few sentences before it (their subjects resolve pronouns at the chunk's start) and to
 * finish a sentence its end cuts.
 */
export const CONTEXT_CHARS = 1000;

/**
 * Chunks the document, extracts facts from up to `options.concurrency` chunks at once, and
 * keeps, in text order, the first fact of each content_hash: overlapping chunks yield
 * duplicates. Facts with empty content are dropped. The first failing chunk fails the whole.
 */
export async function decomposeDocument(
  doc: DecomposableDocument,
  extractor: FactExtractor,
  settings: ChunkingSettings = DEFAULT_CHUNKING,
  signal?: AbortSignal,
  options: DecompositionOptions = {},
): Promise<DecompositionResult> {
  if (typeof doc?.text !== 'string') throw new TypeError('decomposeDocument expects doc.text to be a string');
  const chunks = chunkText(doc.text, settings);
  const perChunk = await mapWithConcurrency(chunks, Math.max(1, Math.floor(options.concurrency ?? 1)), async (chunk) => {
    signal?.throwIfAborted();
    const previousContext = doc.text.slice(Math.max(0, chunk.start - CONTEXT_CHARS), chunk.start);
    const nextContext = doc.text.slice(chunk.end, chunk.end + CONTEXT_CHARS);
    return extractor.extractFacts(
      {
        text: chunk.text,
        title: doc.title ?? null,
        chunkIndex: chunk.index,
        ...(previousContext === '' ? {} : { previousContext }),
        ...(nextContext === '' ? {} : { nextContext }),
        ...(options.promptset ? { promptset: options.promptset } : {}),
      },
      signal,
    );
  });

  const seenHashes = new Set<string>();
  const facts: DecomposedFact[] = [];
  chunks.forEach((chunk, position) => {
    for (const fact of normalizeFacts(perChunk[position])) {
      if (seenHashes.has(fact.contentHash)) continue;
      seenHashes.add(fact.contentHash);
      facts.push({ ...fact, chunkIndex: chunk.index, sentenceIndex: sentenceIndexOf(fact.raw, fact.sourceText, chunk) });
    }
  });
  signal?.throwIfAborted();
  return {
    modelId: extractor.modelId,
    facts: facts.map(({ content, contentHash: hash, sourceText, chunkIndex, sentenceIndex }) => ({ content, contentHash: hash, sourceText, chunkIndex, sentenceIndex })),
  };
}

/** A model's facts, normalized and hashed; malformed or empty entries dropped. */
export function normalizeFacts(extracted: unknown): Array<{ content: string; contentHash: string; sourceText: string; raw: ExtractedFact }> {
  const normalized: Array<{ content: string; contentHash: string; sourceText: string; raw: ExtractedFact }> = [];
  // Adapters parse model output; tolerate malformed entries rather than fail the source.
  for (const fact of Array.isArray(extracted) ? (extracted as unknown[]) : []) {
    if (typeof fact !== 'object' || fact === null || typeof (fact as ExtractedFact).content !== 'string') continue;
    const raw = fact as ExtractedFact;
    const content = normalizeContent(raw.content);
    if (content === '') continue;
    normalized.push({ content, contentHash: contentHash(content), sourceText: typeof raw.sourceText === 'string' ? raw.sourceText.trim() : '', raw });
  }
  return normalized;
}

/**
 * The 0-based sentence of the chunk a fact came from: as the extractor said, or else where its
 * source text starts in the chunk; -1 when neither tells.
 */
function sentenceIndexOf(fact: ExtractedFact, sourceText: string, chunk: TextChunk): number {
  if (Number.isSafeInteger(fact.sentenceIndex) && (fact.sentenceIndex ?? -1) >= 0) return fact.sentenceIndex as number;
  if (sourceText === '') return -1;
  const offset = chunk.text.indexOf(sourceText);
  if (offset < 0) return -1;
  let index = 0;
  for (const segment of sentenceSegmenter().segment(chunk.text)) {
    if (segment.index + segment.segment.length > offset) return index;
    if (segment.segment.trim() !== '') index += 1;
  }
  return -1;
}

let segmenter: Intl.Segmenter | null = null;
function sentenceSegmenter(): Intl.Segmenter {
  segmenter ??= new Intl.Segmenter('en', { granularity: 'sentence' });
  return segmenter;
}
