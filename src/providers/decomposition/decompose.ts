import { contentHash, normalizeContent } from '../../interchange/hashing.js';
import type { FactExtractor } from '../llm/port.js';
import { chunkText, DEFAULT_CHUNKING, type ChunkingSettings } from './chunking.js';

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
 * Chunks the document, extracts facts chunk by chunk (in order, so output order is text
 * order), and keeps the first fact of each content_hash: overlapping chunks yield duplicates.
 * Facts with empty content are dropped.
 */
export async function decomposeDocument(
  doc: DecomposableDocument,
  extractor: FactExtractor,
  settings: ChunkingSettings = DEFAULT_CHUNKING,
  signal?: AbortSignal,
): Promise<DecompositionResult> {
  if (typeof doc?.text !== 'string') throw new TypeError('decomposeDocument expects doc.text to be a string');
  const chunks = chunkText(doc.text, settings);
  const seenHashes = new Set<string>();
  const facts: DecomposedFact[] = [];

  for (const chunk of chunks) {
    signal?.throwIfAborted();
    const previousContext = doc.text.slice(Math.max(0, chunk.start - CONTEXT_CHARS), chunk.start);
    const nextContext = doc.text.slice(chunk.end, chunk.end + CONTEXT_CHARS);
    const extracted = await extractor.extractFacts(
      {
        text: chunk.text,
        title: doc.title ?? null,
        chunkIndex: chunk.index,
        ...(previousContext === '' ? {} : { previousContext }),
        ...(nextContext === '' ? {} : { nextContext }),
      },
      signal,
    );
    // Adapters parse model output; tolerate malformed entries rather than fail the source.
    for (const fact of Array.isArray(extracted) ? extracted : []) {
      if (typeof fact?.content !== 'string') continue;
      const content = normalizeContent(fact.content);
      if (content === '') continue;
      const hash = contentHash(content);
      if (seenHashes.has(hash)) continue;
      seenHashes.add(hash);
      facts.push({
        content,
        contentHash: hash,
        sourceText: typeof fact.sourceText === 'string' ? fact.sourceText.trim() : '',
        chunkIndex: chunk.index,
      });
    }
  }
  signal?.throwIfAborted();
  return { modelId: extractor.modelId, facts };
}
