import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { createApplication } from '../../app/application.js';
import type { CreateApiKeyInput } from '../../app/apiKeys.js';
import { API_KEY_NAME_MAX, API_KEY_SCOPES_MAX } from '../../domain/apiKey/decider.js';
import { requireUser, traceOf } from '../guard.js';
import { bearerSecurity, errorReplies, idParam } from '../schemas.js';

const apiKeySchema = {
  type: 'object',
  required: ['id', 'name', 'scopes', 'repository_id', 'hint', 'created_at', 'expires_at', 'last_used_at'],
  properties: {
    id: { type: 'string' },
    name: { type: 'string' },
    scopes: { type: 'array', items: { type: 'string' }, description: 'permission patterns object:action' },
    repository_id: { type: ['string', 'null'], description: 'the one repository the key works on; null for all the owner can reach' },
    hint: { type: 'string', description: 'the first characters of the key, to tell keys apart' },
    created_at: { type: 'string', format: 'date-time' },
    expires_at: { type: ['string', 'null'], format: 'date-time', description: 'null: never expires' },
    last_used_at: { type: ['string', 'null'], format: 'date-time', description: 'to the minute' },
  },
} as const;

/** The signed-in user's personal API keys (docs/auth.md, "Personal API keys"). */
export const apiKeyRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const schema = { tags: ['api-keys'], security: bearerSecurity };
  const { apiKeys } = createApplication(context);

  app.get(
    '/api/v1/users/me/api-keys',
    {
      schema: {
        summary: "List the signed-in user's live API keys (never the keys themselves)",
        ...schema,
        response: { 200: { description: 'the live API keys of the caller, without the keys', type: 'object', required: ['api_keys'], properties: { api_keys: { type: 'array', items: apiKeySchema } } }, ...errorReplies },
      },
    },
    async (request) => apiKeys.listApiKeys(requireUser(request)),
  );

  app.post<{ Body: CreateApiKeyInput }>(
    '/api/v1/users/me/api-keys',
    {
      schema: {
        summary: 'Create a personal API key; the key is in this answer only',
        ...schema,
        body: {
          type: 'object',
          required: ['name', 'scopes'],
          additionalProperties: false,
          properties: {
            name: { type: 'string', minLength: 1, maxLength: API_KEY_NAME_MAX },
            scopes: {
              type: 'array',
              minItems: 1,
              maxItems: API_KEY_SCOPES_MAX,
              items: { type: 'string', minLength: 3, maxLength: 100 },
              description: 'permission patterns object:action (GET /api/v1/admin/permissions lists them), * for any part; never more than the owner holds',
            },
            repository: { type: 'string', minLength: 1, maxLength: 200, description: 'id or slug of the one repository the key may act on' },
            expires_in_days: {
              type: 'integer',
              minimum: 0,
              maximum: 36500,
              description: 'lifetime in days; default api_keys.default_ttl (never expires when that is 0, the default); 0 = never, accepted only when api_keys.max_ttl is 0s',
            },
          },
        },
        response: {
          201: { description: 'the API key, created; `key` is shown in this answer only', ...apiKeySchema, required: [...apiKeySchema.required, 'key'], properties: { ...apiKeySchema.properties, key: { type: 'string', description: 'the key, fl_…; shown once' } } },
          ...errorReplies,
        },
      },
    },
    // The answer holds the secret: no cache on the way may keep it.
    async (request, reply) => reply.status(201).header('cache-control', 'no-store').send(await apiKeys.createApiKey(requireUser(request), request.body, traceOf(request))),
  );

  app.delete<{ Params: { keyID: string } }>(
    '/api/v1/users/me/api-keys/:keyID',
    { schema: { summary: 'Revoke one of your API keys; it stops working at once', ...schema, params: idParam('keyID'), response: { 204: { type: 'null', description: 'the key is revoked' }, ...errorReplies } } },
    async (request, reply) => {
      await apiKeys.revokeApiKey(requireUser(request), { keyId: request.params.keyID }, traceOf(request));
      return reply.status(204).send();
    },
  );
};
