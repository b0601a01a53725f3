import t from 'tap';
import { buildConfig } from '../../src/config/index.js';
import { configErrorOf, load } from './helpers.js';


const OPENAI_LLM = { provider: 'openai', model: 'gpt-4o-mini', base_url: 'https://api.openai.com/v1' };
const OPENAI_EMBEDDINGS = { provider: 'openai', model: 'text-embedding-3-small', base_url: 'https://api.openai.com/v1', dimensions: 1536 };

t.test('openai providers are accepted with a base_url', async (t) => {
  const config = buildConfig({ providers: { llm: { ...OPENAI_LLM, vision: true }, embeddings: OPENAI_EMBEDDINGS } });
  t.equal(config.providers.llm.provider, 'openai');
  t.equal(config.providers.llm.vision, true);
  t.equal(config.providers.embeddings.dimensions, 1536);
  t.equal(buildConfig({ providers: { embeddings: { provider: 'none' } } }).providers.embeddings.provider, 'none');
});

t.test('provider names, URLs and dimensions are checked', async (t) => {
  t.match(configErrorOf(() => buildConfig({ providers: { llm: { provider: 'anthropic' } } })), /providers\.llm\.provider: must be one of local, openai/);
  t.match(configErrorOf(() => buildConfig({ providers: { embeddings: { provider: 'cohere' } } })), /providers\.embeddings\.provider: must be one of local, openai, none/);
  t.match(
    configErrorOf(() => buildConfig({ providers: { llm: { provider: 'openai', model: 'm' } } })),
    /providers\.llm\.base_url: is required when providers\.llm\.provider is openai/,
  );
  t.match(
    configErrorOf(() => buildConfig({ providers: { embeddings: { provider: 'openai', model: 'm', dimensions: 8 } } })),
    /providers\.embeddings\.base_url: is required when providers\.embeddings\.provider is openai/,
  );
  t.match(configErrorOf(() => buildConfig({ providers: { llm: { base_url: 'ftp://x' } } })), /providers\.llm\.base_url: must be empty or an http\(s\) URL/);
  t.match(configErrorOf(() => buildConfig({ providers: { embeddings: { dimensions: 0 } } })), /providers\.embeddings\.dimensions: must be at least 1/);
  t.match(
    configErrorOf(() => buildConfig({ providers: { embeddings: { dimensions: 384 } } })),
    /providers\.embeddings\.dimensions: must be 100 when providers\.embeddings\.provider is local/,
  );
  t.match(configErrorOf(() => buildConfig({ providers: { llm: { vision: 'yes' } } })), /providers\.llm\.vision: must be a boolean/);
  t.match(configErrorOf(() => buildConfig({ providers: { dedup: { catchup_interval: '0s' } } })), /providers\.dedup\.catchup_interval: must be at least 1s \(got 0s\)/);
  t.match(configErrorOf(() => buildConfig({ providers: { dedup: { catchup_interval: '10' } } })), /providers\.dedup\.catchup_interval: must be a duration/);
});

t.test('providers.embeddings.dimensions is at most 16000, the longest vector either search tier stores', async (t) => {
  t.equal(buildConfig({ providers: { embeddings: { ...OPENAI_EMBEDDINGS, dimensions: 3072 } } }).providers.embeddings.dimensions, 3072, 'text-embedding-3-large');
  t.equal(buildConfig({ providers: { embeddings: { ...OPENAI_EMBEDDINGS, dimensions: 16_000 } } }).providers.embeddings.dimensions, 16_000, 'the limit itself');
  for (const provider of ['openai', 'none']) {
    t.match(
      configErrorOf(() => buildConfig({ providers: { embeddings: { ...OPENAI_EMBEDDINGS, provider, dimensions: 16_001 } } })),
      /providers\.embeddings\.dimensions: must be at most 16000 \(the longest vector pgvector's vector type and OpenSearch's lucene k-NN engine store\), got 16001/,
      `provider ${provider}: the index is made with that length either way`,
    );
  }
  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_EMBEDDINGS_PROVIDER: 'openai', PROVIDERS_EMBEDDINGS_BASE_URL: 'https://api.openai.com/v1', PROVIDERS_EMBEDDINGS_DIMENSIONS: '20000' } })),
    /providers\.embeddings\.dimensions: must be at most 16000 .*got 20000 \(set by environment variable PROVIDERS_EMBEDDINGS_DIMENSIONS\)/,
  );
});

t.test('search.opensearch.dimensions is gone: vectors take providers.embeddings.dimensions', async (t) => {
  t.notOk('dimensions' in buildConfig({}).search.opensearch);
  t.match(configErrorOf(() => buildConfig({ search: { opensearch: { dimensions: 100 } } })), /search\.opensearch\.dimensions: unknown key/);
});

t.test('LLM_API_KEY and EMBEDDINGS_API_KEY set the api keys, and errors never echo them', async (t) => {
  const config = load({ env: { LLM_API_KEY: 'sk-llm-secret', EMBEDDINGS_API_KEY: 'sk-emb-secret' } });
  t.equal(config.providers.llm.api_key, 'sk-llm-secret');
  t.equal(config.providers.embeddings.api_key, 'sk-emb-secret');
  const generic = load({ env: { PROVIDERS_LLM_API_KEY: 'generic', LLM_API_KEY: 'spec-name' } });
  t.equal(generic.providers.llm.api_key, 'spec-name', "the spec-style name wins over the generic one");
  const message = configErrorOf(() =>
    load({ env: { LLM_API_KEY: 'sk-llm-secret', PROVIDERS_LLM_PROVIDER: 'openai', PROVIDERS_LLM_BASE_URL: 'not a url' } }),
  );
  t.match(message, /providers\.llm\.base_url: must be empty or an http\(s\) URL \(set by environment variable PROVIDERS_LLM_BASE_URL\)/);
  t.notMatch(message, /sk-llm-secret/);
});

t.test('the LLM retry constraint names the keys', async (t) => {
  t.match(
    configErrorOf(() => buildConfig({ task: { job_timeout: '1m' } })),
    /providers\.llm_retry\.per_call_timeout: must not exceed task\.job_timeout[^]*task\.job_timeout: must exceed providers\.llm_retry max_attempts x per_call_timeout plus backoffs/,
  );
  t.match(
    configErrorOf(() => buildConfig({ providers: { llm_retry: { max_attempts: 50 } } })),
    /task\.job_timeout: must exceed providers\.llm_retry max_attempts x per_call_timeout plus backoffs \(14400000ms; retries can take 16470000ms\)/, '50 x 5m + 49 x 30s',
  );
  t.ok(buildConfig({ task: { job_timeout: '1m' }, providers: { llm_retry: { per_call_timeout: '10s', max_attempts: 2, base_delay: '1s', max_delay: '1s' } } }), '2 x 10s + 1s fits 1m');
  t.match(configErrorOf(() => buildConfig({ providers: { llm_retry: { per_call_timeout: '0s' } } })), /providers\.llm_retry\.per_call_timeout: must be longer than 0s/);
});
