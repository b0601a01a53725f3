import type { FastifyRequest } from 'fastify';
import { MCP_PATH } from '../auth/oauth/resource.js';
import type { Config } from '../config/types.js';

/** The authorization server's endpoints (src/api/routes/oauth.ts). */
export const OAUTH_PATHS = {
  register: '/api/v1/oauth/register',
  authorize: '/api/v1/oauth/authorize',
  login: '/api/v1/oauth/authorize/login',
  token: '/api/v1/oauth/token',
  revoke: '/api/v1/oauth/revoke',
} as const;
export const AUTHORIZATION_SERVER_METADATA_PATH = '/.well-known/oauth-authorization-server';
export const PROTECTED_RESOURCE_METADATA_PATH = '/.well-known/oauth-protected-resource';

/**
 * The OAuth issuer a request sees: `oauth.issuer` when set, else derived from the request's own
 * scheme and host (`profile: production` refuses to start with an empty issuer, so a forged Host
 * header can only mislead a development service about itself).
 */
export function issuerOf(config: Config, request: Pick<FastifyRequest, 'protocol' | 'host'>): string {
  const configured = config.oauth.issuer.replace(/\/+$/, '');
  return configured !== '' ? configured : `${request.protocol}://${request.host}`;
}

/** RFC 9728 metadata of the MCP resource, at the path-suffixed URL current clients ask for first. */
export const protectedResourceMetadataUrl = (issuer: string): string => `${issuer}${PROTECTED_RESOURCE_METADATA_PATH}${MCP_PATH}`;
