import { type Config, ConfigError } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import { llmRetrySettingsOf } from '../../config/validate.js';
import { LOCAL_EMBEDDER_DIMENSIONS, LOCAL_EMBEDDER_MODEL_ID } from '../../providers/embeddings/local.js';
import { createOpenAIEmbedder } from '../../providers/embeddings/openai.js';
import { createWorkerDocumentExtractor, type WorkerDocumentExtractor, type WorkerDocumentExtractorOptions } from '../../providers/fetch/extractionWorkers.js';
import type { Embedder } from '../../providers/embeddings/port.js';
import { LOCAL_FACT_EXTRACTOR_MODEL_ID } from '../../providers/llm/local.js';
import { createWorkerChatModel, createWorkerEmbedder, type ModelWorkerOptions } from '../../providers/modelWorkers/models.js';
import { createOpenAIChatModel, type FetchFunction } from '../../providers/llm/openai.js';
import type { ChatModel } from '../../providers/llm/port.js';
import type { LlmRetrySettings, RetryHooks } from '../../providers/llm/retry.js';

/**
 * Builds the chat model and the embedder that `providers.llm` / `providers.embeddings` select.
 * Secrets (`api_key`) go to the clients only; nothing here logs them.
 */

export interface ProviderDeps {
  /** For tests and proxies; default the global fetch. */
  fetch?: FetchFunction;
  /** The built-in models' worker threads (count) and the local embedder's word-table cache directory. */
  localModels?: ModelWorkerOptions;
  /** Retry hooks of the chat model (e.g. a logger's onRetry). */
  retryHooks?: RetryHooks;
}

export function createChatModel(config: Config, deps: ProviderDeps = {}): ChatModel {
  const llm = config.providers.llm;
  switch (llm.provider) {
    case 'local': {
      // The model id is recorded with every decomposition: it must name the model that ran.
      requireLocalSetting('providers.llm', 'model', llm.model, LOCAL_FACT_EXTRACTOR_MODEL_ID);
      // In worker threads, off the API's event loop; `close` ends them.
      return createWorkerChatModel(deps.localModels);
    }
    case 'openai':
      return createOpenAIChatModel({
        ...openAIEndpoint(config, llm, deps),
        vision: llm.vision,
        ...(deps.retryHooks ? { hooks: deps.retryHooks } : {}),
      });
  }
}

/** Document extraction in a worker thread, under `providers.resolution.extraction_timeout`. */
export function createDocumentExtractor(config: Config, options: Omit<WorkerDocumentExtractorOptions, 'deadlineMs'> = {}): WorkerDocumentExtractor {
  return createWorkerDocumentExtractor({ ...options, deadlineMs: parseDuration(config.providers.resolution.extraction_timeout) });
}

/** The configured embedder, or null when `providers.embeddings.provider` is `none`. */
export function createEmbedder(config: Config, deps: ProviderDeps = {}): Embedder | null {
  const embeddings = config.providers.embeddings;
  switch (embeddings.provider) {
    case 'none':
      return null;
    case 'local': {
      requireLocalSetting('providers.embeddings', 'model', embeddings.model, LOCAL_EMBEDDER_MODEL_ID);
      requireLocalSetting('providers.embeddings', 'dimensions', embeddings.dimensions, LOCAL_EMBEDDER_DIMENSIONS);
      return createWorkerEmbedder(deps.localModels);
    }
    case 'openai':
      return createOpenAIEmbedder({
        ...openAIEndpoint(config, embeddings, deps),
        dimensions: embeddings.dimensions,
        batchSize: config.providers.ai.embed_batch_size,
        maxChars: config.providers.ai.embed_max_chars,
        rateLimitWaitTimeoutMs: parseDuration(config.providers.ai.rate_limit_wait_timeout),
      });
  }
}

/** What both OpenAI-compatible clients take from their config section: where, who, which model, how to retry. */
function openAIEndpoint(
  config: Config,
  section: { base_url: string; api_key: string; model: string },
  deps: ProviderDeps,
): { baseUrl: string; apiKey: string; model: string; retry: LlmRetrySettings; fetch?: FetchFunction } {
  return {
    baseUrl: section.base_url,
    apiKey: section.api_key,
    model: section.model,
    retry: llmRetrySettingsOf(config.providers.llm_retry),
    ...(deps.fetch ? { fetch: deps.fetch } : {}),
  };
}

/** A setting of a local model's section must name what the built-in model is. */
function requireLocalSetting(section: string, key: string, configured: string | number, actual: string | number): void {
  if (configured !== actual) throw new ConfigError(`${section}.${key}: must be ${actual} when ${section}.provider is local`);
}
