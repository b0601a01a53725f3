import { ModelCallError } from '../llm/port.js';
import { endpoint, type FetchFunction, postJson } from '../llm/openai.js';
import {
  abortableSleep,
  backoffCeilingMs,
  type LlmRetrySettings,
  messageWithCause,
  OutputValidationError,
  ProviderHttpError,
  runWithDeadline,
} from '../llm/retry.js';
import type { Embedder } from './port.js';
import { chunked } from '../../util/chunked.js';
import { headOfRunes } from '../../util/codePoints.js';

/**
 * Embeddings over an OpenAI-compatible API: POST `{baseUrl}/embeddings` in batches of
 * `providers.ai.embed_batch_size`, vectors put back in input order by their `index`. Each text is
 * sent cut to its first `providers.ai.embed_max_chars` characters (DEFAULT_EMBED_MAX_CHARS).
 *
 * Failures:
 * - 429: waited out (Retry-After, else the backoff) for as long as the rate-limit waits of this
 *   `embed` call add up to less than `providers.ai.rate_limit_wait_timeout`; then a transient
 *   ModelCallError hands the job back to the runtime. A 429 does not use up an attempt;
 * - timeouts, 5xx, connection errors: retried up to `providers.llm_retry.max_attempts`, then
 *   transient; a malformed reply likewise, then permanent;
 * - 400/401/403/404/422: permanent at once (the configuration is wrong: retrying cannot help).
 *
 * Vector length: requests carry no `dimensions` field at first, since older models
 * (text-embedding-ada-002) and some compatible servers refuse it with a 400. A reply longer than
 * `dimensions` is asked for again once with `dimensions` set (text-embedding-3 models shorten
 * their vectors so); if that reply has the configured length, every later request of this
 * embedder carries the field. A refusal (4xx), a reply still of another length, or a reply
 * shorter than `dimensions` (no API lengthens vectors) is permanent.
 */

export interface OpenAIEmbedderOptions {
  baseUrl: string;
  apiKey?: string;
  model: string;
  dimensions: number;
  /** Texts per request (`providers.ai.embed_batch_size`, default 32). */
  batchSize?: number;
  /** Characters (code points) of a text sent at most (`providers.ai.embed_max_chars`, default DEFAULT_EMBED_MAX_CHARS). */
  maxChars?: number;
  /** Longest total wait on 429s per `embed` call (`providers.ai.rate_limit_wait_timeout`, default 1h). */
  rateLimitWaitTimeoutMs?: number;
  retry: LlmRetrySettings;
  fetch?: FetchFunction;
  /** Jitter source (tests pass a fixed one). */
  random?: () => number;
  /** Called before each wait, for logs and tests. */
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown; rateLimited: boolean }) => void;
}

const DEFAULT_EMBED_BATCH_SIZE = 32;

/**
 * The characters of a text sent by default: a hosted model refuses an input over its limit with a
 * 400 (OpenAI's embedding models: 8,192 tokens), which failed the job for good, and a fact or a
 * report sentence can be 100 KB of text without a full stop. A byte-level BPE tokenizer counts
 * at most one token per UTF-8 byte, at most 4 per character (a rare CJK character, an emoji), so
 * 2,048 characters stay within 8,192 tokens in any script; an English text of that length is about
 * 500 tokens. The rest of a longer text hardly moves its vector.
 */
export const DEFAULT_EMBED_MAX_CHARS = 2048;
const DEFAULT_RATE_LIMIT_WAIT_TIMEOUT_MS = 3_600_000;

/**
 * The vector of a text with nothing to embed (providers reject empty input): a fixed unit vector,
 * so cosine similarity stays defined (Embedder contract).
 */
function placeholderVector(dimensions: number): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  vector[0] = 1;
  return vector;
}

/** The reply's vectors are not `dimensions` long: what that means depends on the request (embedBatch). */
class LengthMismatch extends Error {
  override readonly name = 'LengthMismatch';
  constructor(readonly returned: number) {
    super(`the embeddings reply holds ${returned}-dimensional vectors`);
  }
}

/** The reply's vectors in input order, or an OutputValidationError / LengthMismatch. */
function vectorsOf(reply: unknown, count: number, dimensions: number): number[][] {
  const data = (reply as { data?: unknown })?.data;
  if (!Array.isArray(data) || data.length !== count) {
    throw new OutputValidationError(`the embeddings reply holds ${Array.isArray(data) ? data.length : 'no'} vectors for ${count} inputs`);
  }
  const vectors = new Array<number[] | undefined>(count);
  data.forEach((item: unknown, position) => {
    const { index, embedding } = (item ?? {}) as { index?: unknown; embedding?: unknown };
    // Without an index the position is the order (some compatible servers omit it).
    const slot = index === undefined ? position : index;
    if (typeof slot !== 'number' || !Number.isInteger(slot) || slot < 0 || slot >= count || vectors[slot] !== undefined) {
      throw new OutputValidationError(`the embeddings reply has a bad or repeated index ${String(index)}`);
    }
    if (!Array.isArray(embedding) || !embedding.every((value) => typeof value === 'number' && Number.isFinite(value))) {
      throw new OutputValidationError(`the embeddings reply's vector ${slot} is not a list of numbers`);
    }
    if (embedding.length !== dimensions) throw new LengthMismatch(embedding.length);
    vectors[slot] = embedding.every((value) => value === 0) ? placeholderVector(dimensions) : (embedding as number[]);
  });
  return vectors as number[][];
}

export function createOpenAIEmbedder(options: OpenAIEmbedderOptions): Embedder {
  const fetchImpl = options.fetch ?? fetch;
  const url = endpoint(options.baseUrl, 'embeddings');
  const batchSize = Math.max(1, options.batchSize ?? DEFAULT_EMBED_BATCH_SIZE);
  const maxChars = Math.max(1, options.maxChars ?? DEFAULT_EMBED_MAX_CHARS);
  const rateLimitBudgetMs = options.rateLimitWaitTimeoutMs ?? DEFAULT_RATE_LIMIT_WAIT_TIMEOUT_MS;
  const random = options.random ?? Math.random;
  const { retry, dimensions, model } = options;
  const attempts = Math.max(1, Math.floor(retry.maxAttempts));
  /** Set once a reply to a request carrying `dimensions` had that length: later requests carry it from the start. */
  let sendDimensions = false;

  /** Permanent: the model's vectors cannot be had at the configured length. */
  const lengthError = (returned: number, why: string, status?: number) =>
    new ModelCallError(`embedding model ${model} returned ${returned}-dimensional vectors; providers.embeddings.dimensions is ${dimensions}: ${why}`, true, status);
  const cannotShorten = (nativeLength: number) =>
    `the model cannot return providers.embeddings.dimensions values (set it to the model's length, ${nativeLength})`;

  async function embedBatch(texts: string[], budget: { waitedMs: number }, jobSignal?: AbortSignal): Promise<number[][]> {
    let failures = 0;
    let rateLimits = 0;
    /** The length of this batch's vectors without `dimensions`, once a reply was longer: it is now asking with the field. */
    let nativeLength: number | undefined;
    for (;;) {
      jobSignal?.throwIfAborted();
      const withDimensions = sendDimensions || nativeLength !== undefined;
      const body = { model, input: texts, encoding_format: 'float', ...(withDimensions ? { dimensions } : {}) };
      try {
        const reply = await runWithDeadline((signal) => postJson(fetchImpl, url, options.apiKey, body, signal), retry.perCallTimeoutMs, jobSignal);
        const vectors = vectorsOf(reply, texts.length, dimensions);
        if (withDimensions) sendDimensions = true;
        return vectors;
      } catch (error) {
        if (jobSignal?.aborted) throw jobSignal.reason;
        if (error instanceof LengthMismatch) {
          if (!withDimensions && error.returned > dimensions) {
            // Not a failure: the same request with `dimensions`, at once and without using an attempt.
            nativeLength = error.returned;
            continue;
          }
          if (!withDimensions) {
            throw lengthError(error.returned, `a model's vectors cannot be lengthened (set it to the model's length, ${error.returned})`);
          }
          throw lengthError(
            nativeLength ?? error.returned,
            `asked for ${dimensions} with the request's dimensions field, it returned ${error.returned}; ` +
              (nativeLength === undefined ? 'the model cannot return providers.embeddings.dimensions values' : cannotShorten(nativeLength)),
          );
        }
        // Refused for good (ProviderHttpError's one permanence check): with the field just added, the
        // field is what was refused. Anything retryable is retried below with the field kept.
        if (nativeLength !== undefined && error instanceof ProviderHttpError && error.permanent) {
          throw lengthError(
            nativeLength,
            `asked for ${dimensions} with the request's dimensions field, it was refused (${messageWithCause(error)}); ${cannotShorten(nativeLength)}`,
            error.status,
          );
        }
        if (error instanceof ModelCallError && error.permanent) throw error;
        let delayMs: number;
        const rateLimited = error instanceof ProviderHttpError && error.status === 429;
        if (rateLimited) {
          rateLimits++;
          const ceiling = backoffCeilingMs(retry, rateLimits);
          delayMs = error.retryAfterMs ?? Math.round(ceiling / 2 + (random() * ceiling) / 2);
          if (budget.waitedMs + delayMs > rateLimitBudgetMs) {
            throw new ModelCallError(
              `embeddings (${model}) still rate-limited after waiting ${budget.waitedMs}ms; ` +
                `the next wait (${delayMs}ms) would exceed providers.ai.rate_limit_wait_timeout (${rateLimitBudgetMs}ms)`,
              false,
              429,
              error.retryAfterMs,
            );
          }
          budget.waitedMs += delayMs;
        } else {
          failures++;
          if (failures >= attempts) {
            const status = error instanceof ModelCallError ? error.status : undefined;
            throw new ModelCallError(
              `embeddings (${model}) failed after ${attempts} attempt(s): ${messageWithCause(error)}`,
              error instanceof OutputValidationError,
              status,
              error instanceof ModelCallError ? error.retryAfterMs : undefined,
            );
          }
          const ceiling = backoffCeilingMs(retry, failures);
          delayMs = Math.round(ceiling / 2 + (random() * ceiling) / 2);
        }
        options.onRetry?.({ attempt: failures + rateLimits, delayMs, error, rateLimited });
        await abortableSleep(delayMs, jobSignal);
      }
    }
  }

  return {
    modelId: model,
    dimensions,
    async embed(texts: readonly string[], signal?: AbortSignal): Promise<number[][]> {
      signal?.throwIfAborted();
      if (!Array.isArray(texts)) throw new TypeError('embed expects an array of strings');
      const vectors = new Array<number[]>(texts.length);
      const pending: number[] = [];
      texts.forEach((text: unknown, i) => {
        if (typeof text !== 'string') throw new TypeError(`texts[${i}] is not a string`);
        if (text.trim() === '') vectors[i] = placeholderVector(dimensions);
        else pending.push(i);
      });
      const budget = { waitedMs: 0 };
      for (const positions of chunked(pending, batchSize)) {
        const batch = await embedBatch(
          // What is sent, not what is stored: the caller's text stays whole.
          positions.map((i) => headOfRunes(texts[i] as string, maxChars)),
          budget,
          signal,
        );
        positions.forEach((position, j) => {
          vectors[position] = batch[j] as number[];
        });
      }
      return vectors;
    },
  };
}
