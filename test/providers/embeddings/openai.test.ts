import t, { type Test } from 'tap';
import { createOpenAIEmbedder, type OpenAIEmbedderOptions } from '../../../src/providers/embeddings/openai.js';
import type { LlmRetrySettings } from '../../../src/providers/llm/retry.js';
import { modelErrorOf, type OpenAIServerOptions, startOpenAIServer } from '../../helpers/openaiServer.js';

const DIMENSIONS = 4;
// The per-call timeout is far above a local answer even on a loaded machine (at 400 ms, a slow
// answer under load was retried and the request counts were off); the delay fault is far above it.
const FAST_RETRY: LlmRetrySettings = { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 50, perCallTimeoutMs: 3_000 };

/** A vector that identifies its text: [length, first char code, last char code, 1]. */
function fingerprint(text: string): number[] {
  return [text.length, text.charCodeAt(0), text.charCodeAt(text.length - 1), 1];
}

async function setup(t: Test, server: OpenAIServerOptions = {}, options: Partial<OpenAIEmbedderOptions> = {}) {
  const openai = await startOpenAIServer({ embed: (texts) => texts.map(fingerprint), ...server });
  t.teardown(openai.close);
  const embedder = createOpenAIEmbedder({
    baseUrl: openai.baseUrl,
    apiKey: 'sk-embed',
    model: 'text-embedding-test',
    dimensions: DIMENSIONS,
    retry: FAST_RETRY,
    random: () => 0.5,
    ...options,
  });
  return { server: openai, embedder };
}

const texts = (count: number) => Array.from({ length: count }, (_, i) => `text number ${i}${'x'.repeat(i)}`);

t.test('batches of 32, vectors in input order', async (t) => {
  const { server, embedder } = await setup(t);
  t.equal(embedder.modelId, 'text-embedding-test');
  t.equal(embedder.dimensions, DIMENSIONS);
  const input = texts(70);
  const vectors = await embedder.embed(input);
  t.same(vectors, input.map(fingerprint));
  t.equal(server.requests.embeddings, 3);
  t.same(
    server.bodies.map((request) => (request.body.input as string[]).length),
    [32, 32, 6],
  );
  t.equal(server.bodies[0]?.body.model, 'text-embedding-test');
  t.equal(server.bodies[0]?.authorization, 'Bearer sk-embed');
  t.same(await embedder.embed([]), [], 'nothing to embed, no request');
  t.equal(server.requests.embeddings, 3);
});

t.test('order follows index even when the provider reorders the data', async (t) => {
  const { server, embedder } = await setup(t);
  server.queueFault('embeddings', { reversed: true });
  const input = texts(5);
  t.same(await embedder.embed(input), input.map(fingerprint));
});

t.test('a configured batch size is used', async (t) => {
  const { server, embedder } = await setup(t, {}, { batchSize: 2 });
  await embedder.embed(texts(5));
  t.same(
    server.bodies.map((request) => (request.body.input as string[]).length),
    [2, 2, 1],
  );
});

t.test('blank texts are not sent and get a fixed non-zero vector', async (t) => {
  const { server, embedder } = await setup(t);
  const vectors = await embedder.embed(['alpha', '   ', 'beta']);
  t.same(vectors, [fingerprint('alpha'), [1, 0, 0, 0], fingerprint('beta')]);
  t.same(server.bodies[0]?.body.input, ['alpha', 'beta']);
});

t.test('transient failures are retried within a batch', async (t) => {
  for (const fault of [{ status: 500 }, { delayMs: 6_000 }, { malformedBody: true as const }, { status: 429, retryAfter: 0 }]) {
    const { server, embedder } = await setup(t);
    server.queueFault('embeddings', fault);
    t.same(await embedder.embed(['one', 'two']), [fingerprint('one'), fingerprint('two')], `${JSON.stringify(fault)} then success`);
    t.equal(server.requests.embeddings, 2);
  }
});

t.test('a provider that keeps failing: transient after max_attempts; malformed: permanent', async (t) => {
  const { server, embedder } = await setup(t);
  server.setStandingFault('embeddings', { status: 502 });
  const error = await modelErrorOf(embedder.embed(['one']));
  t.equal(error.permanent, false);
  t.equal(error.status, 502);
  t.equal(server.requests.embeddings, 3);

  server.setStandingFault('embeddings', { malformedBody: true });
  const malformed = await modelErrorOf(embedder.embed(['one']));
  t.equal(malformed.permanent, true);
  t.equal(server.requests.embeddings, 6);
});

t.test('wrong-dimension vectors are a permanent error at once', async (t) => {
  const { server, embedder } = await setup(t);
  server.queueFault('embeddings', { wrongDimensions: 7 });
  const error = await modelErrorOf(embedder.embed(['one', 'two']));
  t.equal(error.permanent, true);
  t.match(error.message, /returned 7-dimensional vectors; providers\.embeddings\.dimensions is 4/);
  t.equal(server.requests.embeddings, 1);
});

t.test('401 is permanent', async (t) => {
  const { server, embedder } = await setup(t, { apiKey: 'sk-other' });
  const error = await modelErrorOf(embedder.embed(['one']));
  t.equal(error.permanent, true);
  t.equal(error.status, 401);
  t.notMatch(error.message, /sk-embed/);
  t.equal(server.requests.embeddings, 1);
});

t.test('429s are waited out, and do not use up attempts', async (t) => {
  const { server, embedder } = await setup(t, {}, { retry: { ...FAST_RETRY, maxAttempts: 1 } });
  server.queueFault('embeddings', { status: 429 }, { status: 429 }, { status: 429 }, { status: 429 });
  t.same(await embedder.embed(['one']), [fingerprint('one')]);
  t.equal(server.requests.embeddings, 5, 'four 429s, then the answer, with max_attempts 1');
});

t.test('the rate-limit wait is bounded by rate_limit_wait_timeout', async (t) => {
  const waits: number[] = [];
  const { server, embedder } = await setup(
    t,
    {},
    { rateLimitWaitTimeoutMs: 250, retry: { ...FAST_RETRY, baseDelayMs: 20, maxDelayMs: 100 }, onRetry: ({ delayMs }) => waits.push(delayMs) },
  );
  server.setStandingFault('embeddings', { status: 429 });
  const error = await modelErrorOf(embedder.embed(['one']));
  t.equal(error.permanent, false, 'gives up transiently: the job runtime retries later');
  t.equal(error.status, 429);
  t.match(error.message, /rate_limit_wait_timeout/);
  // Backoffs with jitter 0.5: 15, 30, 60, 75, 75 = 255 > 250, so four waits (180ms) fit.
  t.same(waits, [15, 30, 60, 75]);
  // Stopped waiting: against a standing 429, the fifth answer ends the call, the fifth wait refused.
  t.match(error.message, /after waiting 180ms; the next wait \(75ms\) would exceed .*\(250ms\)/);
  t.equal(server.requests.embeddings, 5);

  // Retry-After counts against the same budget.
  server.setStandingFault('embeddings', { status: 429, retryAfter: 1 });
  const budgeted = await modelErrorOf(embedder.embed(['one']));
  t.equal(budgeted.permanent, false);
  t.equal(server.requests.embeddings, 6, 'a 1s Retry-After does not fit a 250ms budget: no second request');
});

t.test('the budget is shared by the batches of one call', async (t) => {
  const { server, embedder } = await setup(t, {}, { batchSize: 1, rateLimitWaitTimeoutMs: 100, retry: { ...FAST_RETRY, baseDelayMs: 60, maxDelayMs: 60 } });
  // Each batch meets one 429 (a 45ms wait): the first two fit in 100ms, the third does not.
  server.queueFault('embeddings', { status: 429 }, { pass: true }, { status: 429 }, { pass: true }, { status: 429 });
  const error = await modelErrorOf(embedder.embed(['a', 'b', 'c']));
  t.equal(error.status, 429);
  t.equal(error.permanent, false);
  t.equal(server.requests.embeddings, 5, 'two batches done, the third gave up at its first 429');
});
