/**
 * Splits a source text into overlapping chunks for fact extraction
 * (spec: `providers.decomposition.chunking`, chunk_size 2000 characters, chunk_overlap 200).
 *
 * Sizes count UTF-16 code units (JavaScript string length). Cuts avoid splitting a surrogate
 * pair, which can shift a chunk start by one unit (only astral characters such as emoji).
 */

import { avoidSplitPair } from '../../util/codePoints.js';

export interface ChunkingSettings {
  /** Maximum characters per chunk. */
  chunkSize: number;
  /** Characters each chunk repeats from the end of the previous one. */
  chunkOverlap: number;
}

export interface TextChunk {
  /** 0-based position in the returned list. */
  index: number;
  /** Offset of the chunk's first character in the text. */
  start: number;
  /** Offset just past the chunk's last character: `text.slice(start, end)` is the chunk. */
  end: number;
  text: string;
}

export const DEFAULT_CHUNKING: Readonly<ChunkingSettings> = Object.freeze({ chunkSize: 2000, chunkOverlap: 200 });

/** Throws a RangeError unless the settings can make progress through any text. */
export function validateChunkingSettings(settings: ChunkingSettings): void {
  const { chunkSize, chunkOverlap } = settings;
  if (!Number.isSafeInteger(chunkSize) || chunkSize <= 0) {
    throw new RangeError(`chunkSize must be a positive integer, got ${String(chunkSize)}`);
  }
  if (!Number.isSafeInteger(chunkOverlap) || chunkOverlap < 0) {
    throw new RangeError(`chunkOverlap must be a non-negative integer, got ${String(chunkOverlap)}`);
  }
  if (chunkOverlap >= chunkSize) {
    throw new RangeError(`chunkOverlap (${chunkOverlap}) must be smaller than chunkSize (${chunkSize})`);
  }
}

/**
 * Chunks of at most `chunkSize` characters; each chunk after the first starts `chunkOverlap`
 * characters before the previous chunk's end. A chunk ends, in order of preference, after a
 * paragraph break, after a sentence (or line) end, at a word end, or else exactly at the size
 * limit. Boundaries in the first half of the window are ignored so chunks do not shrink to
 * slivers. Whitespace-only chunks are left out (the chunk after one overlaps the blank
 * stretch, not the last chunk returned); an empty or blank text gives no chunks.
 */
export function chunkText(text: string, settings: ChunkingSettings = DEFAULT_CHUNKING): TextChunk[] {
  if (typeof text !== 'string') throw new TypeError('chunkText expects a string');
  validateChunkingSettings(settings);
  const { chunkSize, chunkOverlap } = settings;

  const chunks: TextChunk[] = [];
  const push = (start: number, end: number): void => {
    const slice = text.slice(start, end);
    if (slice.trim() !== '') chunks.push({ index: chunks.length, start, end, text: slice });
  };

  let start = 0;
  while (start < text.length) {
    if (text.length - start <= chunkSize) {
      push(start, text.length);
      break;
    }
    const windowEnd = start + chunkSize;
    // end > start + chunkOverlap guarantees the next start moves forward.
    const earliestEnd = start + Math.max(chunkOverlap + 1, Math.floor(chunkSize / 2));
    const end = findCut(text, earliestEnd, windowEnd);
    push(start, end);
    start = nextStart(text, start, end - chunkOverlap);
  }
  return chunks;
}

/** The preferred cut in [earliestEnd, windowEnd]; `windowEnd` itself when no boundary fits. */
function findCut(text: string, earliestEnd: number, windowEnd: number): number {
  return (
    lastBoundary(text, earliestEnd, windowEnd, isParagraphEnd) ??
    lastBoundary(text, earliestEnd, windowEnd, isSentenceEnd) ??
    lastBoundary(text, earliestEnd, windowEnd, isWordEnd) ??
    hardCut(text, earliestEnd, windowEnd)
  );
}

function hardCut(text: string, earliestEnd: number, windowEnd: number): number {
  const end = avoidSplitPair(text, windowEnd);
  return end >= earliestEnd ? end : windowEnd;
}

function lastBoundary(
  text: string,
  earliestEnd: number,
  windowEnd: number,
  isBoundary: (text: string, end: number) => boolean,
): number | null {
  for (let end = windowEnd; end >= earliestEnd; end--) {
    if (isBoundary(text, end)) return end;
  }
  return null;
}

/** `end` follows a blank line: a newline, optional spaces or tabs, and another newline. */
function isParagraphEnd(text: string, end: number): boolean {
  if (text[end - 1] !== '\n') return false;
  let i = end - 2;
  while (i >= 0 && (text[i] === ' ' || text[i] === '\t' || text[i] === '\r')) i--;
  return text[i] === '\n';
}

const SENTENCE_TERMINATORS = new Set(['.', '!', '?', '…']);
const CLOSERS = new Set(['"', "'", '”', '’', '»', ')', ']']);

/** `end` follows a line break, or a sentence terminator (plus closing quotes) before whitespace. */
function isSentenceEnd(text: string, end: number): boolean {
  if (text[end - 1] === '\n') return true;
  if (end >= text.length || !/\s/u.test(text[end] ?? '')) return false;
  let i = end - 1;
  while (i >= 0 && CLOSERS.has(text[i] ?? '')) i--;
  return SENTENCE_TERMINATORS.has(text[i] ?? '');
}

/** `end` is where a word stops and whitespace begins. */
function isWordEnd(text: string, end: number): boolean {
  return end > 0 && end < text.length && /\s/u.test(text[end] ?? '') && !/\s/u.test(text[end - 1] ?? '');
}

/**
 * Where the next chunk starts: `end - chunkOverlap`, moved one unit back (a character more of
 * overlap) or, when that would not advance, forward if it would split a surrogate pair.
 */
function nextStart(text: string, previousStart: number, overlapStart: number): number {
  const back = avoidSplitPair(text, overlapStart);
  if (back > previousStart) return back;
  return back === overlapStart ? overlapStart : overlapStart + 1;
}
