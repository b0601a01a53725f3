import { z } from 'zod';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, Tool, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import type { Trace } from '../../app/access.js';
import type { Application } from '../../app/application.js';
import { withCallContext } from '../../app/callContext.js';
import type { AppContext } from '../../app/appContext.js';
import type { Permission, Principal } from '../../auth/rbac.js';
import { DomainError } from '../../domain/decider.js';
import { runeLength } from '../../util/codePoints.js';
import { isUuid } from '../../util/uuid.js';
import { isPlainObject } from '../../util/objects.js';
import { ReadModelsBehindError } from '../../app/errors.js';
import { IDEMPOTENCY_KEY_PATTERN, MAX_IDEMPOTENCY_KEY_CHARS, runIdempotently } from '../../app/idempotency.js';
import { searchModes } from '../../search/hybrid.js';
import { MAX_OFFSET } from '../../read/paging.js';
import { notFoundDuringRebuild, rebuildingReadModels } from '../../read/projections.js';
import { ReportTooLargeError } from '../../domain/report/decider.js';
import { ConcurrencyError, InvalidEventError } from '../../eventstore/port.js';
import { InvalidSearchRequestError, VectorSearchUnavailableError } from '../../search/port.js';

/** Who calls a tool and with what: the same application layer and Principal a REST route has. */
export interface ToolCall {
  app: Application;
  context: Pick<AppContext, 'config' | 'log' | 'audit' | 'projections' | 'idempotency'>;
  principal: Principal;
  trace: Trace;
  clientAddress?: string;
}

/** A tool as the server registers it; the schema, description and tools/list entry are built once per process. */
export interface McpTool {
  readonly name: string;
  /** Its tools/list entry, as the SDK would list it (draft-7 JSON Schema of the input). */
  readonly listing: Tool;
  register(server: McpServer, call: ToolCall): void;
}

/** The argument every repository tool takes. */
export const repositoryArgument = z
  .string()
  .min(1)
  .max(200)
  .describe('The repository to act in: its id (UUID) or slug, as getRepositories lists them.');

export const limitArgument = (defaultLimit: number, max: number) =>
  z.number().int().min(1).max(max).optional().describe(`How many items to return (1 to ${max}; default ${defaultLimit}).`);
/**
 * A string of at most `max` characters counted as JSON Schema's maxLength and the domain count
 * them, in code points (zod's own max counts UTF-16 units: an emoji would count twice).
 */
export const textOfAtMost = (max: number) =>
  z
    .string()
    .refine((value) => runeLength(value) <= max, { message: `must be at most ${max} characters` })
    .meta({ maxLength: max });
export const offsetArgument = z.number().int().min(0).max(MAX_OFFSET).optional().describe('How many items to skip, for the next page (default 0).');
export const conceptArgument = textOfAtMost(500).min(1).describe('The concept: its id (UUID), canonical name or alias (case-insensitive).');
export const contextArgument = textOfAtMost(200)
  .min(1)
  .optional()
  .describe('The concept context (e.g. "biology") to pick among concepts that share a name; not only whitespace. With a concept id, leave it out (it must be the concept\'s own).');
/** `mode` of the search tools, as of the search routes: lexical answers by words alone, with no fallback to explain. */
export const searchModeArgument = z
  .enum(searchModes)
  .optional()
  .describe('hybrid (default: words and meaning, falling back to lexical when it cannot run; `fallback_reason` says why) or lexical (words only).');

/**
 * An id the tool looks up: a UUID, as the REST routes' `format: uuid` path parameters take it, so
 * a malformed one is `invalid` (REST: 400) rather than answered as an unknown id.
 */
export const idArgument = (what: string) =>
  z
    .string()
    .refine(isUuid, { message: 'must be a UUID' })
    .meta({ format: 'uuid' })
    .describe(`The ${what} id (UUID).`);

/**
 * The `idempotency_key` of a creating tool: the rules of REST's `Idempotency-Key` header (without
 * its structured-field quotes, which an argument has no need of), one key space per user for both.
 */
const idempotencyKeyArgument = z
  .string()
  .min(1)
  .max(MAX_IDEMPOTENCY_KEY_CHARS)
  .regex(IDEMPOTENCY_KEY_PATTERN, { message: 'must be printable ASCII characters without spaces' })
  .optional()
  .describe(
    `Optional: a key of your choice (1 to ${MAX_IDEMPOTENCY_KEY_CHARS} printable ASCII characters without spaces, e.g. a UUID) that makes a retry safe: ` +
      'the same key with the same arguments within 24 hours answers the first result again instead of creating another; with other arguments it is an error.',
  );
const idempotencyKeyInput = z.object({ idempotency_key: idempotencyKeyArgument });
/** Set in the `_meta` of a result given again for a key, as REST's `Idempotent-Replayed: true`. */
export const REPLAYED_META = 'idempotent-replayed';

/** Compact JSON for a model: no indentation (tokens cost), nulls kept (they say "none"). */
const asText = (value: unknown): string => JSON.stringify(value);

/** The result as JSON text, and as structuredContent (an object: a list goes under `items`). */
function toolResult(value: unknown): CallToolResult {
  const structured = Array.isArray(value) ? { items: value } : typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  return { content: [{ type: 'text', text: asText(value) }], ...(structured ? { structuredContent: structured } : {}) };
}

const toolError = (message: string): CallToolResult => ({ isError: true, content: [{ type: 'text', text: message }] });

/**
 * The one mapping from application-layer failures to tool errors, as src/api/errors.ts maps them
 * to HTTP: the message is the answer (a refused permission reads "permission denied: <permission>";
 * a missing repository, concept or report "... not found"); anything unexpected is logged and
 * answered "internal error", never with its details.
 */
export async function toolFailure(error: unknown, context: Pick<AppContext, 'log'> & { projections: Pick<AppContext['projections'], 'status'> }): Promise<CallToolResult> {
  const { log } = context;
  if (error instanceof DomainError) {
    if (error.code === 'not_found' || error.code === 'gone') {
      const rebuilding = await rebuildingReadModels(context);
      if (rebuilding.length > 0) return toolError(`unavailable: ${notFoundDuringRebuild(error.message, rebuilding)}`);
    }
    const prefix = error.code === 'not_found' || error.code === 'gone' ? 'not found: ' : error.code === 'conflict' ? 'conflict: ' : error.code === 'invalid' ? 'invalid: ' : '';
    return toolError(error.code === 'forbidden' ? error.message : `${prefix}${error.message}`);
  }
  if (error instanceof ReportTooLargeError) return toolError(`invalid: ${error.message}`);
  if (error instanceof ConcurrencyError) return toolError('conflict: the resource was changed concurrently; retry');
  if (error instanceof InvalidEventError || error instanceof InvalidSearchRequestError) return toolError(`invalid: ${error.message}`);
  if (error instanceof VectorSearchUnavailableError) return toolError(error.message);
  if (error instanceof ReadModelsBehindError) return toolError(`unavailable: ${error.message}`);
  log.error({ err: error }, 'MCP tool failed');
  return toolError('internal error');
}

interface ToolSpec<Schema extends z.ZodObject> {
  name: string;
  title: string;
  description: string;
  input: Schema;
  /** False for tools that change the repository (MCP annotation `readOnlyHint`). */
  readOnly: boolean;
  /**
   * The tool creates something a retried call would create twice: it takes an optional
   * `idempotency_key` (idempotencyKeyArgument), as REST's creating routes take `Idempotency-Key`;
   * `permission` is what the creation needs in its `repository`, checked before the key is looked at.
   */
  idempotent?: { permission: Permission };
  run(call: ToolCall, args: z.output<Schema>): Promise<unknown>;
}

/** The repository a creating tool's arguments name: each creating tool makes something in the repository of its `repository` argument. */
function repositoryOf(args: unknown): string {
  const repository = isPlainObject(args) ? args.repository : undefined;
  if (typeof repository !== 'string') throw new Error('a creating tool takes a repository argument');
  return repository;
}

/**
 * A tool: the schema is validated by the SDK, then again here into typed arguments (cheap, and
 * no cast between the SDK's schema types and ours); the run is one application-layer call inside
 * the call context the permission audit reads.
 */
export function defineTool<Schema extends z.ZodObject>(spec: ToolSpec<Schema>): McpTool {
  const annotations: ToolAnnotations = { title: spec.title, readOnlyHint: spec.readOnly, destructiveHint: false, openWorldHint: false };
  // What the SDK validates and tools/list shows: the tool's arguments, and a creating tool's key.
  const input: z.ZodObject = spec.idempotent ? spec.input.extend(idempotencyKeyInput.shape) : spec.input;
  const { properties = {}, ...inputJsonSchema } = z.toJSONSchema(input, { target: 'draft-7', io: 'input' });
  // A property schema may be `true` in JSON Schema; zod never makes one, and the tool type wants objects.
  const propertySchemas: Record<string, object> = {};
  for (const [key, schema] of Object.entries(properties)) if (typeof schema === 'object') propertySchemas[key] = schema;
  return {
    name: spec.name,
    listing: {
      name: spec.name,
      title: spec.title,
      description: spec.description,
      inputSchema: { ...inputJsonSchema, type: 'object', properties: propertySchemas },
      annotations,
      // What McpServer lists for a tool registered without a task handler.
      execution: { taskSupport: 'forbidden' },
    },
    register(server, call) {
      // The SDK's callback type is not resolvable for a generic schema: it sees the erased one, and the parses below type the arguments.
      server.registerTool(spec.name, { title: spec.title, description: spec.description, inputSchema: input, annotations }, async (rawArguments) => {
        const parsed = spec.input.safeParse(rawArguments);
        if (!parsed.success) return toolError(`invalid: ${z.prettifyError(parsed.error)}`);
        // A creating tool's key, apart: the tool runs with its own arguments, and what it asks leaves the key out.
        const keyed = spec.idempotent ? idempotencyKeyInput.safeParse(rawArguments) : undefined;
        if (keyed?.success === false) return toolError(`invalid: ${z.prettifyError(keyed.error)}`);
        return withCallContext(
          {
            transport: 'mcp',
            operation: `tool ${spec.name}`,
            principal: call.principal,
            clientAddress: call.clientAddress,
            requestId: call.trace.correlationId ?? undefined,
            audit: call.context.audit,
          },
          async () => {
            try {
              const key = keyed?.data?.idempotency_key;
              if (key === undefined || spec.idempotent === undefined) return toolResult(await spec.run(call, parsed.data));
              // What the call asks, its tool first: the same key sent to another tool, or to a REST route, is a mismatch.
              // Its repository by the id the permission check resolved: named by its slug or its id, the call asks the same.
              const request = (repositoryId: string | null) => ['mcp', spec.name, { ...parsed.data, repository: repositoryId }];
              const caller = { principal: call.principal, permission: spec.idempotent.permission, repository: repositoryOf(parsed.data) };
              const { replayed, value } = await runIdempotently(call.context.idempotency, caller, key, request, () => spec.run(call, parsed.data));
              return replayed ? { ...toolResult(value), _meta: { [REPLAYED_META]: true } } : toolResult(value);
            } catch (error) {
              return toolFailure(error, call.context);
            }
          },
        );
      });
    },
  };
}
