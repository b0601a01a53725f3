import type { FastifyPluginAsync } from 'fastify';
import type { AppContext } from '../../app/appContext.js';
import { OAUTH_SCOPE } from '../../auth/oauth/clientMetadata.js';
import { MCP_PATH, mcpResourceUrl } from '../../auth/oauth/resource.js';
import { AUTHORIZATION_SERVER_METADATA_PATH, issuerOf, OAUTH_PATHS, PROTECTED_RESOURCE_METADATA_PATH } from '../issuer.js';
import { allowPublicCors } from '../publicCors.js';

const stringList = { type: 'array', items: { type: 'string' } } as const;

const authorizationServerReply = {
  type: 'object',
  required: ['issuer', 'authorization_endpoint', 'token_endpoint', 'response_types_supported'],
  properties: {
    issuer: { type: 'string' },
    authorization_endpoint: { type: 'string' },
    token_endpoint: { type: 'string' },
    registration_endpoint: { type: 'string' },
    revocation_endpoint: { type: 'string' },
    response_types_supported: stringList,
    response_modes_supported: stringList,
    grant_types_supported: stringList,
    code_challenge_methods_supported: stringList,
    scopes_supported: stringList,
    token_endpoint_auth_methods_supported: stringList,
    revocation_endpoint_auth_methods_supported: stringList,
    client_id_metadata_document_supported: { type: 'boolean' },
    authorization_response_iss_parameter_supported: { type: 'boolean' },
  },
} as const;

const protectedResourceReply = {
  type: 'object',
  required: ['resource', 'authorization_servers'],
  properties: {
    resource: { type: 'string' },
    authorization_servers: stringList,
    scopes_supported: stringList,
    bearer_methods_supported: stringList,
    resource_name: { type: 'string' },
  },
} as const;

/** Discovery documents: RFC 8414 authorization-server metadata and RFC 9728 protected-resource metadata. */
export const wellKnownRoutes: FastifyPluginAsync<{ context: AppContext }> = async (app, { context }) => {
  const { config } = context;
  allowPublicCors(app, [AUTHORIZATION_SERVER_METADATA_PATH, PROTECTED_RESOURCE_METADATA_PATH, `${PROTECTED_RESOURCE_METADATA_PATH}${MCP_PATH}`]);

  app.get(
    AUTHORIZATION_SERVER_METADATA_PATH,
    { schema: { tags: ['oauth'], summary: 'OAuth 2.1 authorization server metadata (RFC 8414)', response: { 200: { ...authorizationServerReply, description: 'the metadata of the authorization server' } } } },
    async (request, reply) => {
      const issuer = issuerOf(config, request);
      reply.header('cache-control', 'max-age=300');
      return {
        issuer,
        authorization_endpoint: `${issuer}${OAUTH_PATHS.authorize}`,
        token_endpoint: `${issuer}${OAUTH_PATHS.token}`,
        registration_endpoint: `${issuer}${OAUTH_PATHS.register}`,
        revocation_endpoint: `${issuer}${OAUTH_PATHS.revoke}`,
        response_types_supported: ['code'],
        response_modes_supported: ['query'],
        grant_types_supported: ['authorization_code', 'refresh_token'],
        code_challenge_methods_supported: ['S256'],
        scopes_supported: [OAUTH_SCOPE],
        token_endpoint_auth_methods_supported: ['none'],
        revocation_endpoint_auth_methods_supported: ['none'],
        client_id_metadata_document_supported: true,
        authorization_response_iss_parameter_supported: true,
      };
    },
  );

  const protectedResource = {
    schema: { tags: ['oauth'], summary: 'OAuth protected resource metadata of the MCP endpoint (RFC 9728)', response: { 200: { ...protectedResourceReply, description: 'the metadata of the MCP endpoint as a protected resource' } } },
  };
  const protectedResourceHandler = async (request: Parameters<typeof issuerOf>[1], reply: { header(name: string, value: string): unknown }) => {
    const issuer = issuerOf(config, request);
    reply.header('cache-control', 'max-age=300');
    return {
      resource: mcpResourceUrl(issuer),
      authorization_servers: [issuer],
      scopes_supported: [OAUTH_SCOPE],
      bearer_methods_supported: ['header'],
      resource_name: 'Factlog MCP',
    };
  };
  app.get(PROTECTED_RESOURCE_METADATA_PATH, protectedResource, protectedResourceHandler);
  // RFC 9728 3.1: the metadata of the resource https://host/api/v1/mcp lives at the path-suffixed URL, which clients ask for first.
  app.get(`${PROTECTED_RESOURCE_METADATA_PATH}${MCP_PATH}`, protectedResource, protectedResourceHandler);
};
