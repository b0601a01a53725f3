import { LATEST_PROTOCOL_VERSION, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { isPlainObject } from '../util/objects.js';

/**
 * The MCP protocol revisions this endpoint serves, and the translation between them and the SDK
 * (docs/mcp.md, "Protocol versions"). SDK 1.32.2 knows revisions up to 2025-11-25; a 2026-07-28
 * request is validated here and handed to the SDK as 2025-11-25, whose tools/list and tools/call
 * are the same messages; what 2026-07-28 adds to a result (`resultType`, list caching hints,
 * `serverInfo` in `_meta`) is added on the way out.
 */
const MODERN_PROTOCOL_VERSION = '2026-07-28';
export const SUPPORTED_PROTOCOL_VERSIONS = [MODERN_PROTOCOL_VERSION, '2025-11-25', '2025-06-18'] as const;
export type SupportedProtocolVersion = (typeof SUPPORTED_PROTOCOL_VERSIONS)[number];

/** The version the SDK is told a 2026-07-28 request speaks: the newest it knows. */
const SDK_PROTOCOL_VERSION = LATEST_PROTOCOL_VERSION;

export const SERVER_INFO = { name: 'factlog', version: '1' } as const;

/** What initialize and server/discover both declare: the tool list changes only with a release. */
export const SERVER_CAPABILITIES = { tools: { listChanged: false } } as const;

/** JSON-RPC error codes of the 2026-07-28 revision (its server-error range -32020..-32099). */
const HEADER_MISMATCH = -32020;
const UNSUPPORTED_PROTOCOL_VERSION = -32022;
/** The SDK's own code for transport-level refusals; older clients know it. */
export const TRANSPORT_ERROR = -32000;
/** JSON-RPC 2.0's codes for a body that is not JSON, and for one that is no valid request. */
export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;

const META_PROTOCOL_VERSION = 'io.modelcontextprotocol/protocolVersion';
const META_SERVER_INFO = 'io.modelcontextprotocol/serverInfo';
/** How long a 2026-07-28 client may cache tools/list: the list only changes with a new release. */
const TOOL_LIST_TTL_MS = 3_600_000;

function isSupportedVersion(version: string): version is SupportedProtocolVersion {
  return (SUPPORTED_PROTOCOL_VERSIONS as readonly string[]).includes(version);
}

/** A JSON-RPC message as it arrived: only the fields this layer reads. */
export interface JsonRpcMessage {
  jsonrpc?: unknown;
  id?: string | number | null;
  method?: unknown;
  params?: { name?: unknown; protocolVersion?: unknown; _meta?: Record<string, unknown> } & Record<string, unknown>;
  result?: unknown;
  error?: unknown;
}

export interface JsonRpcErrorBody {
  jsonrpc: '2.0';
  id: string | number | null;
  error: { code: number; message: string; data?: unknown };
}

export const jsonRpcError = (code: number, message: string, data?: unknown, id: string | number | null = null): JsonRpcErrorBody => ({
  jsonrpc: '2.0',
  id,
  error: { code, message, ...(data === undefined ? {} : { data }) },
});

/** The messages of a body: one object, or a batch (older revisions allow batches). */
export function messagesOf(body: unknown): JsonRpcMessage[] {
  if (Array.isArray(body)) return body.filter((item): item is JsonRpcMessage => typeof item === 'object' && item !== null);
  return typeof body === 'object' && body !== null ? [body as JsonRpcMessage] : [];
}

/** A refusal before the SDK sees the request: the HTTP status and the JSON-RPC error body. */
export interface ProtocolRefusal {
  status: number;
  body: JsonRpcErrorBody;
}

/**
 * The revision a request speaks, from its `MCP-Protocol-Version` header. No header is what
 * 2025-03-26 clients send (and any client's initialize): the SDK's default applies. An explicit
 * version outside SUPPORTED_PROTOCOL_VERSIONS is refused with 400.
 */
export function requestedVersion(header: string | undefined): { version: SupportedProtocolVersion | null } | ProtocolRefusal {
  if (header === undefined || header === '') return { version: null };
  if (isSupportedVersion(header)) return { version: header };
  return {
    status: 400,
    body: jsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, `Unsupported protocol version: ${header} (supported versions: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`, {
      supported: SUPPORTED_PROTOCOL_VERSIONS,
      requested: header,
    }),
  };
}

/** `=?base64?...?=` is how a 2026-07-28 client sends an `Mcp-Name` that is not plain ASCII. */
function decodeHeaderValue(value: string): string {
  const sentinel = /^=\?base64\?([A-Za-z0-9+/=]*)\?=$/.exec(value);
  return sentinel ? Buffer.from(sentinel[1], 'base64').toString('utf8') : value;
}

/**
 * The 2026-07-28 request-metadata rules: `Mcp-Method`, `Mcp-Name` and the body's
 * `_meta` protocol version must agree with the body and the version header (400 HeaderMismatch).
 * Each is checked when present; older clients send none of them.
 */
export function checkRequestMetadata(
  messages: JsonRpcMessage[],
  headers: { version: string | undefined; method: string | undefined; name: string | undefined },
): ProtocolRefusal | null {
  const mismatch = (message: string, id: string | number | null = null): ProtocolRefusal => ({ status: 400, body: jsonRpcError(HEADER_MISMATCH, message, undefined, id) });
  for (const message of messages) {
    const id = message.id ?? null;
    const bodyVersion = message.params?._meta?.[META_PROTOCOL_VERSION];
    if (bodyVersion !== undefined) {
      if (typeof bodyVersion !== 'string' || !isSupportedVersion(bodyVersion)) {
        return {
          status: 400,
          body: jsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, `Unsupported protocol version: ${String(bodyVersion)}`, { supported: SUPPORTED_PROTOCOL_VERSIONS, requested: bodyVersion }, id),
        };
      }
      if (headers.version !== bodyVersion) return mismatch(`MCP-Protocol-Version header (${headers.version ?? 'absent'}) does not match _meta protocol version ${bodyVersion}`, id);
    }
    if (headers.method !== undefined && headers.method !== message.method) return mismatch(`Mcp-Method header (${headers.method}) does not match the body's method`, id);
    if (headers.name !== undefined && message.method === 'tools/call' && decodeHeaderValue(headers.name) !== message.params?.name) {
      return mismatch(`Mcp-Name header does not match the tool named in the body`, id);
    }
  }
  return null;
}

/** What a 2026-07-28 request may call here: its core methods this server implements (no resources, prompts or subscriptions). */
const MODERN_METHODS = new Set(['tools/list', 'tools/call', 'server/discover']);
const METHOD_NOT_FOUND = -32601;

/** 2026-07-28: a method the server does not implement is 404 with -32601 (earlier revisions: a JSON-RPC error from the SDK). */
export function checkModernMethods(messages: JsonRpcMessage[], version: SupportedProtocolVersion | null): ProtocolRefusal | null {
  if (version !== MODERN_PROTOCOL_VERSION) return null;
  const unknown = messages.find((message) => message.id !== undefined && (typeof message.method !== 'string' || !MODERN_METHODS.has(message.method)));
  if (!unknown) return null;
  return { status: 404, body: jsonRpcError(METHOD_NOT_FOUND, `Method not found: ${String(unknown.method)}`, undefined, unknown.id ?? null) };
}

export const INVALID_PARAMS = -32602;

/** What is wrong with a request's params, for the methods whose params the SDK checks with its schema library. */
function paramsProblem(method: unknown, params: unknown): string | null {
  if (method === 'tools/call') {
    if (!isPlainObject(params)) return 'params must be an object with the tool name and its arguments';
    if (typeof params.name !== 'string') return 'params.name must be the name of a tool (a string)';
    if (params.arguments !== undefined && !isPlainObject(params.arguments)) return 'params.arguments must be an object of the tool arguments';
    return null;
  }
  if (method === 'initialize') {
    if (!isPlainObject(params)) return 'params must be an object with protocolVersion, capabilities and clientInfo';
    if (typeof params.protocolVersion !== 'string') return 'params.protocolVersion must be a protocol version (a string)';
    if (!isPlainObject(params.capabilities)) return 'params.capabilities must be an object';
    const client = params.clientInfo;
    if (!isPlainObject(client) || typeof client.name !== 'string' || typeof client.version !== 'string') return 'params.clientInfo must be an object with name and version (strings)';
    return null;
  }
  return null;
}

/**
 * A `tools/call` whose params are not `{name: string, arguments?: object}`, or an `initialize`
 * without its protocol version, capabilities and client, is -32602 here, with a sentence: the
 * SDK would answer -32603 (internal error) with its schema library's issue list.
 */
export function checkRequestParams(messages: JsonRpcMessage[]): ProtocolRefusal | null {
  for (const message of messages) {
    if (message.id === undefined) continue;
    const problem = paramsProblem(message.method, message.params);
    if (problem) return { status: 400, body: jsonRpcError(INVALID_PARAMS, `Invalid params: ${problem}`, undefined, message.id) };
  }
  return null;
}

/** The answer to 2026-07-28's `server/discover`: what this server speaks, before any other call. */
export function discoverResult() {
  return {
    supportedVersions: [...SUPPORTED_PROTOCOL_VERSIONS],
    capabilities: SERVER_CAPABILITIES,
    serverInfo: SERVER_INFO,
    resultType: 'complete',
    _meta: { [META_SERVER_INFO]: SERVER_INFO },
  };
}

/**
 * How the reply is framed, from `Accept`: the SDK answers JSON or an event stream, and insists
 * the client accepts both. Here the client's preference decides: the media type with the higher
 * q-value, on a tie the one listed first; `*` and `application/*` count as JSON. Null: neither is
 * acceptable (406).
 */
export function replyFormat(accept: string | undefined): 'json' | 'sse' | null {
  if (accept === undefined || accept.trim() === '') return 'json';
  let best: { format: 'json' | 'sse'; quality: number } | null = null;
  for (const part of accept.split(',')) {
    const [rawType, ...parameters] = part.split(';').map((piece) => piece.trim().toLowerCase());
    const qualityParameter = parameters.find((parameter) => parameter.startsWith('q='));
    const quality = qualityParameter === undefined ? 1 : Number(qualityParameter.slice(2));
    if (!Number.isFinite(quality) || quality <= 0) continue;
    const format = rawType === 'text/event-stream' ? 'sse' : ['application/json', 'application/*', '*/*'].includes(rawType) ? 'json' : null;
    if (format !== null && (best === null || quality > best.quality)) best = { format, quality };
  }
  return best?.format ?? null;
}

/**
 * What the SDK is told and what the answers are made into, for one request: the version header
 * the SDK accepts, and a rewrite of each outgoing response (initialize answers the revision the
 * client asked for when this server supports it; 2026-07-28 results carry `resultType`, the
 * list caching hints and `serverInfo`).
 */
export function versionBridge(messages: JsonRpcMessage[], version: SupportedProtocolVersion | null) {
  const methods = new Map<string | number, string>();
  const initializeVersions = new Map<string | number, string>();
  for (const message of messages) {
    if (message.id === undefined || message.id === null || typeof message.method !== 'string') continue;
    methods.set(message.id, message.method);
    const asked = message.params?.protocolVersion;
    if (message.method === 'initialize' && typeof asked === 'string') initializeVersions.set(message.id, asked);
  }
  const modern = version === MODERN_PROTOCOL_VERSION;
  return {
    sdkVersionHeader: version === null ? undefined : modern ? SDK_PROTOCOL_VERSION : version,
    rewrite(outgoing: JSONRPCMessage): JSONRPCMessage {
      if (!('result' in outgoing)) return outgoing;
      const method = methods.get(outgoing.id);
      let result = outgoing.result;
      const askedAtInitialize = initializeVersions.get(outgoing.id);
      if (method === 'initialize') {
        result = { ...result, protocolVersion: askedAtInitialize !== undefined && isSupportedVersion(askedAtInitialize) ? askedAtInitialize : SDK_PROTOCOL_VERSION };
      }
      if (modern || (method === 'initialize' && askedAtInitialize === MODERN_PROTOCOL_VERSION)) {
        result = {
          ...result,
          resultType: 'complete',
          ...(method === 'tools/list' ? { ttlMs: TOOL_LIST_TTL_MS, cacheScope: 'private' } : {}),
          _meta: { ...result._meta, [META_SERVER_INFO]: SERVER_INFO },
        };
      }
      return result === outgoing.result ? outgoing : { ...outgoing, result };
    },
  };
}
