import { ModelCallError } from './port.js';

/**
 * Retries around one model call (`providers.llm_retry`): a per-call timeout combined with the
 * job's signal, exponential backoff with jitter between attempts, Retry-After honoured on 429.
 *
 * Classification of what a call throws:
 * - the job's signal aborted: rethrown at once (the job is being cancelled or timed out);
 * - `ModelCallError` with `permanent` set (400/401/403/404/422 from the provider): thrown at once;
 * - `OutputValidationError` (the model answered, but not in the required shape): retried, and
 *   after the last attempt thrown as a *permanent* ModelCallError: the same prompt keeps failing;
 * - anything else (the per-call timeout, 429, 5xx, connection errors): retried, and after the
 *   last attempt thrown as a *transient* ModelCallError, so the job runtime retries the job later.
 */

export interface LlmRetrySettings {
  /** Attempts including the first (at least 1). */
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** Each attempt is aborted after this long. */
  perCallTimeoutMs: number;
}

/** The provider answered with a non-success HTTP status. */
export class ProviderHttpError extends ModelCallError {
  /** `retryAfterMs`: from a Retry-After header, when the provider sent one. */
  constructor(message: string, status: number, retryAfterMs?: number) {
    super(message, isPermanentStatus(status), status, retryAfterMs);
  }
}

/** The model's reply was not the JSON the phase requires (malformed, or failing its schema). */
export class OutputValidationError extends Error {
  override readonly name = 'OutputValidationError';
}

/** Statuses a retry cannot fix (the request or the credentials are wrong). */
function isPermanentStatus(status: number): boolean {
  return status === 400 || status === 401 || status === 403 || status === 404 || status === 422;
}

/** The backoff before attempt `attempt + 1` (attempt is 1-based) without jitter: doubling, capped. */
export function backoffCeilingMs(settings: Pick<LlmRetrySettings, 'baseDelayMs' | 'maxDelayMs'>, attempt: number): number {
  return Math.min(settings.baseDelayMs * 2 ** (attempt - 1), settings.maxDelayMs);
}

/**
 * The longest one call with all its retries can take: every attempt runs to the per-call
 * timeout, with max_delay between attempts. The doubling backoff is never longer (jitter only
 * shortens it), but a 429 whose Retry-After is at most max_delay is waited out instead of it,
 * so any wait may be max_delay: counting the doubling ceilings let through a job_timeout that
 * such waits overran.
 */
export function worstCaseRetryMs(settings: LlmRetrySettings): number {
  return settings.perCallTimeoutMs * settings.maxAttempts + settings.maxDelayMs * Math.max(0, settings.maxAttempts - 1);
}

/**
 * The spec's constraint (Constants): `per_call_timeout` must not exceed the smallest worker
 * language-model timeout, and a worker timeout must exceed max_attempts × per_call_timeout plus
 * backoffs. The worker timeout is `task.job_timeout`; 0 means unlimited and is not checked.
 * Returns [dotted key, problem] pairs, empty when the settings fit.
 */
export function validateLlmRetryConstraint(settings: LlmRetrySettings, workerTimeoutMs: number): Array<[string, string]> {
  const problems: Array<[string, string]> = [];
  if (settings.perCallTimeoutMs <= 0) {
    problems.push(['providers.llm_retry.per_call_timeout', 'must be longer than 0s']);
    return problems;
  }
  if (workerTimeoutMs <= 0) return problems;
  if (settings.perCallTimeoutMs > workerTimeoutMs) {
    problems.push([
      'providers.llm_retry.per_call_timeout',
      `must not exceed task.job_timeout, the worker language-model timeout (${settings.perCallTimeoutMs}ms > ${workerTimeoutMs}ms)`,
    ]);
  }
  const worstCase = worstCaseRetryMs(settings);
  if (worstCase >= workerTimeoutMs) {
    problems.push([
      'task.job_timeout',
      `must exceed providers.llm_retry max_attempts x per_call_timeout plus backoffs ` +
        `(${workerTimeoutMs}ms; retries can take ${worstCase}ms); raise it, lower providers.llm_retry.max_attempts ` +
        `or providers.llm_retry.per_call_timeout, or use 0s for unlimited`,
    ]);
  }
  return problems;
}

export interface RetryHooks {
  /** Draws jitter; tests pass a fixed value. Default Math.random. */
  random?: () => number;
  /** Called before each wait, for logs and tests. */
  onRetry?: (info: { attempt: number; delayMs: number; error: unknown }) => void;
  /** Names the call in error messages ("chat completion", "embeddings"). */
  what?: string;
  /** Waits between attempts; tests pass one that records the wait instead of sitting it out. Default abortableSleep. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** One attempt ran past its per-call timeout. */
class AttemptTimeout extends Error {
  override readonly name = 'AttemptTimeout';
}

/**
 * Runs one attempt with its own deadline. The call gets a signal that aborts on the job's
 * signal or the deadline; the race makes a call that ignores its signal time out all the same.
 */
export async function runWithDeadline<T>(call: (signal: AbortSignal) => Promise<T>, timeoutMs: number, jobSignal?: AbortSignal): Promise<T> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let onJobAbort: (() => void) | undefined;
  const stopped = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const reason = new AttemptTimeout(`no answer within ${timeoutMs}ms`);
      controller.abort(reason);
      reject(reason);
    }, timeoutMs);
    onJobAbort = () => {
      controller.abort(jobSignal?.reason);
      reject(jobSignal?.reason);
    };
    jobSignal?.addEventListener('abort', onJobAbort, { once: true });
  });
  try {
    return await Promise.race([call(controller.signal), stopped]);
  } finally {
    clearTimeout(timer);
    if (onJobAbort) jobSignal?.removeEventListener('abort', onJobAbort);
    stopped.catch(() => undefined); // the loser of the race must not become an unhandled rejection
  }
}

/** An error's message, with its cause's message after it when it has one (a fetch's "fetch failed: ECONNRESET"). */
export function messageWithCause(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as Error & { cause?: unknown }).cause;
    const causeText = cause instanceof Error ? `: ${cause.message}` : '';
    return `${error.message}${causeText}`;
  }
  return String(error);
}

/** Runs `call` under the retry policy (see the module comment). */
export async function withLlmRetry<T>(
  settings: LlmRetrySettings,
  call: (signal: AbortSignal) => Promise<T>,
  jobSignal?: AbortSignal,
  hooks: RetryHooks = {},
): Promise<T> {
  const random = hooks.random ?? Math.random;
  const what = hooks.what ?? 'model call';
  const sleep = hooks.sleep ?? abortableSleep;
  const attempts = Math.max(1, Math.floor(settings.maxAttempts));
  for (let attempt = 1; ; attempt++) {
    jobSignal?.throwIfAborted();
    try {
      return await runWithDeadline(call, settings.perCallTimeoutMs, jobSignal);
    } catch (error) {
      if (jobSignal?.aborted) throw jobSignal.reason;
      if (error instanceof ModelCallError && error.permanent) throw error;
      const status = error instanceof ModelCallError ? error.status : undefined;
      if (attempt >= attempts) {
        const permanent = error instanceof OutputValidationError;
        // The last answer's Retry-After goes on to the job runtime, which waits at least as long.
        const retryAfterMs = error instanceof ModelCallError ? error.retryAfterMs : undefined;
        throw new ModelCallError(`${what} failed after ${attempts} attempt(s): ${messageWithCause(error)}`, permanent, status, retryAfterMs);
      }
      const ceiling = backoffCeilingMs(settings, attempt);
      let delayMs = Math.round(ceiling / 2 + (random() * ceiling) / 2);
      if (error instanceof ProviderHttpError && error.status === 429 && error.retryAfterMs !== undefined) {
        // A provider asking for more patience than our largest backoff would hold a worker longer
        // than the timeout budget allows: give the job back to the runtime, which retries later.
        if (error.retryAfterMs > settings.maxDelayMs) {
          throw new ModelCallError(
            `${what} rate-limited: provider asks to retry after ${error.retryAfterMs}ms, more than providers.llm_retry.max_delay`,
            false,
            429,
            error.retryAfterMs,
          );
        }
        delayMs = error.retryAfterMs;
      }
      hooks.onRetry?.({ attempt, delayMs, error });
      await sleep(delayMs, jobSignal);
    }
  }
}
