import { Ajv, type ValidateFunction } from 'ajv';
import type {
  ChatModel,
  ConceptCandidate,
  ConceptExtractionInput,
  ExtractedFact,
  FactExtractionInput,
  ImageInput,
  PostureInput,
  PostureJudgement,
  RefinementDecision,
  RefinementInput,
  SliceSummaryInput,
  SynthesisInput,
  SynthesisOutput,
} from './port.js';
import { builtInPromptset, type Promptset, type PromptPhase } from './promptsets.js';
import { type LlmRetrySettings, OutputValidationError, ProviderHttpError, type RetryHooks, withLlmRetry } from './retry.js';
import { boundedErrorMessage } from '../../util/errorMessage.js';
import { parseRetryAfter } from '../../util/retryAfter.js';

/**
 * The chat model over an OpenAI-compatible API (OpenAI, Ollama, vLLM, OpenRouter):
 * POST `{baseUrl}/chat/completions` with `response_format: {type: 'json_object'}`. The system
 * message is the phase's prompt from the effective promptset; the user message is a JSON
 * document of the structured input (the field names the built-in prompts describe). The reply's
 * content must be a JSON object of the phase's shape (`PHASE_OUTPUT_SCHEMAS`); anything else is
 * retried under `providers.llm_retry` and then fails permanently. The API key is a secret: it is
 * sent only in the Authorization header and never appears in errors.
 */

export type FetchFunction = typeof fetch;

export interface OpenAIChatModelOptions {
  /** Up to and including the version segment, e.g. `https://api.openai.com/v1`. */
  baseUrl: string;
  /** Empty or absent: no Authorization header (local servers). */
  apiKey?: string;
  model: string;
  /** The model accepts images: image facts are extracted from the pixels too. */
  vision?: boolean;
  retry: LlmRetrySettings;
  /**
   * The model reasons before answering (OpenAI o-series and gpt-5, DeepSeek R1, ...): the
   * synthesis sends `providers.synthesis.thinking_level` as `reasoning_effort`. Default: told by
   * the model's name (`isReasoningModel`); other models would refuse the parameter.
   */
  reasoning?: boolean;
  /** Used when an input carries no promptset (default: the built-in one). */
  promptsetDefault?: Promptset;
  /** For tests and proxies; default the global fetch. */
  fetch?: FetchFunction;
  /** Retry hooks (jitter source, retry log). */
  hooks?: RetryHooks;
}

/** Reply shapes of the ChatModel phases. Extra keys are tolerated: models add them. */
export const PHASE_OUTPUT_SCHEMAS = {
  fact_extraction: {
    type: 'object',
    required: ['facts'],
    properties: {
      facts: {
        type: 'array',
        items: {
          type: 'object',
          required: ['content'],
          properties: {
            content: { type: 'string', minLength: 1 },
            source_text: { type: 'string' },
            sentence_index: { type: ['integer', 'null'], minimum: 0 },
          },
        },
      },
    },
  },
  image_fact_extraction: {
    type: 'object',
    required: ['facts'],
    properties: {
      facts: {
        type: 'array',
        items: {
          type: 'object',
          required: ['content'],
          properties: { content: { type: 'string', minLength: 1 }, source_text: { type: ['string', 'null'] } },
        },
      },
    },
  },
  concept_extraction: {
    type: 'object',
    required: ['concepts'],
    properties: {
      concepts: {
        type: 'array',
        items: {
          type: 'object',
          required: ['canonical_name', 'context', 'fact_ids'],
          properties: {
            canonical_name: { type: 'string', minLength: 1 },
            context: { type: 'string', minLength: 1 },
            ontology_class: { type: ['string', 'null'] },
            aliases: { type: 'array', items: { type: 'string' } },
            fact_ids: { type: 'array', items: { type: 'string' } },
          },
        },
      },
    },
  },
  refinement: {
    type: 'object',
    required: ['decisions'],
    properties: {
      decisions: {
        type: 'array',
        items: {
          oneOf: [
            {
              type: 'object',
              required: ['type', 'loser_id', 'survivor_id'],
              properties: {
                type: { const: 'merge' },
                loser_id: { type: 'string' },
                survivor_id: { type: 'string' },
                reason: { type: 'string' },
              },
            },
            {
              type: 'object',
              required: ['type', 'concept_id', 'alias'],
              properties: {
                type: { const: 'remove_alias' },
                concept_id: { type: 'string' },
                alias: { type: 'string' },
                reason: { type: 'string' },
              },
            },
          ],
        },
      },
    },
  },
  posture: {
    type: 'object',
    required: ['judgements'],
    properties: {
      judgements: {
        type: 'array',
        items: {
          type: 'object',
          required: ['fact_id', 'posture'],
          properties: {
            fact_id: { type: 'string' },
            posture: { enum: ['supports', 'contradicts', 'related', 'irrelevant'] },
          },
        },
      },
    },
  },
  summarization: {
    type: 'object',
    required: ['content'],
    properties: { content: { type: 'string', minLength: 1 }, fact_ids: { type: 'array', items: { type: 'string' } } },
  },
  synthesis: {
    type: 'object',
    required: ['content'],
    properties: {
      content: { type: 'string', minLength: 1 },
      fact_ids: { type: 'array', items: { type: 'string' } },
      image_ids: { type: 'array', items: { type: 'string' } },
    },
  },
} as const;

type ModelPhase = keyof typeof PHASE_OUTPUT_SCHEMAS;

/** Model names of reasoning models, which take `reasoning_effort` (see OpenAIChatModelOptions.reasoning). */
export function isReasoningModel(model: string): boolean {
  const name = model.toLowerCase().split('/').at(-1) ?? '';
  return /^(o\d|gpt-5|deepseek-r\d|qwq)/.test(name);
}

interface FactsReply {
  facts: Array<{ content: string; source_text?: string | null; sentence_index?: number | null }>;
}
interface ConceptsReply {
  concepts: Array<{ canonical_name: string; context: string; ontology_class?: string | null; aliases?: string[]; fact_ids: string[] }>;
}
interface PostureReply {
  judgements: Array<{ fact_id: string; posture: 'supports' | 'contradicts' | 'related' | 'irrelevant' }>;
}
interface RefinementReply {
  decisions: Array<
    | { type: 'merge'; loser_id: string; survivor_id: string; reason?: string }
    | { type: 'remove_alias'; concept_id: string; alias: string; reason?: string }
  >;
}

const ajv = new Ajv({ allErrors: true, strict: false });
const validators = Object.fromEntries(
  Object.entries(PHASE_OUTPUT_SCHEMAS).map(([phase, schema]) => [phase, ajv.compile(schema)]),
) as Record<ModelPhase, ValidateFunction>;

/** Joins base URL and path without doubling or dropping the slash. */
export function endpoint(baseUrl: string, path: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}

/** The most characters kept of a model server's error text in its error: its start and its end (boundedErrorMessage). */
export const MAX_PROVIDER_MESSAGE_CHARS = 300;
/** The most characters kept of a reply that is not JSON in its OutputValidationError (boundedErrorMessage). */
export const MAX_REPLY_SAMPLE_CHARS = 120;

/**
 * The provider's own error text from an error body ({error: {message}} or plain text), bounded
 * the one way (boundedErrorMessage): an OpenAI-compatible server (a proxy, vLLM, a gateway) often
 * puts what went wrong at the end of a long body (a stack, the request echoed, then the reason),
 * so its start and its end are kept, never half an emoji (the message may end up in a failure an
 * event records, and jsonb refuses a lone surrogate).
 */
function providerMessage(body: string): string {
  let message = body;
  try {
    const parsed = JSON.parse(body) as { error?: { message?: unknown } | string; message?: unknown };
    if (typeof parsed.error === 'string') message = parsed.error;
    else if (typeof parsed.error?.message === 'string') message = parsed.error.message;
    else if (typeof parsed.message === 'string') message = parsed.message;
  } catch {
    // not JSON: keep the text
  }
  return boundedErrorMessage(message, MAX_PROVIDER_MESSAGE_CHARS);
}

/**
 * POSTs a JSON body and returns the parsed JSON reply. A non-2xx status becomes a
 * ProviderHttpError (permanent for 400/401/403/404/422, Retry-After kept); a 2xx body that is not
 * JSON is an OutputValidationError. Network errors propagate as they are (transient).
 */
export async function postJson(
  fetchImpl: FetchFunction,
  url: string,
  apiKey: string | undefined,
  body: unknown,
  signal: AbortSignal,
): Promise<unknown> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (apiKey) headers.authorization = `Bearer ${apiKey}`;
  const response = await fetchImpl(url, { method: 'POST', headers, body: JSON.stringify(body), signal });
  const text = await response.text();
  if (!response.ok) {
    throw new ProviderHttpError(
      `POST ${url}: HTTP ${response.status}: ${providerMessage(text)}`,
      response.status,
      parseRetryAfter(response.headers.get('retry-after')),
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new OutputValidationError(`POST ${url}: the reply is not JSON`);
  }
}

/** The message content of a chat completion, or an OutputValidationError. */
function completionContent(reply: unknown): string {
  const choices = (reply as { choices?: unknown })?.choices;
  const first = Array.isArray(choices) ? (choices[0] as { message?: { content?: unknown }; finish_reason?: unknown }) : undefined;
  const content = first?.message?.content;
  if (typeof content !== 'string') throw new OutputValidationError('the completion has no message content');
  if (first?.finish_reason === 'length') throw new OutputValidationError('the completion was cut off at the token limit');
  return content;
}

/** Parses the model's JSON object, tolerating a Markdown code fence around it. */
function parseModelJson(content: string): unknown {
  const trimmed = content.trim();
  const fenced = /^```(?:json)?\s*([\s\S]*?)\s*```$/i.exec(trimmed);
  try {
    return JSON.parse(fenced ? (fenced[1] ?? '') : trimmed) as unknown;
  } catch {
    // Its start and its end: a reply cut short or with text after its JSON shows that at the end.
    throw new OutputValidationError(`the model's reply is not JSON: ${boundedErrorMessage(trimmed, MAX_REPLY_SAMPLE_CHARS)}`);
  }
}

type UserContent = string | Array<{ type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } }>;

export function createOpenAIChatModel(options: OpenAIChatModelOptions): ChatModel {
  const fetchImpl = options.fetch ?? fetch;
  const url = endpoint(options.baseUrl, 'chat/completions');
  const defaultPromptset = options.promptsetDefault ?? builtInPromptset();
  const vision = options.vision ?? false;
  const reasoning = options.reasoning ?? isReasoningModel(options.model);

  /** One phase call: prompt, request, parse, validate; retried as a whole. */
  async function complete<T>(
    phase: ModelPhase,
    promptset: Promptset | undefined,
    user: UserContent,
    jobSignal?: AbortSignal,
    extra: Record<string, unknown> = {},
  ): Promise<T> {
    const systemPrompt = (promptset ?? defaultPromptset).phases[phase satisfies PromptPhase];
    const body = {
      ...extra,
      model: options.model,
      messages: [
        { role: 'system', content: systemPrompt },
        { role: 'user', content: user },
      ],
      response_format: { type: 'json_object' },
      temperature: 0,
    };
    return withLlmRetry(
      options.retry,
      async (signal) => {
        const parsed = parseModelJson(completionContent(await postJson(fetchImpl, url, options.apiKey, body, signal)));
        const validate = validators[phase];
        if (!validate(parsed)) {
          throw new OutputValidationError(`the model's ${phase} reply does not match its schema: ${ajv.errorsText(validate.errors)}`);
        }
        return parsed as T;
      },
      jobSignal,
      { what: `${phase} (${options.model})`, ...options.hooks },
    );
  }

  return {
    modelId: options.model,
    canSeeImages: vision,

    async extractFacts(input: FactExtractionInput, signal?: AbortSignal): Promise<ExtractedFact[]> {
      const document = {
        title: input.title ?? null,
        chunk_index: input.chunkIndex,
        previous_context: input.previousContext ?? '',
        text: input.text,
        next_context: input.nextContext ?? '',
      };
      const reply = await complete<FactsReply>('fact_extraction', input.promptset, JSON.stringify(document), signal);
      return reply.facts.map((fact) => ({
        content: fact.content.trim(),
        sourceText: fact.source_text ?? '',
        ...(typeof fact.sentence_index === 'number' ? { sentenceIndex: fact.sentence_index } : {}),
      }));
    },

    async extractImageFacts(input: ImageInput, signal?: AbortSignal): Promise<ExtractedFact[]> {
      const document = JSON.stringify({
        alt_text: input.altText ?? null,
        caption: input.caption ?? null,
        surrounding_text: input.surroundingText ?? null,
        source_title: input.sourceTitle ?? null,
      });
      const user: UserContent = vision
        ? [
            { type: 'text', text: document },
            { type: 'image_url', image_url: { url: `data:${input.contentType};base64,${Buffer.from(input.bytes).toString('base64')}` } },
          ]
        : document;
      const reply = await complete<FactsReply>('image_fact_extraction', input.promptset, user, signal);
      return reply.facts.map((fact) => ({ content: fact.content.trim(), sourceText: fact.source_text ?? '' }));
    },

    async extractConcepts(input: ConceptExtractionInput, signal?: AbortSignal): Promise<ConceptCandidate[]> {
      const document = {
        facts: input.facts.map((fact) => ({ id: fact.id, content: fact.content })),
        contexts: input.contexts.map((context) => ({ name: context.name, description: context.description })),
      };
      const reply = await complete<ConceptsReply>('concept_extraction', input.promptset, JSON.stringify(document), signal);
      // Models slip: ids they invent and contexts not offered are dropped rather than trusted.
      const factIds = new Set(input.facts.map((fact) => fact.id));
      const contexts = new Map(input.contexts.map((context) => [context.name.toLowerCase(), context.name]));
      const candidates: ConceptCandidate[] = [];
      for (const concept of reply.concepts) {
        const context = contexts.get(concept.context.trim().toLowerCase());
        const linked = [...new Set(concept.fact_ids.filter((id) => factIds.has(id)))];
        const canonicalName = concept.canonical_name.trim();
        if (context === undefined || linked.length === 0 || canonicalName === '') continue;
        const aliases = [...new Set((concept.aliases ?? []).map((alias) => alias.trim()))].filter(
          (alias) => alias !== '' && alias.toLowerCase() !== canonicalName.toLowerCase(),
        );
        candidates.push({ canonicalName, context, ontologyClass: concept.ontology_class ?? null, aliases, factIds: linked });
      }
      return candidates;
    },

    async refineConcepts(input: RefinementInput, signal?: AbortSignal): Promise<RefinementDecision[]> {
      const document = {
        concepts: input.concepts.map((concept) => ({
          id: concept.id,
          canonical_name: concept.canonicalName,
          context: concept.context,
          aliases: concept.aliases,
          fact_count: concept.factCount,
        })),
        prune_threshold: input.pruneThreshold,
      };
      const reply = await complete<RefinementReply>('refinement', input.promptset, JSON.stringify(document), signal);
      const concepts = new Map(input.concepts.map((concept) => [concept.id, concept]));
      const decisions: RefinementDecision[] = [];
      for (const decision of reply.decisions) {
        const reason = decision.reason ?? '';
        if (decision.type === 'merge') {
          const loser = concepts.get(decision.loser_id);
          const survivor = concepts.get(decision.survivor_id);
          // Merges stay within one context (a concept's identity includes its context).
          if (!loser || !survivor || loser.id === survivor.id || loser.context.toLowerCase() !== survivor.context.toLowerCase()) continue;
          decisions.push({ type: 'merge', loserId: loser.id, survivorId: survivor.id, reason });
        } else {
          const concept = concepts.get(decision.concept_id);
          if (!concept || !concept.aliases.includes(decision.alias)) continue;
          decisions.push({ type: 'remove_alias', conceptId: concept.id, alias: decision.alias, reason });
        }
      }
      return decisions;
    },

    async judgePostures(input: PostureInput, signal?: AbortSignal): Promise<PostureJudgement[]> {
      const document = { sentence: input.sentence, facts: input.facts.map((fact) => ({ id: fact.id, content: fact.content })) };
      const reply = await complete<PostureReply>('posture', input.promptset, JSON.stringify(document), signal);
      // Ids the model invents are dropped; a fact judged twice keeps its first judgement.
      const asked = new Set(input.facts.map((fact) => fact.id));
      const judged = new Map<string, PostureJudgement['posture']>();
      for (const judgement of reply.judgements) {
        if (!asked.has(judgement.fact_id) || judged.has(judgement.fact_id) || judgement.posture === 'irrelevant') continue;
        judged.set(judgement.fact_id, judgement.posture);
      }
      return input.facts.flatMap((fact) => {
        const posture = judged.get(fact.id);
        return posture === undefined ? [] : [{ factId: fact.id, posture }];
      });
    },

    async summarizeFacts(input: SliceSummaryInput, signal?: AbortSignal): Promise<{ content: string }> {
      const document = {
        concept: { id: input.concept.id, canonical_name: input.concept.canonicalName, context: input.concept.context, aliases: input.concept.aliases },
        slice: { facts: input.facts.map((fact) => ({ id: fact.id, content: fact.content })) },
        max_tokens: input.maxTokens,
      };
      // max_tokens bounds the answer; a reasoning model spends part of it thinking, so it gets no cap here.
      const reply = await complete<{ content: string }>('summarization', input.promptset, JSON.stringify(document), signal, reasoning ? {} : { max_tokens: input.maxTokens * 2 });
      return { content: reply.content.trim() };
    },

    async synthesizeConcept(input: SynthesisInput, signal?: AbortSignal): Promise<SynthesisOutput> {
      const document = {
        concept: { id: input.concept.id, canonical_name: input.concept.canonicalName, context: input.concept.context, aliases: input.concept.aliases },
        summaries: input.summaries.map((summary) => ({ id: summary.id, content: summary.content })),
        facts: input.facts.map((fact) => ({ id: fact.id, content: fact.content })),
        related_concepts: input.relatedConcepts.map((concept) => ({ id: concept.id, canonical_name: concept.canonicalName, summary: concept.summary })),
        related_syntheses: input.relatedSyntheses.map((synthesis) => ({ concept_id: synthesis.conceptId, canonical_name: synthesis.canonicalName, content: synthesis.content })),
        images: input.images.map((image) => ({ id: image.factId, caption: image.caption })),
        max_images: input.maxImages,
      };
      const extra = reasoning ? { reasoning_effort: input.thinkingLevel, max_completion_tokens: input.maxTokens } : { max_tokens: input.maxTokens };
      const reply = await complete<{ content: string; image_ids?: string[] }>('synthesis', input.promptset, JSON.stringify(document), signal, extra);
      // Images the model invents or repeats are dropped; at most max_images stay.
      const candidates = new Set(input.images.map((image) => image.factId));
      const imageFactIds = [...new Set((reply.image_ids ?? []).filter((id) => candidates.has(id)))].slice(0, input.maxImages);
      return { content: reply.content.trim(), imageFactIds };
    },
  };
}
