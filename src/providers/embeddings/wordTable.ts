/**
 * The local embedder's word table in a handful of flat buffers instead of JavaScript objects:
 * the unit word vectors in one Float32Array, and the word → row index as an open-addressing hash
 * table over the words' UTF-16 code units. No per-word string or Map entry exists, so the table
 * costs its bytes (about 63 MB for 150,000 words, 60 MB of them vectors) and nothing on the
 * JavaScript heap, and its buffers are SharedArrayBuffers: the model worker threads
 * (providers/modelWorkers) read one copy.
 */

/** The buffers a table is made of; they cross to worker threads without being copied. */
export interface WordTableBuffers {
  /** Words (rows) in the table. */
  count: number;
  dimensions: number;
  /** Float32 × count × dimensions: row `rank` is the unit vector of the word of that frequency rank. */
  vectors: SharedArrayBuffer;
  /** Float32 × dimensions: the direction all sentence vectors share (see local.ts). */
  common: SharedArrayBuffer;
  /** Uint16: the UTF-16 code units of every word, in rank order. */
  text: SharedArrayBuffer;
  /** Uint32 × (count + 1): word `rank` is text[starts[rank], starts[rank + 1]). */
  starts: SharedArrayBuffer;
  /** Int32, a power of two ≥ 2 × count: a row, or -1 for an empty slot. */
  slots: SharedArrayBuffer;
}

const EMPTY_SLOT = -1;

export class WordTable {
  readonly size: number;
  readonly vectors: Float32Array;
  readonly common: Float32Array;
  private readonly text: Uint16Array;
  private readonly starts: Uint32Array;
  private readonly slots: Int32Array;
  private readonly mask: number;

  constructor(readonly buffers: WordTableBuffers) {
    this.size = buffers.count;
    this.vectors = new Float32Array(buffers.vectors);
    this.common = new Float32Array(buffers.common);
    this.text = new Uint16Array(buffers.text);
    this.starts = new Uint32Array(buffers.starts);
    this.slots = new Int32Array(buffers.slots);
    this.mask = this.slots.length - 1;
    if (this.vectors.length !== buffers.count * buffers.dimensions || this.starts.length !== buffers.count + 1 || (this.slots.length & this.mask) !== 0) {
      throw new RangeError('word table buffers do not fit together');
    }
  }

  /** The word's row (its frequency rank), or undefined when the word is not in the table. */
  rankOf(word: string): number | undefined {
    for (let slot = hashOf(word) & this.mask; ; slot = (slot + 1) & this.mask) {
      const rank = this.slots[slot] as number;
      if (rank === EMPTY_SLOT) return undefined;
      if (isWordAt(this.text, this.starts, rank, word)) return rank;
    }
  }
}

function isWordAt(text: Uint16Array, starts: Uint32Array, rank: number, word: string): boolean {
  const start = starts[rank] as number;
  if ((starts[rank + 1] as number) - start !== word.length) return false;
  for (let i = 0; i < word.length; i++) if (text[start + i] !== word.charCodeAt(i)) return false;
  return true;
}

/**
 * A table of `words` (in rank order) and their vectors, already in a SharedArrayBuffer. A word
 * listed twice keeps its later row, as a Map filled in rank order would.
 */
export function buildWordTable(
  words: readonly string[],
  vectors: SharedArrayBuffer,
  dimensions: number,
  common: (vectors: Float32Array, count: number) => Float32Array,
): WordTable {
  const count = words.length;
  let length = 0;
  for (const word of words) length += word.length;
  const text = new Uint16Array(new SharedArrayBuffer(length * Uint16Array.BYTES_PER_ELEMENT));
  const starts = new Uint32Array(new SharedArrayBuffer((count + 1) * Uint32Array.BYTES_PER_ELEMENT));
  let capacity = 1;
  while (capacity < count * 2) capacity *= 2;
  const slots = new Int32Array(new SharedArrayBuffer(capacity * Int32Array.BYTES_PER_ELEMENT)).fill(EMPTY_SLOT);
  const commonBuffer = new SharedArrayBuffer(dimensions * Float32Array.BYTES_PER_ELEMENT);
  const buffers: WordTableBuffers = { count, dimensions, vectors, common: commonBuffer, text: text.buffer, starts: starts.buffer, slots: slots.buffer };

  let at = 0;
  words.forEach((word, rank) => {
    starts[rank] = at;
    for (let i = 0; i < word.length; i++) text[at + i] = word.charCodeAt(i);
    at += word.length;
  });
  starts[count] = at;
  const mask = capacity - 1;
  words.forEach((word, rank) => {
    for (let slot = hashOf(word) & mask; ; slot = (slot + 1) & mask) {
      const held = slots[slot] as number;
      if (held === EMPTY_SLOT || isWordAt(text, starts, held, word)) {
        slots[slot] = rank;
        return;
      }
    }
  });
  const table = new WordTable(buffers);
  new Float32Array(commonBuffer).set(common(table.vectors, count));
  return table;
}

/** FNV-1a over UTF-16 code units. */
function hashOf(word: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < word.length; i++) {
    hash ^= word.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}
