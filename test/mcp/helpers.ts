import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { SignJWT } from 'jose';
import { mcpResourceUrl } from '../../src/auth/oauth/resource.js';
import { createGrantStore } from '../../src/auth/oauth/grants.js';
import { oauthIssuer } from '../../src/config/derived.js';
import { TEST_SECRET, type TestService } from '../helpers/service.js';

/** The service listening on 127.0.0.1 (the SDK client speaks real HTTP); its issuer is that origin. */
export async function listen(service: TestService): Promise<{ issuer: string; endpoint: URL }> {
  const address = await service.app.listen({ port: 0, host: '127.0.0.1' });
  const issuer = address.replace('localhost', '127.0.0.1');
  return { issuer, endpoint: new URL(mcpResourceUrl(issuer)) };
}

/** A grant row as approving an authorization request writes it (src/auth/oauth/grants.ts); its id. */
export async function createTestGrant(service: TestService, grant: { userId: string; resource: string; clientId?: string; scope?: string }): Promise<string> {
  const store = createGrantStore(service.context.db.knex, { codeTtlMs: 600_000, refreshTtlMs: 3_600_000 });
  const created = await store.createGrant(
    {
      client_id: grant.clientId ?? 'test-client',
      user_id: grant.userId,
      scope: grant.scope ?? 'mcp',
      resource: grant.resource,
      redirect_uri: 'http://127.0.0.1:33418/callback',
      codeChallenge: 'x'.repeat(43),
    },
    { id: randomUUID(), openUntil: new Date(Date.now() + 600_000) },
  );
  if (!created) throw new Error('a fresh request id was answered already');
  return created.grantId;
}

/**
 * An OAuth access token for the MCP resource, as the token endpoint would issue it: a grant row
 * for the user, the client and the audience first, then the token naming it (`sid`), since the
 * resource server refuses a token its grant table does not vouch for.
 */
export async function accessToken(service: TestService, issuer: string, userId: string, options: { scope?: string; audience?: string } = {}): Promise<string> {
  const grant = { userId, clientId: 'test-client', scope: options.scope ?? 'mcp', resource: options.audience ?? mcpResourceUrl(issuer) };
  const signed = await service.context.tokens.signAccessToken({
    userId,
    clientId: grant.clientId,
    scope: grant.scope,
    audience: grant.resource,
    grantId: await createTestGrant(service, grant),
  });
  return signed.token;
}

/**
 * An access token as anyone who knows the service's `auth.jwt_secret` could sign it, with any
 * claims: the signature alone must not make a token good (the grant must vouch for it).
 */
export async function forgeAccessToken(service: TestService, claims: Record<string, unknown>): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ typ: 'access', scope: 'mcp', ...claims })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer(oauthIssuer(service.config))
    .setIssuedAt(now)
    .setExpirationTime(now + 600)
    .setJti(crypto.randomUUID())
    .sign(new TextEncoder().encode(TEST_SECRET));
}

/** The official SDK client with a bearer header, connected (initialize + initialized). */
export async function connectClient(endpoint: URL, token: string): Promise<Client> {
  const client = new Client({ name: 'factlog-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(endpoint, { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  return client;
}

/** A tool's JSON result (its text content), or its error text. */
export function parsed(result: unknown): { isError: boolean; value: any; text: string } {
  const { isError = false, content } = result as CallToolResult;
  const first = content[0];
  const text = first?.type === 'text' ? first.text : '';
  let value: unknown = text;
  try {
    value = JSON.parse(text);
  } catch {
    /* an error message: kept as text */
  }
  return { isError, value, text };
}
