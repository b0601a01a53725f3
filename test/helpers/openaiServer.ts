import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLocalEmbedder } from '../../src/providers/embeddings/local.js';
import type { Embedder } from '../../src/providers/embeddings/port.js';
import { createLocalChatModel } from '../../src/providers/llm/local.js';
import { ModelCallError, type ChatModel } from '../../src/providers/llm/port.js';

/**
 * A real HTTP server speaking the OpenAI wire format (`POST /v1/chat/completions`,
 * `POST /v1/embeddings`) for tests of the OpenAI-compatible providers.
 *
 * By default it answers with the built-in local models run on the structured input the client
 * sends, so a corpus yields the same facts through either provider. `chat` / `embed` replace
 * those answers. Faults are scripted per path: `queueFault('chat', ...)` applies to the next
 * request on that path (one fault per request, in order); `setStandingFault` to every request
 * until cleared. `requests` counts requests per path; `bodies` keeps what was received.
 */

export type OpenAIPath = 'chat' | 'embeddings';

/** The phase a chat request belongs to, recognised from the shape of its user document. */
export type ChatPhase = 'fact_extraction' | 'image_fact_extraction' | 'concept_extraction' | 'refinement' | 'posture' | 'summarization' | 'synthesis';

export type Fault =
  /** Answer with this status (e.g. 429 with retryAfter seconds, 500, 401). */
  | { status: number; retryAfter?: string | number; body?: string }
  /** Wait this long before answering normally (longer than the client's timeout = a timeout). */
  | { delayMs: number }
  /** A chat reply whose message content is not JSON. */
  | { malformedContent: true }
  /** A chat reply whose content is JSON but not of the phase's shape. */
  | { invalidContent: unknown }
  /** An HTTP 200 whose body is not JSON at all. */
  | { malformedBody: true }
  /** Embedding vectors of this length instead of the right one. */
  | { wrongDimensions: number }
  /** Embedding reply data in reverse order (indexes still correct). */
  | { reversed: true }
  /** No fault: answer normally (to script "fail, succeed, fail"). */
  | { pass: true };

export interface OpenAIServerOptions {
  /** Replaces the default chat answer: the object returned becomes the message content (JSON). */
  chat?: (parsedInput: Record<string, unknown>, phase: ChatPhase) => unknown;
  /** Replaces the default embeddings; `request` is the whole body (a server honouring `dimensions` reads it). */
  embed?: (texts: string[], request: Record<string, unknown>) => number[][] | Promise<number[][]>;
  /** Answer an embeddings request carrying `dimensions` with 400, as OpenAI does for text-embedding-ada-002. */
  refuseDimensions?: boolean;
  /**
   * Refuse an embeddings input of more tokens than this with 400, as OpenAI does (8,192 for its
   * embedding models). Tokens are counted at the worst a byte-level BPE tokenizer comes to: one
   * per UTF-8 byte (a rare CJK character or an emoji can be 3 or 4 tokens).
   */
  maxInputTokens?: number;
  /** Faults queued from the start, per path. */
  faults?: Partial<Record<OpenAIPath, Fault[]>>;
  /** Require this bearer token (401 otherwise). */
  apiKey?: string;
}

export interface ReceivedRequest {
  path: OpenAIPath;
  body: Record<string, unknown>;
  authorization: string | undefined;
}

export function phaseOf(document: Record<string, unknown>): ChatPhase {
  if ('chunk_index' in document && 'text' in document) return 'fact_extraction';
  if ('alt_text' in document || 'surrounding_text' in document) return 'image_fact_extraction';
  if ('prune_threshold' in document) return 'refinement';
  if ('sentence' in document && 'facts' in document) return 'posture';
  if ('facts' in document && 'contexts' in document) return 'concept_extraction';
  if ('slice' in document && 'concept' in document) return 'summarization';
  if ('summaries' in document && 'concept' in document) return 'synthesis';
  throw new Error(`cannot tell the phase of a chat request with keys ${Object.keys(document).join(', ')}`);
}

/** The user document (and image, when sent) of a chat request. */
function userDocument(body: Record<string, unknown>): { document: Record<string, unknown>; image: { contentType: string; bytes: Buffer } | null } {
  const messages = body.messages as Array<{ role: string; content: unknown }>;
  const user = messages.find((message) => message.role === 'user');
  if (!user) throw new Error('no user message');
  if (typeof user.content === 'string') return { document: JSON.parse(user.content) as Record<string, unknown>, image: null };
  const parts = user.content as Array<{ type: string; text?: string; image_url?: { url: string } }>;
  const text = parts.find((part) => part.type === 'text')?.text ?? '{}';
  const url = parts.find((part) => part.type === 'image_url')?.image_url?.url;
  const match = url ? /^data:([^;]+);base64,(.*)$/s.exec(url) : null;
  return {
    document: JSON.parse(text) as Record<string, unknown>,
    image: match ? { contentType: match[1] ?? '', bytes: Buffer.from(match[2] ?? '', 'base64') } : null,
  };
}

/**
 * The local chat model's answer to a wire document, in the wire reply shape: the inverse of
 * the mapping in src/providers/llm/openai.ts.
 */
export async function localChatAnswer(
  model: ChatModel,
  document: Record<string, unknown>,
  phase: ChatPhase,
  image: { contentType: string; bytes: Buffer } | null,
): Promise<unknown> {
  const str = (value: unknown) => (typeof value === 'string' ? value : null);
  switch (phase) {
    case 'fact_extraction': {
      const facts = await model.extractFacts({
        text: String(document.text),
        title: str(document.title),
        chunkIndex: Number(document.chunk_index),
        previousContext: str(document.previous_context) ?? '',
        nextContext: str(document.next_context) ?? '',
      });
      return {
        facts: facts.map((fact) => ({ content: fact.content, source_text: fact.sourceText, sentence_index: fact.sentenceIndex ?? null })),
      };
    }
    case 'image_fact_extraction': {
      const facts = await model.extractImageFacts({
        bytes: image?.bytes ?? new Uint8Array(),
        contentType: image?.contentType ?? 'application/octet-stream',
        altText: str(document.alt_text),
        caption: str(document.caption),
        surroundingText: str(document.surrounding_text),
        sourceTitle: str(document.source_title),
      });
      return { facts: facts.map((fact) => ({ content: fact.content, source_text: fact.sourceText })) };
    }
    case 'concept_extraction': {
      const concepts = await model.extractConcepts({
        facts: document.facts as Array<{ id: string; content: string }>,
        contexts: document.contexts as Array<{ name: string; description: string }>,
      });
      return {
        concepts: concepts.map((concept) => ({
          canonical_name: concept.canonicalName,
          context: concept.context,
          ontology_class: concept.ontologyClass ?? null,
          aliases: concept.aliases,
          fact_ids: concept.factIds,
        })),
      };
    }
    case 'refinement': {
      const concepts = (document.concepts as Array<{ id: string; canonical_name: string; context: string; aliases: string[]; fact_count: number }>).map(
        (concept) => ({ id: concept.id, canonicalName: concept.canonical_name, context: concept.context, aliases: concept.aliases, factCount: concept.fact_count }),
      );
      const decisions = await model.refineConcepts({ concepts, pruneThreshold: Number(document.prune_threshold) });
      return {
        decisions: decisions.map((decision) =>
          decision.type === 'merge'
            ? { type: 'merge', loser_id: decision.loserId, survivor_id: decision.survivorId, reason: decision.reason }
            : { type: 'remove_alias', concept_id: decision.conceptId, alias: decision.alias, reason: decision.reason },
        ),
      };
    }
    case 'posture': {
      const judgements = await model.judgePostures({ sentence: String(document.sentence), facts: document.facts as Array<{ id: string; content: string }> });
      return { judgements: judgements.map((judgement) => ({ fact_id: judgement.factId, posture: judgement.posture })) };
    }
    case 'summarization': {
      const concept = document.concept as { id: string; canonical_name: string; context: string; aliases: string[] };
      const slice = document.slice as { facts: Array<{ id: string; content: string }> };
      const { content } = await model.summarizeFacts({
        concept: { id: concept.id, canonicalName: concept.canonical_name, context: concept.context, aliases: concept.aliases },
        facts: slice.facts,
        maxTokens: Number(document.max_tokens),
      });
      return { content };
    }
    case 'synthesis': {
      const concept = document.concept as { id: string; canonical_name: string; context: string; aliases: string[] };
      const images = document.images as Array<{ id: string; caption: string }>;
      const output = await model.synthesizeConcept({
        concept: { id: concept.id, canonicalName: concept.canonical_name, context: concept.context, aliases: concept.aliases },
        summaries: (document.summaries as Array<{ id: string; content: string }>).map((summary) => ({ ...summary, factIds: [] })),
        facts: document.facts as Array<{ id: string; content: string }>,
        relatedConcepts: (document.related_concepts as Array<{ id: string; canonical_name: string; summary: string | null }>).map((related) => ({
          id: related.id,
          canonicalName: related.canonical_name,
          summary: related.summary,
        })),
        relatedSyntheses: [],
        images: images.map((image) => ({ factId: image.id, imageId: image.id, caption: image.caption })),
        maxImages: Number(document.max_images),
        maxTokens: 10_000,
        thinkingLevel: 'low',
      });
      return { content: output.content, image_ids: output.imageFactIds };
    }
  }
}

async function readBody(request: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function sendJson(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  response.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
}

/** Created on first use: the local embedder loads a large word table when it first embeds. */
let localModels: { chat: ChatModel; embedder: Embedder } | null = null;
function defaultLocalModels(): { chat: ChatModel; embedder: Embedder } {
  localModels ??= { chat: createLocalChatModel(), embedder: createLocalEmbedder() };
  return localModels;
}

export async function startOpenAIServer(options: OpenAIServerOptions = {}) {
  const queues: Record<OpenAIPath, Fault[]> = { chat: [...(options.faults?.chat ?? [])], embeddings: [...(options.faults?.embeddings ?? [])] };
  const standing: Partial<Record<OpenAIPath, Fault>> = {};
  const requests: Record<OpenAIPath, number> = { chat: 0, embeddings: 0 };
  /** Chat requests answered, by phase. */
  const phases: Partial<Record<ChatPhase, number>> = {};
  /** Every answered request: its phase (`embeddings` for an embedding request) and when it came and was answered (ms, epoch). */
  const answered: AnsweredCall[] = [];
  const bodies: ReceivedRequest[] = [];
  const timers = new Set<NodeJS.Timeout>();

  const answerChat = async (body: Record<string, unknown>, fault: Fault | undefined): Promise<{ status: number; body: unknown; phase: ChatPhase | null }> => {
    let content: string;
    let phase: ChatPhase | null = null;
    if (fault && 'malformedContent' in fault) content = '{"facts": [ this is not json';
    else if (fault && 'invalidContent' in fault) content = JSON.stringify(fault.invalidContent);
    else {
      const { document, image } = userDocument(body);
      phase = phaseOf(document);
      phases[phase] = (phases[phase] ?? 0) + 1;
      const answer = options.chat ? options.chat(document, phase) : await localChatAnswer(defaultLocalModels().chat, document, phase, image);
      content = JSON.stringify(answer);
    }
    return {
      status: 200,
      phase,
      body: {
        id: `chatcmpl-${requests.chat}`,
        object: 'chat.completion',
        created: Math.floor(Date.now() / 1000),
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
      },
    };
  };

  const answerEmbeddings = async (body: Record<string, unknown>, fault: Fault | undefined): Promise<{ status: number; body: unknown }> => {
    const input = body.input;
    const texts = typeof input === 'string' ? [input] : (input as string[]);
    if (options.refuseDimensions && body.dimensions !== undefined) {
      return { status: 400, body: { error: { message: 'This model does not support specifying dimensions.', type: 'invalid_request_error', param: null, code: null } } };
    }
    const maxTokens = options.maxInputTokens;
    const tooLong = maxTokens === undefined ? undefined : texts.map((text) => Buffer.byteLength(text, 'utf8')).find((tokens) => tokens > maxTokens);
    if (maxTokens !== undefined && tooLong !== undefined) {
      const message =
        `This model's maximum context length is ${maxTokens} tokens, however you requested ${tooLong} tokens (${tooLong} in your prompt; 0 for the completion). ` +
        'Please reduce your prompt; or completion length.';
      return { status: 400, body: { error: { message, type: 'invalid_request_error', param: null, code: null } } };
    }
    let vectors = options.embed ? await options.embed(texts, body) : await defaultLocalModels().embedder.embed(texts);
    if (fault && 'wrongDimensions' in fault) vectors = vectors.map(() => new Array<number>(fault.wrongDimensions).fill(0.5));
    let data = vectors.map((embedding, index) => ({ object: 'embedding', index, embedding }));
    if (fault && 'reversed' in fault) data = data.reverse();
    return { status: 200, body: { object: 'list', data, model: body.model, usage: { prompt_tokens: 0, total_tokens: 0 } } };
  };

  const server = createServer(async (request: IncomingMessage, response: ServerResponse) => {
    try {
      const pathname = new URL(request.url ?? '/', 'http://localhost').pathname;
      const path: OpenAIPath | null =
        pathname === '/v1/chat/completions' ? 'chat' : pathname === '/v1/embeddings' ? 'embeddings' : null;
      if (request.method !== 'POST' || path === null) {
        sendJson(response, 404, { error: { message: `no route ${request.method} ${pathname}`, type: 'invalid_request_error' } });
        return;
      }
      requests[path]++;
      const arrivedAt = Date.now();
      const raw = await readBody(request);
      const body = JSON.parse(raw) as Record<string, unknown>;
      bodies.push({ path, body, authorization: request.headers.authorization });
      if (options.apiKey !== undefined && request.headers.authorization !== `Bearer ${options.apiKey}`) {
        sendJson(response, 401, { error: { message: 'Incorrect API key provided', type: 'invalid_request_error', code: 'invalid_api_key' } });
        return;
      }
      const fault = queues[path].shift() ?? standing[path];
      if (fault && 'delayMs' in fault) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            timers.delete(timer);
            resolve();
          }, fault.delayMs);
          timers.add(timer);
        });
        if (response.destroyed || request.socket.destroyed) return;
      }
      if (fault && 'status' in fault) {
        const headers: Record<string, string> = fault.retryAfter !== undefined ? { 'retry-after': String(fault.retryAfter) } : {};
        if (fault.body !== undefined) response.writeHead(fault.status, { 'content-type': 'text/plain', ...headers }).end(fault.body);
        else sendJson(response, fault.status, { error: { message: `injected status ${fault.status}`, type: 'server_error' } }, headers);
        return;
      }
      if (fault && 'malformedBody' in fault) {
        response.writeHead(200, { 'content-type': 'application/json' }).end('<html>gateway</html>');
        return;
      }
      const answer = path === 'chat' ? await answerChat(body, fault) : { ...(await answerEmbeddings(body, fault)), phase: 'embeddings' as const };
      sendJson(response, answer.status, answer.body);
      answered.push({ phase: answer.phase, arrivedAt, answeredAt: Date.now() });
    } catch (error) {
      if (!response.headersSent) sendJson(response, 500, { error: { message: `test server: ${(error as Error).message}`, type: 'server_error' } });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    /** What clients take as base_url. */
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    phases,
    answered,
    bodies,
    queueFault(path: OpenAIPath, ...faults: Fault[]): void {
      queues[path].push(...faults);
    },
    setStandingFault(path: OpenAIPath, fault: Fault | null): void {
      if (fault === null) delete standing[path];
      else standing[path] = fault;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const timer of timers) clearTimeout(timer);
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type OpenAIServer = Awaited<ReturnType<typeof startOpenAIServer>>;

export interface AnsweredCall {
  /** null: a chat answer a fault made (no phase read). */
  phase: ChatPhase | 'embeddings' | null;
  arrivedAt: number;
  answeredAt: number;
}

/** For tests of the clients: expects the call to fail with a ModelCallError, and returns it. */
export async function modelErrorOf(promise: Promise<unknown>): Promise<ModelCallError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ModelCallError) return error;
    throw error;
  }
  throw new Error('expected a ModelCallError');
}
