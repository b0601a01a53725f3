import { errorReplySchema } from './errors.js';

/** JSON schemas shared by several routes. */
export const userSchema = {
  type: 'object',
  required: ['id', 'email', 'name'],
  properties: { id: { type: 'string' }, email: { type: 'string' }, name: { type: 'string' } },
} as const;

export const idParam = (name: string) =>
  ({ type: 'object', required: [name], properties: { [name]: { type: 'string', minLength: 1, maxLength: 200 } } }) as const;

export const pagingQuery = {
  limit: { type: 'integer', minimum: 1, maximum: 500, default: 50 },
  offset: { type: 'integer', minimum: 0, default: 0 },
} as const;

/** Replies for the errors every authenticated route can give. */
export const errorReplies = {
  400: errorReplySchema,
  401: errorReplySchema,
  403: errorReplySchema,
  404: errorReplySchema,
  409: errorReplySchema,
} as const;

/** The reply of a paged list: `{items, total}`. */
export const listReply = <Item extends object>(item: Item) =>
  ({ type: 'object', required: ['items', 'total'], properties: { items: { type: 'array', items: item }, total: { type: 'integer' } } }) as const;

export const bearerSecurity = [{ bearerAuth: [] as string[] }];

export const isoDate = (value: Date | string | null | undefined): string | null =>
  value === null || value === undefined ? null : new Date(value).toISOString();

/** `mode` of a search route: hybrid (the default) falls back to lexical when it cannot run. */
export const searchModeQuery = { type: 'string', enum: ['hybrid', 'lexical'], default: 'hybrid' } as const;

/** The reply of a search route: a page of items, the query, and which mode answered. */
export const searchReply = <Item extends object>(item: Item) =>
  ({
    type: 'object',
    required: ['items', 'total', 'query', 'mode', 'fallback_reason'],
    properties: {
      items: { type: 'array', items: item },
      total: { type: 'integer' },
      query: { type: 'string' },
      mode: { type: 'string', enum: ['hybrid', 'lexical'], description: 'the mode that answered' },
      fallback_reason: { type: ['string', 'null'], description: 'why hybrid was asked for but lexical answered' },
    },
  }) as const;
