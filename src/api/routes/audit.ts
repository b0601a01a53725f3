import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import type { AuditFilters } from '../../read/audit.js';
import { requireUser } from '../guard.js';
import { bearerSecurity, errorReplies, idParam, listReply, pagingQuery } from '../schemas.js';

const auditEntrySchema = {
  type: 'object',
  required: ['id', 'occurred_at', 'user_id', 'credential_kind', 'permission', 'domain', 'allowed', 'transport', 'operation'],
  properties: {
    id: { type: 'string' },
    occurred_at: { type: 'string', format: 'date-time' },
    user_id: { type: 'string' },
    credential_kind: { type: 'string', enum: ['session', 'oauth', 'api_key'] },
    credential_id: { type: 'string', description: 'the session, OAuth grant or API key (never a secret)' },
    permission: { type: 'string' },
    domain: { type: 'string', description: 'system or repository:<id>' },
    repository_id: { type: ['string', 'null'] },
    allowed: { type: 'boolean' },
    transport: { type: 'string', enum: ['rest', 'mcp', 'cli', 'web'] },
    operation: { type: 'string', description: 'the route (GET /api/v1/...) or tool (tool searchFacts)' },
    client_address: { type: ['string', 'null'] },
    request_id: { type: ['string', 'null'] },
  },
} as const;

const filtersQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    user_id: { type: 'string', minLength: 1, maxLength: 200 },
    credential_kind: { type: 'string', enum: ['session', 'oauth', 'api_key'] },
    permission: { type: 'string', minLength: 3, maxLength: 100 },
    allowed: { type: 'boolean' },
    transport: { type: 'string', enum: ['rest', 'mcp', 'cli', 'web'] },
    since: { type: 'string', format: 'date-time', description: 'rows at or after (RFC 3339)' },
    until: { type: 'string', format: 'date-time', description: 'rows before (RFC 3339)' },
    cursor: { type: 'string', maxLength: 200, description: 'the `next_cursor` of the previous page (not with `offset`): the rows after its last one, however many were added meanwhile' },
    ...pagingQuery,
  },
} as const;

const auditPage = {
  ...listReply(auditEntrySchema),
  required: ['items', 'total', 'next_cursor'],
  properties: {
    ...listReply(auditEntrySchema).properties,
    next_cursor: { type: ['string', 'null'], description: 'pass as `cursor` for the next page; null on the last' },
  },
} as const;

/** The permission audit (docs/auth.md, "Permission audit"): the service's, and one repository's. */
export const auditRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['admin'], security: bearerSecurity };
  const { audit } = createApplication(context);

  app.get<{ Querystring: AuditFilters }>(
    '/api/v1/admin/audit',
    { schema: { summary: 'List permission decisions of the whole service, newest first', ...schema, querystring: filtersQuery, response: { 200: { ...auditPage, description: 'a page of the decisions, newest first' }, ...errorReplies } } },
    async (request) => audit.listAudit(requireUser(request), request.query),
  );

  app.get<{ Params: { repoID: string }; Querystring: AuditFilters }>(
    '/api/v1/repositories/:repoID/audit',
    {
      schema: {
        summary: 'List permission decisions on one repository, newest first',
        ...schema,
        tags: ['repositories'],
        params: idParam('repoID'),
        querystring: filtersQuery,
        response: { 200: { ...auditPage, description: 'a page of the decisions on the repository, newest first' }, ...errorReplies },
      },
    },
    async (request) => audit.listRepositoryAudit(requireUser(request), { ...request.query, repository: request.params.repoID }),
  );
};
