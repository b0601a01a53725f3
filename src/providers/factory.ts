import { type Config, ConfigError } from '../config/types.js';
import { parseDuration } from '../config/duration.js';
import { llmRetrySettingsOf } from '../config/validate.js';
import { createLocalEmbedder, type LocalEmbedderOptions } from './embeddings/local.js';
import { createOpenAIEmbedder } from './embeddings/openai.js';
import type { Embedder } from './embeddings/port.js';
import { createLocalChatModel } from './llm/local.js';
import { createOpenAIChatModel, type FetchFunction } from './llm/openai.js';
import type { ChatModel } from './llm/port.js';
import type { RetryHooks } from './llm/retry.js';

/**
 * Builds the chat model and the embedder that `providers.llm` / `providers.embeddings` select.
 * Secrets (`api_key`) go to the clients only; nothing here logs them.
 */

export interface ProviderDeps {
  /** For tests and proxies; default the global fetch. */
  fetch?: FetchFunction;
  /** Where the local embedder keeps its word-table cache. */
  localEmbedder?: LocalEmbedderOptions;
  /** Retry hooks of the chat model (e.g. a logger's onRetry). */
  retryHooks?: RetryHooks;
}

export function createChatModel(config: Config, deps: ProviderDeps = {}): ChatModel {
  const llm = config.providers.llm;
  switch (llm.provider) {
    case 'local': {
      const model = createLocalChatModel();
      // The model id is recorded with every decomposition: it must name the model that ran.
      if (llm.model !== model.modelId) {
        throw new ConfigError(`providers.llm.model: must be ${model.modelId} when providers.llm.provider is local`);
      }
      return model;
    }
    case 'openai':
      return createOpenAIChatModel({
        baseUrl: llm.base_url,
        apiKey: llm.api_key,
        model: llm.model,
        vision: llm.vision,
        retry: llmRetrySettingsOf(config.providers.llm_retry),
        ...(deps.fetch ? { fetch: deps.fetch } : {}),
        ...(deps.retryHooks ? { hooks: deps.retryHooks } : {}),
      });
  }
}

/** The configured embedder, or null when `providers.embeddings.provider` is `none`. */
export function createEmbedder(config: Config, deps: ProviderDeps = {}): Embedder | null {
  const embeddings = config.providers.embeddings;
  switch (embeddings.provider) {
    case 'none':
      return null;
    case 'local': {
      const embedder = createLocalEmbedder(deps.localEmbedder);
      if (embeddings.model !== embedder.modelId) {
        throw new ConfigError(`providers.embeddings.model: must be ${embedder.modelId} when providers.embeddings.provider is local`);
      }
      if (embeddings.dimensions !== embedder.dimensions) {
        throw new ConfigError(`providers.embeddings.dimensions: must be ${embedder.dimensions} when providers.embeddings.provider is local`);
      }
      return embedder;
    }
    case 'openai':
      return createOpenAIEmbedder({
        baseUrl: embeddings.base_url,
        apiKey: embeddings.api_key,
        model: embeddings.model,
        dimensions: embeddings.dimensions,
        batchSize: config.providers.ai.embed_batch_size,
        rateLimitWaitTimeoutMs: parseDuration(config.providers.ai.rate_limit_wait_timeout),
        retry: llmRetrySettingsOf(config.providers.llm_retry),
        ...(deps.fetch ? { fetch: deps.fetch } : {}),
      });
  }
}
