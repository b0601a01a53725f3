import { checkTexts, embedTexts, LOCAL_EMBEDDER_DIMENSIONS, LOCAL_EMBEDDER_MODEL_ID } from '../embeddings/local.js';
import { WordTable } from '../embeddings/wordTable.js';
import type { Embedder } from '../embeddings/port.js';
import { LOCAL_FACT_EXTRACTOR_MODEL_ID } from '../llm/local.js';
import { localSliceSummary, localSynthesis } from '../llm/localSummaries.js';
import type {
  ChatModel,
  ConceptCandidate,
  ConceptExtractionInput,
  ExtractedFact,
  FactExtractionInput,
  ImageInput,
  PostureInput,
  RefinementDecision,
  RefinementInput,
  SliceSummaryInput,
  SynthesisInput,
} from '../llm/port.js';
import { judgePosturesLocally } from '../llm/localPosture.js';
import { ModelWorkerPool, type ModelWorkerPoolOptions } from './pool.js';
import type { ModelCall } from './protocol.js';
import { ModelCallError } from '../llm/port.js';

/**
 * The built-in chat model and embedder, run in worker threads (pool.ts) behind the usual ports:
 * the same results as `createLocalChatModel` / `createLocalEmbedder`, computed off the API thread.
 * One pool per process (per options) serves every adapter made here, so the models are loaded
 * once however many adapters there are; `close` releases an adapter's share, and the last one
 * terminates the workers. Creating an adapter starts loading its model at once, unless
 * `loadAtStart` is false.
 */

export interface ModelWorkerOptions extends ModelWorkerPoolOptions {
  /**
   * Start the workers and load the model when the adapter is made (default: the first call does
   * not wait for it), or only at the first call. Test services that may never call a model pass
   * false: about 2 s of CPU per service.
   */
  loadAtStart?: boolean;
  /**
   * How long the process's pool stays after its last adapter is closed, for the next one made
   * meanwhile (default 0: its workers end at once). Test services set it: a grouped test process
   * starts dozens of services one after another, and each would load the models again.
   */
  keepIdleMs?: number;
}

export interface ClosableChatModel extends ChatModel {
  close(): Promise<void>;
}

export interface ClosableEmbedder extends Embedder {
  close(): Promise<void>;
}

export function createWorkerChatModel(options: ModelWorkerOptions = {}): ClosableChatModel {
  const lease = leasePool(options);
  if (options.loadAtStart !== false) lease.pool().preloadChat();
  const pool = { call: async <T>(call: ModelCall, signal?: AbortSignal) => lease.pool().call<T>(call, signal) };
  // Inputs are structured-cloned as they are; the worker checks them as the in-thread model does.
  return {
    modelId: LOCAL_FACT_EXTRACTOR_MODEL_ID,
    canSeeImages: false,
    extractFacts: (input: FactExtractionInput, signal?: AbortSignal) =>
      pool.call<ExtractedFact[]>({ method: 'extractFacts', input: withoutPromptset(input) }, signal),
    // It sees no pixels: the image's bytes stay on this thread.
    extractImageFacts: (input: ImageInput, signal?: AbortSignal) =>
      pool.call<ExtractedFact[]>({ method: 'extractImageFacts', input: isObject(input) ? { ...withoutPromptset(input), bytes: new Uint8Array(0) } : input }, signal),
    extractConcepts: (input: ConceptExtractionInput, signal?: AbortSignal) =>
      pool.call<ConceptCandidate[]>({ method: 'extractConcepts', input: withoutPromptset(input) }, signal),
    refineConcepts: (input: RefinementInput, signal?: AbortSignal) =>
      pool.call<RefinementDecision[]>({ method: 'refineConcepts', input: withoutPromptset(input) }, signal),
    // A word-overlap rule of microseconds: a round trip to a worker would cost more than it.
    judgePostures: async (input: PostureInput, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      return judgePosturesLocally(input);
    },
    // Extractive and cheap (no word table, no tagger): on the calling thread, no copy to a worker.
    summarizeFacts: async (input: SliceSummaryInput, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      return localSliceSummary(input);
    },
    synthesizeConcept: async (input: SynthesisInput, signal?: AbortSignal) => {
      signal?.throwIfAborted();
      return localSynthesis(input);
    },
    close: lease.release,
  };
}

/**
 * Up to this many characters in one `embed` call are embedded on the calling thread, from the
 * same shared table (no copy): about 0.1 ms of work, so a search query does not wait in line
 * behind the pipeline's calls in the workers.
 */
const IN_THREAD_CHARACTERS = 1_000;

export function createWorkerEmbedder(options: ModelWorkerOptions = {}): ClosableEmbedder {
  const lease = leasePool(options);
  // Started now, at boot; the first embed waits for it.
  if (options.loadAtStart !== false) lease.pool().wordTable().catch(() => undefined);
  const dimensions = LOCAL_EMBEDDER_DIMENSIONS;
  let table: WordTable | null = null;
  return {
    modelId: LOCAL_EMBEDDER_MODEL_ID,
    dimensions,
    async embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]> {
      signal?.throwIfAborted();
      checkTexts(texts);
      if (texts.length === 0) return [];
      const buffers = await lease.pool().wordTable();
      if (texts.reduce((sum, text) => sum + text.length, 0) <= IN_THREAD_CHARACTERS) {
        table ??= new WordTable(buffers);
        return embedTexts(table, texts, signal);
      }
      const flat = await lease.pool().call<Float64Array>({ method: 'embed', texts }, signal);
      return Array.from({ length: texts.length }, (_, i) => Array.from(flat.subarray(i * dimensions, (i + 1) * dimensions)));
    },
    close: lease.release,
  };
}

// ---------------------------------------------------------------------------------------------
// One pool per process and options, shared by the adapters that hold a lease on it

interface SharedPool {
  options: ModelWorkerPoolOptions;
  /** Made at the first use, so a lease that never calls starts no worker. */
  pool: ModelWorkerPool | null;
  leases: number;
  /** While no lease holds it: the timer that ends it (`keepIdleMs`). */
  idleEnd: NodeJS.Timeout | null;
}

const pools = new Map<string, SharedPool>();
let poolStarts = 0;

/** How many pools this process has started (each loads the models again): what `keepIdleMs` saves, for tests and benches. */
export function localModelPoolStarts(): number {
  return poolStarts;
}

function leasePool({ loadAtStart: _perLease, keepIdleMs = 0, ...options }: ModelWorkerOptions): { pool: () => ModelWorkerPool; release: () => Promise<void> } {
  const key = JSON.stringify([options.size ?? null, options.cacheDir ?? null, options.resourceLimits ?? null]);
  let shared = pools.get(key);
  if (shared === undefined) {
    shared = { options, pool: null, leases: 0, idleEnd: null };
    pools.set(key, shared);
  }
  if (shared.idleEnd !== null) {
    clearTimeout(shared.idleEnd);
    shared.idleEnd = null;
  }
  shared.leases++;
  const held = shared;
  let released = false;
  return {
    pool() {
      // A released lease calls no more, whether its pool ended or is kept for the next lease.
      if (released) throw new ModelCallError('the local models are closed', false);
      if (held.pool === null) {
        held.pool = new ModelWorkerPool(held.options);
        poolStarts++;
      }
      return held.pool;
    },
    async release() {
      if (released) return;
      released = true;
      held.leases--;
      if (held.leases > 0) return;
      const end = async () => {
        held.idleEnd = null;
        if (pools.get(key) === held) pools.delete(key);
        await held.pool?.close();
      };
      if (keepIdleMs <= 0 || held.pool === null) return end();
      // Its workers keep the process alive until then; the timer itself does not.
      held.idleEnd = setTimeout(() => void end(), keepIdleMs).unref();
    },
  };
}

function isObject(value: unknown): value is object {
  return value !== null && typeof value === 'object';
}

/** The local model ignores prompts: they are not copied to the worker. */
function withoutPromptset<T>(input: T): T {
  if (!isObject(input) || !('promptset' in input)) return input;
  const { promptset: _ignored, ...rest } = input;
  return rest as T;
}
