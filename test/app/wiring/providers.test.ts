import t from 'tap';
import { buildConfig, ConfigError } from '../../../src/config/index.js';
import { createChatModel, createDocumentExtractor, createEmbedder } from '../../../src/app/wiring/providers.js';
import { UnsupportedContentError } from '../../../src/providers/fetch/document.js';
import { isPermanentError } from '../../../src/pipeline/types.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';

t.test('defaults: the local chat model and the local embedder', async (t) => {
  const config = buildConfig({});
  const chat = createChatModel(config);
  t.equal(chat.modelId, 'local/rule-based-v1');
  t.equal(chat.canSeeImages, false);
  const embedder = createEmbedder(config);
  t.equal(embedder?.modelId, 'local/wink-sg-100d-v1');
  t.equal(embedder?.dimensions, 100);
  await chat.close?.();
  await embedder?.close?.();
});

t.test('embeddings provider none: no embedder', async (t) => {
  t.equal(createEmbedder(buildConfig({ providers: { embeddings: { provider: 'none' } } })), null);
});

t.test('a local provider with a model name that is not the local model is refused', async (t) => {
  t.throws(() => createChatModel(buildConfig({ providers: { llm: { model: 'gpt-4o' } } })), ConfigError);
  t.throws(() => createChatModel(buildConfig({ providers: { llm: { model: 'gpt-4o' } } })), /providers\.llm\.model: must be local\/rule-based-v1 when providers\.llm\.provider is local/);
  t.throws(() => createEmbedder(buildConfig({ providers: { embeddings: { model: 'text-embedding-3-small' } } })), /providers\.embeddings\.model: must be local\/wink-sg-100d-v1/);
  t.throws(() => createEmbedder(buildConfig({ providers: { embeddings: { dimensions: 384 } } })), /providers\.embeddings\.dimensions: must be 100 when providers\.embeddings\.provider is local/);
});

t.test('openai providers talk to the configured server with the configured key, batch size, text bound and retries', async (t) => {
  const server = await startOpenAIServer({
    apiKey: 'sk-configured',
    chat: () => ({ facts: [{ content: 'Coffee grows in Ethiopia.', source_text: 'Coffee grows in Ethiopia.' }] }),
    embed: (texts) => texts.map((text) => [text.length, 1, 0]),
  });
  t.teardown(server.close);
  const config = buildConfig({
    providers: {
      llm: { provider: 'openai', model: 'gpt-test', base_url: server.baseUrl, api_key: 'sk-configured', vision: true },
      embeddings: { provider: 'openai', model: 'embed-test', base_url: server.baseUrl, api_key: 'sk-configured', dimensions: 3 },
      ai: { embed_batch_size: 2, embed_max_chars: 2 },
      llm_retry: { max_attempts: 2, base_delay: '10ms', max_delay: '20ms', per_call_timeout: '2s' },
    },
  });
  const chat = createChatModel(config);
  t.equal(chat.modelId, 'gpt-test');
  t.equal(chat.canSeeImages, true);
  server.queueFault('chat', { status: 500 });
  t.same(await chat.extractFacts({ text: 'Coffee grows in Ethiopia.', chunkIndex: 0 }), [
    { content: 'Coffee grows in Ethiopia.', sourceText: 'Coffee grows in Ethiopia.' },
  ]);
  t.equal(server.requests.chat, 2, 'retried once under providers.llm_retry');

  const embedder = createEmbedder(config);
  t.equal(embedder?.modelId, 'embed-test');
  t.same(await embedder?.embed(['a', 'bb', 'ccc']), [
    [1, 1, 0],
    [2, 1, 0],
    [2, 1, 0],
  ], "'ccc' embedded as its first two characters");
  t.equal(server.requests.embeddings, 2, 'providers.ai.embed_batch_size 2: two requests for three texts');
  t.same(
    server.bodies.filter((request) => request.path === 'embeddings').flatMap((request) => request.body.input as string[]),
    ['a', 'bb', 'cc'],
    'providers.ai.embed_max_chars 2: a longer text is sent cut',
  );
  t.ok(server.bodies.every((request) => request.authorization === 'Bearer sk-configured'));
});

t.test('providers.resolution.extraction_timeout is the deadline of a document in the extraction worker', async (t) => {
  const documents = createDocumentExtractor(buildConfig({ providers: { resolution: { extraction_timeout: '200ms' } } }));
  t.teardown(() => documents.close());
  // A chain of 3,000 divs: Readability's clean-up of it runs for minutes.
  const nested = Buffer.from(`<html><body><article>${'<div>'.repeat(3000)}<p>Marie Curie discovered polonium in 1898.</p>${'</div>'.repeat(3000)}</article></body></html>`);
  const error = await documents.extract({ body: nested, contentType: 'text/html' }).then(
    () => null,
    (reason: unknown) => reason,
  );
  t.type(error, UnsupportedContentError);
  t.equal((error as Error).message, 'the document is too complex to extract: not done within 0.2 s (deeply nested markup?)');
  t.ok(isPermanentError(error), 'the source fails at once, not retried');
});
