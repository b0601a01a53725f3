import { jobStates } from '../pipeline/jobs.js';
import { MAX_OFFSET } from '../read/paging.js';
import { sourceStatuses } from '../read/sources.js';
import { searchModes } from '../search/hybrid.js';
import { errorReply, errorReplySchema } from './errors.js';

/** JSON schemas shared by several routes. */
export const userSchema = {
  type: 'object',
  required: ['id', 'email', 'name'],
  properties: { id: { type: 'string' }, email: { type: 'string' }, name: { type: 'string' } },
} as const;

export const idParam = (name: string) =>
  ({ type: 'object', required: [name], properties: { [name]: { type: 'string', minLength: 1, maxLength: 200 } } }) as const;

/**
 * A `context` (or `other_context`) query parameter, as every route that takes one takes it. One of
 * only whitespace is refused by the read layer (`namedContext`, a 400 in its words, as MCP's tools
 * get them), not by a pattern here, whose refusal would be ajv's.
 */
export const contextParameter = (description: string) =>
  ({ type: 'string', minLength: 1, maxLength: 200, description: `${description}; matched without case, padding trimmed; only whitespace is a 400` }) as const;

export const pagingQuery = {
  limit: { type: 'integer', minimum: 1, maximum: 500, default: 50 },
  // Bounded: `1e20` and 2^63 are integers to JSON Schema but overflow PostgreSQL's bigint (a 400 here, not a 500 there).
  offset: { type: 'integer', minimum: 0, maximum: MAX_OFFSET, default: 0 },
} as const;

/**
 * Replies for the errors every authenticated route can give, each with what it means there
 * (docs/api.md, "Errors"); a route whose status means more or something else says so over these.
 */
export const errorReplies = {
  400: errorReply('a parameter, query or body that fails its schema or a rule of the domain'),
  401: errorReply('no bearer token, or one that is malformed, expired or revoked'),
  403: errorReply('the caller lacks the permission the route needs (on a repository: one it holds another permission on, so may see)'),
  404: errorReply('the repository or the resource the path names does not exist (or was deleted), or a repository the caller holds no permission on (it is not told the repository exists)'),
  409: errorReply('a conflict with the current state: a name taken, a concurrent change'),
} as const;

/** The reply of a paged list: `{items, total}`. */
export const listReply = <Item extends object>(item: Item) =>
  ({ type: 'object', required: ['items', 'total'], properties: { items: { type: 'array', items: item }, total: { type: 'integer' } } }) as const;

export const bearerSecurity = [{ bearerAuth: [] as string[] }];

/**
 * Whether a route takes a bearer token: its schema names a `security` requirement (bearerSecurity).
 * One rule for the guard, which ignores the Authorization header of any other route, and for the
 * OpenAPI document, which lists 401 only where the guard can answer it.
 */
export function takesBearerToken(schema: unknown): boolean {
  const security = (schema as { security?: unknown } | undefined)?.security;
  return Array.isArray(security) && security.length > 0;
}

/** `mode` of a search route: hybrid (the default) falls back to lexical when it cannot run. */
const searchModeQuery = { type: 'string', enum: [...searchModes], default: 'hybrid' } as const;

/** The query string of a search route: `query`, the route's own filters, `mode` and the page. */
export const searchQuerystring = <Filters extends Record<string, object>>(filters: Filters) =>
  ({
    type: 'object',
    additionalProperties: false,
    properties: { query: { type: 'string', maxLength: 1000, default: '' }, ...filters, mode: searchModeQuery, ...pagingQuery },
  }) as const;

/** The reply of a search route: a page of items, the query, and which mode answered. */
export const searchReply = <Item extends object>(item: Item) =>
  ({
    type: 'object',
    required: ['items', 'total', 'query', 'mode', 'fallback_reason'],
    properties: {
      items: { type: 'array', items: item },
      total: { type: 'integer' },
      query: { type: 'string' },
      mode: { type: 'string', enum: [...searchModes], description: 'the mode that answered' },
      fallback_reason: { type: ['string', 'null'], description: 'why hybrid was asked for but lexical answered' },
    },
  }) as const;

/** `{repoID}` and one uuid-shaped id of a resource in it. */
export const repositoryItemParams = (name: string) =>
  ({
    type: 'object',
    required: ['repoID', name],
    properties: { repoID: { type: 'string', minLength: 1 }, [name]: { type: 'string', format: 'uuid' } },
  }) as const;

/** `{repoID}` and a concept named by id, canonical name or alias (the concept and summary routes). */
export const conceptParams = {
  type: 'object',
  required: ['repoID', 'conceptID'],
  properties: { repoID: { type: 'string', minLength: 1 }, conceptID: { type: 'string', minLength: 1, maxLength: 500 } },
} as const;

export type ConceptParams = { repoID: string; conceptID: string };

/** The concept a request names: `{repository, concept, context}` of the read functions. */
export const namedConcept = (params: ConceptParams, query: { context?: string }) => ({ repository: params.repoID, concept: params.conceptID, context: query.context });

/** The resources several routes answer with (their JSON shapes come from src/read/present.ts and src/read/*.ts). */
export const factSchema = {
  type: 'object',
  required: ['id', 'content', 'content_hash', 'fact_kind', 'status'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    content: { type: 'string' },
    content_hash: { type: 'string' },
    fact_kind: { type: 'string', enum: ['text', 'image'] },
    status: { type: 'string', enum: ['new', 'stable', 'merged'] },
    merged_into: { type: ['string', 'null'] },
    image_id: { type: ['string', 'null'] },
    promptset_hash: { type: 'string' },
    model_id: { type: ['string', 'null'] },
    score: { type: 'number', description: 'relevance to the query (search only)' },
    chunk_index: { type: 'integer', description: 'chunk of the source it came from (per-source lists only)' },
    source_text: { type: 'string', description: 'the original span (per-source lists only)' },
    created_at: { type: 'string' },
  },
} as const;

export const conceptSummarySchema = {
  type: 'object',
  required: ['id', 'canonical_name', 'context', 'status', 'fact_count'],
  properties: {
    id: { type: 'string' },
    canonical_name: { type: 'string' },
    context: { type: 'string' },
    ontology_class: { type: ['string', 'null'] },
    status: { type: 'string', enum: ['active', 'merged'] },
    merged_into: { type: ['string', 'null'] },
    fact_count: { type: 'integer' },
    aliases: { type: 'array', items: { type: 'string' } },
    source_id: { type: ['string', 'null'] },
    embedding_model: { type: ['string', 'null'] },
    score: { type: 'number', description: 'relevance to the query (search only; fused score in hybrid mode)' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

/** The replies of routes that resolve a concept by name: a 409 also lists the concepts the name may mean and their contexts. */
export const conceptErrorReplies = {
  ...errorReplies,
  409: {
    description: '`ambiguous_concept`: several concepts answer to the name (`contexts` and `candidates` list them), or a conflict with the current state',
    type: 'object',
    required: ['error', 'message'],
    properties: {
      ...errorReplySchema.properties,
      contexts: { type: 'array', items: { type: 'string' } },
      candidates: {
        type: 'array',
        items: {
          type: 'object',
          required: ['id', 'canonical_name', 'context'],
          properties: { id: { type: 'string' }, canonical_name: { type: 'string' }, context: { type: 'string' } },
        },
      },
    },
  },
} as const;

/** How a source is named wherever a fact or a concept points at one. */
export const sourceReferenceProperties = {
  url: { type: ['string', 'null'] },
  doi: { type: ['string', 'null'] },
  filename: { type: ['string', 'null'] },
  title: { type: ['string', 'null'] },
} as const;

export const sourceSchema = {
  type: 'object',
  required: ['id', 'repository_id', 'origin', 'status'],
  properties: {
    id: { type: 'string' },
    repository_id: { type: 'string' },
    origin: { type: 'string', enum: ['url', 'doi', 'upload'] },
    ...sourceReferenceProperties,
    status: { type: 'string', enum: [...sourceStatuses] },
    failure: { type: ['string', 'null'], description: 'why the source failed, when status is failed' },
    published_at: { type: ['string', 'null'] },
    kind: { type: ['string', 'null'], description: 'html, pdf, markdown or text once fetched' },
    content_type: { type: ['string', 'null'] },
    final_url: { type: ['string', 'null'] },
    body_bytes: { type: ['integer', 'null'] },
    fact_count: { type: 'integer' },
    model_id: { type: ['string', 'null'] },
    created_by: { type: 'string' },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
  },
} as const;

export const jobSchema = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    kind: { type: 'string' },
    repository_id: { type: ['string', 'null'] },
    subject_id: { type: 'string' },
    source_id: { type: ['string', 'null'] },
    report_id: { type: ['string', 'null'] },
    trigger_event_id: { type: 'string' },
    state: { type: 'string', enum: [...jobStates] },
    attempts: { type: 'integer' },
    max_attempts: { type: 'integer' },
    last_error: { type: ['string', 'null'] },
    next_attempt_at: { type: ['string', 'null'] },
    created_at: { type: 'string' },
    updated_at: { type: 'string' },
    finished_at: { type: ['string', 'null'] },
  },
} as const;
