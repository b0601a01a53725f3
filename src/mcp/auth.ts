import { decodeJwt } from 'jose';
import type { AppContext } from '../app/appContext.js';
import { AuthenticationError } from '../auth/identity.js';
import type { Principal } from '../auth/rbac.js';
import { InvalidTokenError, OPAQUE_TOKEN_PREFIX, type AccessClaims } from '../auth/tokens.js';

/** The OAuth scope an access token needs to call tools (spec, "Authentication" item 2). */
const MCP_SCOPE = 'mcp';

/** Why a request may not reach the tools: the status, the `WWW-Authenticate` challenge and the `{error, message}` body. */
export class McpAuthRefusal extends Error {
  override readonly name = 'McpAuthRefusal';
  constructor(
    readonly status: 401 | 403,
    readonly error: 'unauthorized' | 'forbidden',
    message: string,
    readonly challenge: string,
  ) {
    super(message);
  }
}

/**
 * The Bearer challenge of RFC 6750 and RFC 9728 for the MCP resource. The metadata URL is given
 * twice: `resource_metadata` is the RFC 9728 parameter current clients read, and
 * `resource_metadata_url` the name the service's spec uses; a client ignores the one it does not know.
 */
function bearerChallenge(metadataUrl: string, error?: { code: 'invalid_token' | 'insufficient_scope' | 'invalid_request'; description: string }): string {
  const parameters = [`resource_metadata="${metadataUrl}"`, `resource_metadata_url="${metadataUrl}"`, `scope="${MCP_SCOPE}"`];
  if (error) parameters.push(`error="${error.code}"`, `error_description="${error.description.replace(/["\\]/g, '')}"`);
  return `Bearer ${parameters.join(', ')}`;
}

/** The `typ` claim of a JWT, read without verifying it: only to word a refusal. */
function unverifiedTyp(token: string): unknown {
  try {
    return decodeJwt(token).typ;
  } catch {
    return undefined;
  }
}

/**
 * The caller of an MCP request from its `Authorization` header (docs/mcp.md, "Authentication"):
 *   - a personal API key (`fl_...`) is resolved by the identity service, the same way the REST
 *     surface resolves it, scopes and repository binding included.
 *   - any other bearer must be an OAuth access token (a JWT) issued for this resource (`aud` =
 *     `resourceUrl`) with scope `mcp`; it acts with the user's current roles. Session JWTs are
 *     refused: the MCP endpoint is the OAuth resource, and a session token was never consented
 *     to for tools.
 * Throws McpAuthRefusal (401 without or with a bad token, 403 without the `mcp` scope).
 */
export async function authenticateMcp(
  context: Pick<AppContext, 'identity'> & {
    /** Checks an access token for the resource: signature, expiry, type, audience, and that its grant is live and is the token's (`context.oauth.verifyAccessToken`). */
    verifyAccessToken(token: string, resource: string): Promise<AccessClaims>;
  },
  authorization: string | undefined,
  urls: { resource: string; metadata: string },
): Promise<Principal> {
  const refuse = (description: string, code: 'invalid_token' | 'invalid_request' = 'invalid_token') =>
    new McpAuthRefusal(401, 'unauthorized', description, bearerChallenge(urls.metadata, { code, description }));
  if (authorization === undefined || authorization === '') {
    throw new McpAuthRefusal(401, 'unauthorized', 'authentication required: send an OAuth access token for this resource', bearerChallenge(urls.metadata));
  }
  const match = /^Bearer\s+(\S+)$/i.exec(authorization);
  if (!match) throw refuse('authorization header must be "Bearer <token>"', 'invalid_request');
  const token = match[1];

  // Only an API key goes to the identity service: anything else must be an access token, so a
  // session JWT spelt otherwise (a padded signature, which the JWT library reads the same and
  // the token service refuses) is not taken for an API key and resolved as a session.
  if (token.startsWith(OPAQUE_TOKEN_PREFIX.apiKey)) {
    try {
      return await context.identity.authenticate(token);
    } catch (error) {
      if (error instanceof AuthenticationError) throw refuse(error.message);
      throw error;
    }
  }

  if (unverifiedTyp(token) === 'session') throw refuse('session tokens are not accepted here: use an OAuth access token issued for this resource');
  let claims;
  try {
    claims = await context.verifyAccessToken(token, urls.resource);
  } catch (error) {
    if (error instanceof InvalidTokenError) {
      throw refuse(error.reason === 'expired' ? 'token expired' : 'token is invalid or was not issued for this resource');
    }
    throw error;
  }
  if (!claims.scope.split(' ').includes(MCP_SCOPE)) {
    const description = `the token's scope lacks "${MCP_SCOPE}"`;
    throw new McpAuthRefusal(403, 'forbidden', description, bearerChallenge(urls.metadata, { code: 'insufficient_scope', description }));
  }
  return {
    userId: claims.sub,
    // The grant names the authorization (what revocation ends).
    credential: { kind: 'oauth', id: claims.sid },
    assignments: await context.identity.roleAssignments(claims.sub),
  };
}
