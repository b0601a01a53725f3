import t, { type Test } from 'tap';
import { createOpenAIEmbedder, DEFAULT_EMBED_MAX_CHARS, type OpenAIEmbedderOptions } from '../../../src/providers/embeddings/openai.js';
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

/** A model whose own vectors are 6 long (as text-embedding-3-large's are 3,072): the fingerprint and two more numbers. */
const nativeVector = (text: string) => [...fingerprint(text), 7, 8];
/** Shortens to the request's `dimensions` when it has one, as text-embedding-3 models do. */
const honouring = (texts: string[], request: Record<string, unknown>) =>
  texts.map((text) => (typeof request.dimensions === 'number' ? nativeVector(text).slice(0, request.dimensions) : nativeVector(text)));
const ignoring = (texts: string[]) => texts.map(nativeVector);
const sentDimensions = (server: { bodies: Array<{ body: Record<string, unknown> }> }) => server.bodies.map((request) => request.body.dimensions);

t.test('vectors longer than configured: asked again once with dimensions, which later requests then carry', async (t) => {
  const { server, embedder } = await setup(t, { embed: honouring }, { batchSize: 2, retry: { ...FAST_RETRY, maxAttempts: 1 } });
  const input = texts(3);
  t.same(await embedder.embed(input), input.map(fingerprint), 'the configured length, with max_attempts 1: asking again is not a failed attempt');
  t.same(sentDimensions(server), [undefined, DIMENSIONS, DIMENSIONS], 'first batch: without, then with; second batch: with from the start');
  t.same(await embedder.embed(['one']), [fingerprint('one')]);
  t.same(sentDimensions(server), [undefined, DIMENSIONS, DIMENSIONS, DIMENSIONS], 'a later call carries it from the start');

  const { server: fresh, embedder: another } = await setup(t, { embed: honouring });
  await another.embed(['one']);
  t.same(sentDimensions(fresh), [undefined, DIMENSIONS], 'remembered per embedder: a new one asks first without');
});

t.test('the request with dimensions keeps the retry behaviour: a 500 is retried with the field', async (t) => {
  const { server, embedder } = await setup(t, { embed: honouring });
  server.queueFault('embeddings', { pass: true }, { status: 500 }, { status: 429, retryAfter: 0 });
  t.same(await embedder.embed(['one']), [fingerprint('one')]);
  t.same(sentDimensions(server), [undefined, DIMENSIONS, DIMENSIONS, DIMENSIONS]);
});

t.test('a server that refuses dimensions: permanent, naming the model and both lengths', async (t) => {
  const { server, embedder } = await setup(t, { embed: ignoring, refuseDimensions: true });
  const error = await modelErrorOf(embedder.embed(['one', 'two']));
  t.equal(error.permanent, true);
  t.equal(error.status, 400);
  t.match(error.message, /^embedding model text-embedding-test returned 6-dimensional vectors; providers\.embeddings\.dimensions is 4: /);
  t.match(error.message, /asked for 4 with the request's dimensions field, it was refused \(.*HTTP 400: This model does not support specifying dimensions\.\)/);
  t.match(error.message, /the model cannot return providers\.embeddings\.dimensions values \(set it to the model's length, 6\)/);
  t.same(sentDimensions(server), [undefined, DIMENSIONS], 'asked once, not retried');

  await modelErrorOf(embedder.embed(['three']));
  t.same(sentDimensions(server), [undefined, DIMENSIONS, undefined, DIMENSIONS], 'a refusal is not remembered as acceptance');
});

t.test('a server that ignores dimensions: permanent after the one request with it', async (t) => {
  const { server, embedder } = await setup(t, { embed: ignoring });
  const error = await modelErrorOf(embedder.embed(['one', 'two']));
  t.equal(error.permanent, true);
  t.match(
    error.message,
    /^embedding model text-embedding-test returned 6-dimensional vectors; providers\.embeddings\.dimensions is 4: asked for 4 with the request's dimensions field, it returned 6; the model cannot return providers\.embeddings\.dimensions values \(set it to the model's length, 6\)$/,
  );
  t.same(sentDimensions(server), [undefined, DIMENSIONS]);
});

t.test('vectors shorter than configured are a permanent error at once', async (t) => {
  const { server, embedder } = await setup(t);
  server.queueFault('embeddings', { wrongDimensions: 3 });
  const error = await modelErrorOf(embedder.embed(['one', 'two']));
  t.equal(error.permanent, true);
  t.match(error.message, /^embedding model text-embedding-test returned 3-dimensional vectors; providers\.embeddings\.dimensions is 4: a model's vectors cannot be lengthened \(set it to the model's length, 3\)$/);
  t.same(sentDimensions(server), [undefined], 'no request with dimensions: no API lengthens vectors');
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

t.test('a text over the model\'s input limit is refused with 400 by the provider: permanent, the job fails for good', async (t) => {
  const { server, embedder } = await setup(t, { maxInputTokens: 8192 }, { maxChars: Number.MAX_SAFE_INTEGER });
  const long = 'word'.repeat(25_000); // 100 KB, no punctuation: a fact or a report sentence as a page can hold one
  const error = await modelErrorOf(embedder.embed(['short', long]));
  t.match(error, { permanent: true, status: 400, message: /maximum context length is 8192 tokens/ });
  t.equal(server.requests.embeddings, 1, 'not retried');
});

t.test('texts are cut at embed_max_chars characters before they are sent: within 8,192 tokens whatever the script', async (t) => {
  const { server, embedder } = await setup(t, { maxInputTokens: 8192 });
  const texts = ['word'.repeat(25_000), '漢'.repeat(50_000), '😀'.repeat(50_000), 'short'];
  const vectors = await embedder.embed(texts);
  t.equal(vectors.length, 4, 'every text embedded, none refused');
  const sent = server.bodies[0]?.body.input as string[];
  t.same(sent.map((text) => [...text].length), [DEFAULT_EMBED_MAX_CHARS, DEFAULT_EMBED_MAX_CHARS, DEFAULT_EMBED_MAX_CHARS, 5], 'cut at the default, counted in characters');
  t.ok(sent.every((text) => Buffer.byteLength(text, 'utf8') <= 8192), 'at most 8,192 tokens even at one token a byte');
  t.equal(sent[2], '😀'.repeat(DEFAULT_EMBED_MAX_CHARS), 'emoji kept whole');
  t.equal(texts[0]?.length, 100_000, "the caller's text is left whole (what is stored is not cut)");
});

t.test('a configured embed_max_chars: the cut never halves a surrogate pair', async (t) => {
  const { server, embedder } = await setup(t, {}, { maxChars: 3 });
  await embedder.embed(['ab😀cd', 'a😀😀😀', 'abc']);
  t.same(server.bodies[0]?.body.input, ['ab😀', 'a😀😀', 'abc']);
});
