import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { mcpResourceUrl } from '../../src/api/issuer.js';
import type { TestService } from '../helpers/service.js';

/** The service listening on 127.0.0.1 (the SDK client speaks real HTTP); its issuer is that origin. */
export async function listen(service: TestService): Promise<{ issuer: string; endpoint: URL }> {
  const address = await service.app.listen({ port: 0, host: '127.0.0.1' });
  const issuer = address.replace('localhost', '127.0.0.1');
  return { issuer, endpoint: new URL(mcpResourceUrl(issuer)) };
}

/** An OAuth access token for the MCP resource, as the token endpoint would issue it. */
export async function accessToken(service: TestService, issuer: string, userId: string, options: { scope?: string; audience?: string } = {}): Promise<string> {
  const signed = await service.context.tokens.signAccessToken({
    userId,
    clientId: 'test-client',
    scope: options.scope ?? 'mcp',
    audience: options.audience ?? mcpResourceUrl(issuer),
  });
  return signed.token;
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
