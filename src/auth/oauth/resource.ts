/**
 * The one resource this server issues OAuth tokens for: its MCP endpoint. Here, below the
 * application layer, because the OAuth service (src/app/oauth.ts) checks every token request's
 * RFC 8707 resource against it; the HTTP routes serve it (src/api/routes/mcp.ts) and publish its
 * metadata (src/api/issuer.ts, src/api/routes/wellKnown.ts).
 */

/** Where the MCP endpoint lives; its URL (issuer + path, no trailing slash) is the OAuth resource. */
export const MCP_PATH = '/api/v1/mcp';

/** The canonical URL of the MCP endpoint (RFC 8707 resource, the `aud` of its access tokens). */
export const mcpResourceUrl = (issuer: string): string => `${issuer}${MCP_PATH}`;
