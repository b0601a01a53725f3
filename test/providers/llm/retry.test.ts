import t from 'tap';
import { ModelCallError } from '../../../src/providers/llm/port.js';
import {
  OutputValidationError,
  ProviderHttpError,
  validateLlmRetryConstraint,
  withLlmRetry,
  worstCaseRetryMs,
} from '../../../src/providers/llm/retry.js';

const SETTINGS = { maxAttempts: 4, baseDelayMs: 2_000, maxDelayMs: 30_000, perCallTimeoutMs: 300_000 };
const FAST = { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 10, perCallTimeoutMs: 200 };

t.test('worst case and the spec constraint', async (t) => {
  // Each wait is counted at max_delay: a 429's Retry-After up to max_delay replaces the doubling backoff.
  t.equal(worstCaseRetryMs(SETTINGS), 4 * 300_000 + 3 * 30_000, '4 x 5m + 3 x 30s');
  t.equal(worstCaseRetryMs({ ...SETTINGS, maxAttempts: 6 }), 6 * 300_000 + 5 * 30_000);
  t.equal(worstCaseRetryMs({ ...SETTINGS, maxAttempts: 1 }), 300_000, 'one attempt, no wait');
  t.same(validateLlmRetryConstraint(SETTINGS, 4 * 3_600_000), [], 'defaults fit the 4h job timeout');
  t.same(validateLlmRetryConstraint(SETTINGS, 0), [], '0 = unlimited, nothing to check');
  const tight = validateLlmRetryConstraint(SETTINGS, 20 * 60_000);
  t.equal(tight.length, 1);
  t.equal(tight[0]?.[0], 'task.job_timeout');
  t.match(tight[0]?.[1], /max_attempts x per_call_timeout plus backoffs \(1200000ms; retries can take 1290000ms\)/);
  t.equal(validateLlmRetryConstraint(SETTINGS, 21 * 60_000).length, 1, '21m: the waits a provider may ask for do not fit');
  t.same(validateLlmRetryConstraint(SETTINGS, 22 * 60_000), [], '21m30s fits in 22m');
  const perCall = validateLlmRetryConstraint(SETTINGS, 60_000);
  t.same(
    perCall.map(([key]) => key),
    ['providers.llm_retry.per_call_timeout', 'task.job_timeout'],
    'a per-call timeout above the worker timeout is named too',
  );
  t.same(validateLlmRetryConstraint({ ...SETTINGS, perCallTimeoutMs: 0 }, 0), [['providers.llm_retry.per_call_timeout', 'must be longer than 0s']]);
});

t.test('the worst case holds the waits a rate-limiting provider asks for', async (t) => {
  // Counting the doubling backoff alone (1 + 2 ms here) let a job_timeout through that the
  // Retry-After waits (10 + 10 ms) overran.
  const waits: number[] = [];
  const error = await withLlmRetry(
    FAST,
    async () => {
      throw new ProviderHttpError('slow down', 429, FAST.maxDelayMs);
    },
    undefined,
    { sleep: async (ms) => void waits.push(ms) },
  ).catch((e: unknown) => e);
  t.ok(error instanceof ModelCallError && !error.permanent);
  t.same(waits, [10, 10], 'each wait is the Retry-After, up to max_delay');
  const waited = waits.reduce((sum, ms) => sum + ms, 0);
  t.ok(worstCaseRetryMs(FAST) >= FAST.maxAttempts * FAST.perCallTimeoutMs + waited, 'the worst case covers them');
});

t.test('classification', async (t) => {
  let calls = 0;
  const failing = (error: unknown) => async () => {
    calls++;
    throw error;
  };
  for (const status of [400, 401, 403, 404, 422]) {
    calls = 0;
    const error = await withLlmRetry(FAST, failing(new ProviderHttpError('nope', status))).catch((e: unknown) => e);
    t.ok(error instanceof ModelCallError && error.permanent && error.status === status, `${status} permanent`);
    t.equal(calls, 1, `${status} not retried`);
  }
  for (const thrown of [new ProviderHttpError('busy', 503), new ProviderHttpError('slow down', 429), new TypeError('fetch failed')]) {
    calls = 0;
    const error = await withLlmRetry(FAST, failing(thrown)).catch((e: unknown) => e);
    t.ok(error instanceof ModelCallError && !error.permanent, `${thrown.message}: transient`);
    t.equal(calls, 3, `${thrown.message}: every attempt used`);
  }
  calls = 0;
  const invalid = await withLlmRetry(FAST, failing(new OutputValidationError('bad json'))).catch((e: unknown) => e);
  t.ok(invalid instanceof ModelCallError && invalid.permanent, 'invalid output: permanent after the attempts');
  t.equal(calls, 3);

  // A call that ignores its signal still times out.
  calls = 0;
  const hung = await withLlmRetry({ ...FAST, maxAttempts: 2, perCallTimeoutMs: 30 }, () => {
    calls++;
    return new Promise<never>(() => undefined);
  }).catch((e: unknown) => e);
  t.ok(hung instanceof ModelCallError && !hung.permanent, 'timeouts are transient');
  t.match((hung as Error).message, /no answer within 30ms/);
  t.equal(calls, 2);
});

t.test('the attempt signal aborts at the per-call timeout', async (t) => {
  let seen: AbortSignal | undefined;
  await withLlmRetry({ ...FAST, maxAttempts: 1, perCallTimeoutMs: 20 }, (signal) => {
    seen = signal;
    return new Promise<never>(() => undefined);
  }).catch(() => undefined);
  t.equal(seen?.aborted, true);
});

t.test('backoff doubles with jitter in the upper half, capped at max_delay', async (t) => {
  const delays: number[] = [];
  await withLlmRetry(
    { maxAttempts: 5, baseDelayMs: 4, maxDelayMs: 16, perCallTimeoutMs: 100 },
    async () => {
      throw new ProviderHttpError('busy', 500);
    },
    undefined,
    { random: () => 1, onRetry: ({ delayMs }) => delays.push(delayMs) },
  ).catch(() => undefined);
  t.same(delays, [4, 8, 16, 16]);
  const low: number[] = [];
  await withLlmRetry(
    { maxAttempts: 3, baseDelayMs: 4, maxDelayMs: 16, perCallTimeoutMs: 100 },
    async () => {
      throw new ProviderHttpError('busy', 500);
    },
    undefined,
    { random: () => 0, onRetry: ({ delayMs }) => low.push(delayMs) },
  ).catch(() => undefined);
  t.same(low, [2, 4]);
});

t.test('success passes through, an attempt after failures wins', async (t) => {
  let calls = 0;
  const value = await withLlmRetry(FAST, async () => {
    calls++;
    if (calls < 3) throw new ProviderHttpError('busy', 500);
    return 'done';
  });
  t.equal(value, 'done');
  t.equal(calls, 3);
});
