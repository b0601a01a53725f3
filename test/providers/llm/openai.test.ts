import t, { type Test } from 'tap';
import { createLocalEmbedder } from '../../../src/providers/embeddings/local.js';
import { createOpenAIEmbedder } from '../../../src/providers/embeddings/openai.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import { createOpenAIChatModel, MAX_PROVIDER_MESSAGE_CHARS, MAX_REPLY_SAMPLE_CHARS } from '../../../src/providers/llm/openai.js';
import { builtInPromptset, effectivePromptset } from '../../../src/providers/llm/promptsets.js';
import type { LlmRetrySettings } from '../../../src/providers/llm/retry.js';
import { DOCUMENTS } from '../../fixtures/corpus/documents.js';
import { type ChatPhase, type Fault, modelErrorOf, startOpenAIServer } from '../../helpers/openaiServer.js';

// A per-call timeout no answer of the local server comes near, however loaded the machine: with
// 400 ms, a pause of the process (a major GC, a core given to another process) longer than that
// timed out a call that had its answer, and its retry made two requests where one was counted.
const FAST_RETRY: LlmRetrySettings = { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 2000, perCallTimeoutMs: 10_000 };
/** For the tests of the timeout itself: a call that is answered must still be answered within it. */
const TIMING_OUT_RETRY: LlmRetrySettings = { ...FAST_RETRY, perCallTimeoutMs: 1_500 };

/** A deterministic stand-in for a model: one fact per sentence of the chunk. */
function sentenceFacts(document: Record<string, unknown>, phase: ChatPhase): unknown {
  if (phase !== 'fact_extraction') throw new Error(`unexpected phase ${phase}`);
  const sentences = String(document.text)
    .split(/(?<=\.)\s+/)
    .filter((sentence) => sentence.trim() !== '');
  return { facts: sentences.map((sentence, index) => ({ content: sentence.trim(), source_text: sentence, sentence_index: index })) };
}

const CHUNK = { text: 'Marie Curie discovered polonium. She was born in Warsaw.', title: 'Marie Curie', chunkIndex: 0 };

async function setup(t: Test, options: Parameters<typeof startOpenAIServer>[0] = {}, retry: LlmRetrySettings = FAST_RETRY) {
  const server = await startOpenAIServer({ chat: sentenceFacts, ...options });
  t.teardown(server.close);
  const model = createOpenAIChatModel({ baseUrl: server.baseUrl, apiKey: 'sk-test-secret', model: 'gpt-test', retry, hooks: { random: () => 0.5 } });
  return { server, model };
}

t.test('fact extraction speaks the chat-completions wire format', async (t) => {
  const { server, model } = await setup(t, { apiKey: 'sk-test-secret' });
  const facts = await model.extractFacts({ ...CHUNK, previousContext: 'Before.', nextContext: 'After.' });
  t.same(facts, [
    { content: 'Marie Curie discovered polonium.', sourceText: 'Marie Curie discovered polonium.', sentenceIndex: 0 },
    { content: 'She was born in Warsaw.', sourceText: 'She was born in Warsaw.', sentenceIndex: 1 },
  ]);
  t.equal(model.modelId, 'gpt-test');
  t.equal(server.requests.chat, 1);
  const [received] = server.bodies;
  t.equal(received?.authorization, 'Bearer sk-test-secret');
  const body = received?.body as { model: string; response_format: unknown; messages: Array<{ role: string; content: string }> };
  t.equal(body.model, 'gpt-test');
  t.same(body.response_format, { type: 'json_object' });
  t.equal(body.messages[0]?.role, 'system');
  t.equal(body.messages[0]?.content, builtInPromptset().phases.fact_extraction, 'the system prompt is the phase text');
  t.same(JSON.parse(body.messages[1]?.content ?? '{}'), {
    title: 'Marie Curie',
    chunk_index: 0,
    previous_context: 'Before.',
    text: CHUNK.text,
    next_context: 'After.',
  });
});

t.test("a repository's overridden prompt is the system message", async (t) => {
  const { server, model } = await setup(t);
  const promptset = effectivePromptset({ fact_extraction: 'Extract facts as JSON {"facts": [...]}, please.' });
  await model.extractFacts({ ...CHUNK, promptset });
  const body = server.bodies[0]?.body as { messages: Array<{ content: string }> };
  t.equal(body.messages[0]?.content, 'Extract facts as JSON {"facts": [...]}, please.');
});

t.test('transient failures are retried and the call succeeds', async (t) => {
  const cases: Array<[string, Fault]> = [
    ['429 with Retry-After', { status: 429, retryAfter: 0 }],
    ['500', { status: 500 }],
    ['503 with a text body', { status: 503, body: 'upstream overloaded' }],
    ['a reply slower than the per-call timeout', { delayMs: 4_000 }],
    ['malformed JSON content', { malformedContent: true }],
    ['JSON content of the wrong shape', { invalidContent: { facts: [{ text: 'no content key' }] } }],
    ['a body that is not JSON', { malformedBody: true }],
  ];
  for (const [label, fault] of cases) {
    const { server } = await setup(t);
    server.queueFault('chat', fault);
    const retries: number[] = [];
    const retrying = createOpenAIChatModel({
      baseUrl: server.baseUrl,
      model: 'gpt-test',
      retry: 'delayMs' in fault ? TIMING_OUT_RETRY : FAST_RETRY,
      hooks: { random: () => 0.5, onRetry: ({ attempt }) => retries.push(attempt) },
    });
    const facts = await retrying.extractFacts(CHUNK);
    t.equal(facts.length, 2, `${label}: facts after the retry`);
    t.equal(server.requests.chat, 2, `${label}: one failed request, one retry`);
    t.same(retries, [1], `${label}: one retry`);
  }
});

/** A model whose waits between attempts are recorded, not sat out. */
function recordingModel(server: { baseUrl: string }, retry: LlmRetrySettings = FAST_RETRY) {
  const waits: number[] = [];
  const model = createOpenAIChatModel({
    baseUrl: server.baseUrl,
    model: 'gpt-test',
    retry,
    hooks: { random: () => 0.5, sleep: async (ms) => void waits.push(ms) },
  });
  return { model, waits };
}

t.test('Retry-After on 429 is honoured', async (t) => {
  const { server } = await setup(t);
  const { model, waits } = recordingModel(server);
  server.queueFault('chat', { status: 429, retryAfter: 1 });
  await model.extractFacts(CHUNK);
  t.same(waits, [1000], 'waited the second the provider asked for, not the backoff');
  t.equal(server.requests.chat, 2);
});

t.test('a Retry-After beyond max_delay gives the job back at once (transient)', async (t) => {
  const { server } = await setup(t);
  const { model, waits } = recordingModel(server, { ...FAST_RETRY, maxDelayMs: 100 });
  server.queueFault('chat', { status: 429, retryAfter: 120 });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.permanent, false);
  t.equal(error.status, 429);
  t.same(waits, [], 'did not sit out two minutes');
  t.equal(server.requests.chat, 1);
});

t.test('401 is permanent at once, and the key never shows in the error', async (t) => {
  const server = await startOpenAIServer({ chat: sentenceFacts, apiKey: 'sk-right' });
  t.teardown(server.close);
  const model = createOpenAIChatModel({ baseUrl: server.baseUrl, apiKey: 'sk-wrong-secret', model: 'gpt-test', retry: FAST_RETRY });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.permanent, true);
  t.equal(error.status, 401);
  t.match(error.message, /HTTP 401: Incorrect API key provided/);
  t.notMatch(error.message, /sk-wrong-secret/);
  t.equal(server.requests.chat, 1, 'no retry');
});

t.test('400, 403, 404 and 422 are permanent at once', async (t) => {
  for (const status of [400, 403, 404, 422]) {
    const { server, model } = await setup(t);
    server.queueFault('chat', { status });
    const error = await modelErrorOf(model.extractFacts(CHUNK));
    t.equal(error.permanent, true, `${status} is permanent`);
    t.equal(error.status, status);
    t.equal(server.requests.chat, 1, `${status}: no retry`);
  }
});

t.test("a model server's long error keeps its start and its end in 300 characters, never half an emoji", async (t) => {
  const { server, model } = await setup(t);
  // As a proxy in front of an OpenAI-compatible server answers: the request echoed, then what went wrong.
  const reason = 'context length exceeded: 9000 tokens, the model takes 8192';
  server.queueFault('chat', { status: 400, body: JSON.stringify({ error: { message: `😀 upstream said: ${'x'.repeat(2000)} ${reason}`, type: 'invalid_request_error' } }) });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.status, 400);
  t.match(error.message, /HTTP 400: 😀 upstream said: x+ … \(\d+ characters left out\) … x+ context length exceeded: 9000 tokens, the model takes 8192$/, 'the start and the reason at the end');
  const provider = error.message.slice(error.message.indexOf('HTTP 400: ') + 'HTTP 400: '.length);
  t.equal([...provider].length, MAX_PROVIDER_MESSAGE_CHARS, 'bounded in characters, the marker included');
  const count = Number(/\((\d+) characters left out\)/.exec(provider)?.[1]);
  t.equal(count, [...`😀 upstream said: ${'x'.repeat(2000)} ${reason}`].length - [...provider.replace(/ … \(\d+ characters left out\) … /, '')].length, 'the count is of what was left out');

  // A plain-text body, and a cut that falls inside an emoji: the emoji is kept whole or not at all.
  server.queueFault('chat', { status: 400, body: `${'😀'.repeat(400)} the end` });
  const emoji = await modelErrorOf(model.extractFacts(CHUNK));
  t.match(emoji.message, /HTTP 400: (?:😀)+ … \(\d+ characters left out\) … (?:😀)+ the end$/);
  t.notOk(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(emoji.message), 'no lone surrogate');

  // A short one is as it was.
  server.queueFault('chat', { status: 400, body: 'too short to cut' });
  t.match((await modelErrorOf(model.extractFacts(CHUNK))).message, /HTTP 400: too short to cut$/);
});

t.test("a reply that is not JSON shows its start and its end in 120 characters, never half an emoji", async (t) => {
  const content = `😀 Sure! Here are the facts: ${'y'.repeat(500)} ... and I stopped here 😀`;
  const fakeFetch: typeof fetch = async () =>
    new Response(JSON.stringify({ choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] }), { status: 200, headers: { 'content-type': 'application/json' } });
  const model = createOpenAIChatModel({ baseUrl: 'http://model.invalid/v1', model: 'gpt-test', retry: { ...FAST_RETRY, maxAttempts: 1 }, fetch: fakeFetch });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.match(error.message, /the model's reply is not JSON: 😀 Sure! Here are the facts: y+ … \(\d+ characters left out\) … y+ \.\.\. and I stopped here 😀$/);
  const sample = error.message.slice(error.message.indexOf('not JSON: ') + 'not JSON: '.length);
  t.equal([...sample].length, MAX_REPLY_SAMPLE_CHARS, 'bounded in characters, the marker included');
});

t.test('output that stays malformed becomes permanent after max_attempts', async (t) => {
  const { server, model } = await setup(t);
  server.setStandingFault('chat', { malformedContent: true });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.permanent, true);
  t.match(error.message, /after 3 attempt\(s\).*not JSON/);
  t.equal(server.requests.chat, 3);
});

t.test('a provider that keeps failing ends in a transient error after max_attempts', async (t) => {
  const { server, model } = await setup(t);
  server.setStandingFault('chat', { status: 500 });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.permanent, false);
  t.equal(error.status, 500);
  t.equal(server.requests.chat, 3);

  // No attempt is answered here, so a short timeout cannot cut one short: the test stays quick.
  server.setStandingFault('chat', { delayMs: 2000 });
  const timingOut = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-test', retry: { ...FAST_RETRY, perCallTimeoutMs: 400 }, hooks: { random: () => 0.5 } });
  const timeout = await modelErrorOf(timingOut.extractFacts(CHUNK));
  t.equal(timeout.permanent, false, 'timeouts are transient');
  t.match(timeout.message, /no answer within 400ms/);
});

t.test('a connection refused is transient', async (t) => {
  const server = await startOpenAIServer({ chat: sentenceFacts });
  const baseUrl = server.baseUrl;
  await server.close();
  const model = createOpenAIChatModel({ baseUrl, model: 'gpt-test', retry: { ...FAST_RETRY, maxAttempts: 2 } });
  const error = await modelErrorOf(model.extractFacts(CHUNK));
  t.equal(error.permanent, false);
  t.match(error.message, /after 2 attempt/);
});

t.test("the job's signal stops the retries", async (t) => {
  const { server } = await setup(t);
  server.setStandingFault('chat', { status: 500 });
  const controller = new AbortController();
  // Cancelled once the first 500 is in and the wait before the retry has begun: a timer set at
  // the start could fire before that request got out on a loaded machine.
  const model = createOpenAIChatModel({
    baseUrl: server.baseUrl,
    model: 'gpt-test',
    retry: { ...FAST_RETRY, baseDelayMs: 1000 },
    hooks: { random: () => 0.5, onRetry: () => void setImmediate(() => controller.abort(new Error('job cancelled'))) },
  });
  await t.rejects(model.extractFacts(CHUNK, controller.signal), /job cancelled/);
  t.equal(server.requests.chat, 1, 'no request after the abort');
  await t.rejects(model.extractFacts(CHUNK, controller.signal), /job cancelled/, 'an aborted signal sends nothing');
  t.equal(server.requests.chat, 1);
});

t.test('images: data URLs with vision, text only without', async (t) => {
  const imageFacts = (document: Record<string, unknown>, phase: ChatPhase) => {
    t.equal(phase, 'image_fact_extraction');
    return { facts: [{ content: `The figure shows ${String(document.caption)}.`, source_text: document.caption }] };
  };
  const server = await startOpenAIServer({ chat: imageFacts });
  t.teardown(server.close);
  const input = { bytes: new Uint8Array([137, 80, 78, 71]), contentType: 'image/png', caption: 'the radium spectrum', altText: 'spectrum', surroundingText: null, sourceTitle: 'Curie' };

  const vision = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-vision', vision: true, retry: FAST_RETRY });
  t.equal(vision.canSeeImages, true);
  t.same(await vision.extractImageFacts(input), [{ content: 'The figure shows the radium spectrum.', sourceText: 'the radium spectrum' }]);
  const visionUser = (server.bodies[0]?.body.messages as Array<{ role: string; content: unknown }>)[1]?.content as Array<{ type: string; image_url?: { url: string } }>;
  t.equal(visionUser[1]?.type, 'image_url');
  t.equal(visionUser[1]?.image_url?.url, `data:image/png;base64,${Buffer.from([137, 80, 78, 71]).toString('base64')}`);

  const blind = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-text', retry: FAST_RETRY });
  t.equal(blind.canSeeImages, false);
  await blind.extractImageFacts(input);
  const blindUser = (server.bodies[1]?.body.messages as Array<{ role: string; content: unknown }>)[1]?.content;
  t.type(blindUser, 'string', 'no image part without vision');
  t.same(JSON.parse(blindUser as string), { alt_text: 'spectrum', caption: 'the radium spectrum', surrounding_text: null, source_title: 'Curie' });
});

t.test('concepts: invented fact ids and contexts not offered are dropped', async (t) => {
  const server = await startOpenAIServer({
    chat: (document, phase) => {
      t.equal(phase, 'concept_extraction');
      t.same(document.contexts, [{ name: 'person', description: 'people' }, { name: 'science', description: 'fields' }]);
      return {
        concepts: [
          { canonical_name: 'Marie Curie', context: 'Person', ontology_class: 'person', aliases: ['Curie', 'Marie Curie', ''], fact_ids: ['f1', 'f9'] },
          { canonical_name: 'Radium', context: 'chemistry', aliases: [], fact_ids: ['f1'] },
          { canonical_name: 'Polonium', context: 'science', fact_ids: ['f404'] },
        ],
      };
    },
  });
  t.teardown(server.close);
  const model = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-test', retry: FAST_RETRY });
  const concepts = await model.extractConcepts({
    facts: [
      { id: 'f1', content: 'Marie Curie discovered radium.' },
      { id: 'f2', content: 'Curie was born in Warsaw.' },
    ],
    contexts: [
      { name: 'person', description: 'people' },
      { name: 'science', description: 'fields' },
    ],
  });
  t.same(concepts, [{ canonicalName: 'Marie Curie', context: 'person', ontologyClass: 'person', aliases: ['Curie'], factIds: ['f1'] }]);
});

t.test('refinement: decisions about unknown concepts or aliases are dropped', async (t) => {
  const server = await startOpenAIServer({
    chat: () => ({
      decisions: [
        { type: 'merge', loser_id: 'c2', survivor_id: 'c1', reason: 'abbreviation' },
        { type: 'merge', loser_id: 'c1', survivor_id: 'c1', reason: 'self' },
        { type: 'merge', loser_id: 'c3', survivor_id: 'c1', reason: 'other context' },
        { type: 'remove_alias', concept_id: 'c1', alias: 'MC', reason: 'ambiguous' },
        { type: 'remove_alias', concept_id: 'c1', alias: 'never an alias', reason: 'x' },
      ],
    }),
  });
  t.teardown(server.close);
  const model = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-test', retry: FAST_RETRY });
  const decisions = await model.refineConcepts({
    concepts: [
      { id: 'c1', canonicalName: 'Marie Curie', context: 'person', aliases: ['MC'], factCount: 5 },
      { id: 'c2', canonicalName: 'M. Curie', context: 'person', aliases: [], factCount: 1 },
      { id: 'c3', canonicalName: 'Curie', context: 'unit', aliases: [], factCount: 1 },
    ],
    pruneThreshold: 5,
  });
  t.same(decisions, [
    { type: 'merge', loserId: 'c2', survivorId: 'c1', reason: 'abbreviation' },
    { type: 'remove_alias', conceptId: 'c1', alias: 'MC', reason: 'ambiguous' },
  ]);
  const invalid = await startOpenAIServer({ chat: () => ({ decisions: [{ type: 'rename', concept_id: 'c1' }] }) });
  t.teardown(invalid.close);
  const strict = createOpenAIChatModel({ baseUrl: invalid.baseUrl, model: 'gpt-test', retry: { ...FAST_RETRY, maxAttempts: 2 } });
  const error = await modelErrorOf(strict.refineConcepts({ concepts: [], pruneThreshold: 5 }));
  t.equal(error.permanent, true, 'a decision of an unknown type fails the schema');
  t.equal(invalid.requests.chat, 2);
});

t.test('the default server runs the local models: the same corpus gives the same facts and concepts', async (t) => {
  const server = await startOpenAIServer();
  t.teardown(server.close);
  const local = createLocalChatModel();
  const remote = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'local-over-http', retry: FAST_RETRY });
  const contexts = [
    { name: 'person', description: 'people' },
    { name: 'organization', description: 'organisations' },
    { name: 'general', description: 'anything else' },
  ];
  let factCount = 0;
  for (const document of DOCUMENTS.slice(0, 4)) {
    const input = { text: document.paragraphs.map((paragraph) => paragraph.join(' ')).join('\n\n'), title: document.title, chunkIndex: 0 };
    const expected = await local.extractFacts(input);
    const got = await remote.extractFacts(input);
    t.same(got, expected, `${document.slug}: same facts`);
    factCount += got.length;
    const facts = got.map((fact, i) => ({ id: `f${i}`, content: fact.content }));
    t.same(await remote.extractConcepts({ facts, contexts }), await local.extractConcepts({ facts, contexts }), `${document.slug}: same concepts`);
  }
  t.ok(factCount > 10, `facts came through (${factCount})`);

  const embedder = createOpenAIEmbedder({ baseUrl: server.baseUrl, model: 'local-over-http', dimensions: 100, retry: FAST_RETRY });
  const texts = ['Alan Turing worked at Bletchley Park.', 'Coffee grows in Ethiopia.'];
  const [remoteVectors, localVectors] = [await embedder.embed(texts), await createLocalEmbedder().embed(texts)];
  remoteVectors.forEach((vector, i) => {
    const reference = localVectors[i] ?? [];
    t.ok(vector.every((value, j) => Math.abs(value - (reference[j] ?? NaN)) < 1e-9), `vector ${i} equals the local one`);
  });
});
