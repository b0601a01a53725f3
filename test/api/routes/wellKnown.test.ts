import t from 'tap';
import { startTestService } from '../../helpers/service.js';

/** The discovery documents over real HTTP: every field, exactly; the issuer from the config or the request. */
const service = await startTestService();
const address = await service.app.listen({ host: '127.0.0.1', port: 0 });
const origin = address.replace('localhost', '127.0.0.1');
t.teardown(() => service.close());

t.test('authorization server metadata (RFC 8414), issuer derived from the request', async (t) => {
  const response = await fetch(`${origin}/.well-known/oauth-authorization-server`);
  t.equal(response.status, 200);
  t.same(await response.json(), {
    issuer: origin,
    authorization_endpoint: `${origin}/api/v1/oauth/authorize`,
    token_endpoint: `${origin}/api/v1/oauth/token`,
    registration_endpoint: `${origin}/api/v1/oauth/register`,
    revocation_endpoint: `${origin}/api/v1/oauth/revoke`,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    code_challenge_methods_supported: ['S256'],
    scopes_supported: ['mcp'],
    token_endpoint_auth_methods_supported: ['none'],
    revocation_endpoint_auth_methods_supported: ['none'],
    client_id_metadata_document_supported: true,
    authorization_response_iss_parameter_supported: true,
  });
});

t.test('protected resource metadata (RFC 9728) at both URLs', async (t) => {
  const expected = {
    resource: `${origin}/api/v1/mcp`,
    authorization_servers: [origin],
    scopes_supported: ['mcp'],
    bearer_methods_supported: ['header'],
    resource_name: 'Factlog MCP',
  };
  for (const path of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/api/v1/mcp']) {
    const response = await fetch(`${origin}${path}`);
    t.equal(response.status, 200, path);
    t.same(await response.json(), expected, path);
  }
  t.equal((await fetch(`${origin}/.well-known/oauth-protected-resource/api/v1/other`)).status, 404, 'no metadata for a resource that does not exist');
});

t.test('a configured issuer wins over the request, without its trailing slash', async (t) => {
  const configured = await startTestService({ overrides: { oauth: { issuer: 'https://kg.example.org/' } } });
  t.teardown(() => configured.close());
  const authorizationServer = await configured.call('GET', '/.well-known/oauth-authorization-server', { headers: { host: 'evil.example' } });
  t.equal(authorizationServer.body.issuer, 'https://kg.example.org');
  t.equal(authorizationServer.body.token_endpoint, 'https://kg.example.org/api/v1/oauth/token');
  const resource = await configured.call('GET', '/.well-known/oauth-protected-resource/api/v1/mcp', { headers: { host: 'evil.example' } });
  t.equal(resource.body.resource, 'https://kg.example.org/api/v1/mcp', 'no trailing slash');
  t.same(resource.body.authorization_servers, ['https://kg.example.org']);
});

t.test('every OAuth route is in the OpenAPI document with a summary', async (t) => {
  const openapi = (await service.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, { summary?: string }>> };
  const routes: Array<[string, string]> = [
    ['/.well-known/oauth-authorization-server', 'get'],
    ['/.well-known/oauth-protected-resource', 'get'],
    ['/.well-known/oauth-protected-resource/api/v1/mcp', 'get'],
    ['/api/v1/oauth/register', 'post'],
    ['/api/v1/oauth/authorize', 'get'],
    ['/api/v1/oauth/authorize', 'post'],
    ['/api/v1/oauth/authorize/login', 'post'],
    ['/api/v1/oauth/token', 'post'],
    ['/api/v1/oauth/revoke', 'post'],
    ['/api/v1/oauth/assets/authorize.css', 'get'],
  ];
  for (const [path, method] of routes) t.type(openapi.paths[path]?.[method]?.summary, 'string', `${method.toUpperCase()} ${path}`);
});

t.test('CORS for browser clients on the public endpoints, none on the pages', async (t) => {
  for (const path of ['/.well-known/oauth-authorization-server', '/.well-known/oauth-protected-resource/api/v1/mcp', '/api/v1/oauth/token', '/api/v1/oauth/register', '/api/v1/oauth/revoke']) {
    const preflight = await fetch(`${origin}${path}`, { method: 'OPTIONS', headers: { origin: 'https://inspector.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, mcp-protocol-version' } });
    t.equal(preflight.status, 204, path);
    t.equal(preflight.headers.get('access-control-allow-origin'), '*', path);
    t.match(preflight.headers.get('access-control-allow-headers'), /MCP-Protocol-Version/);
    t.equal(preflight.headers.get('access-control-allow-credentials'), null, 'never with credentials');
  }
  const metadata = await fetch(`${origin}/.well-known/oauth-authorization-server`, { headers: { origin: 'https://inspector.example' } });
  t.equal(metadata.headers.get('access-control-allow-origin'), '*');
  const page = await fetch(`${origin}/api/v1/oauth/authorize`, { headers: { origin: 'https://inspector.example' } });
  t.equal(page.headers.get('access-control-allow-origin'), null, 'the authorization page is not readable cross-origin');
});
