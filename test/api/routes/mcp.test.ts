import t from 'tap';
import { createTokenService } from '../../../src/auth/tokens.js';
import { oauthIssuer } from '../../../src/config/derived.js';
import { protectedResourceMetadataUrl } from '../../../src/api/issuer.js';
import { mcpResourceUrl } from '../../../src/auth/oauth/resource.js';
import { registerUser, startTestService, TEST_SECRET, type TestService } from '../../helpers/service.js';
import { accessToken, createTestGrant, forgeAccessToken, listen } from '../../mcp/helpers.js';

let service: TestService;
let issuer: string;
let endpoint: URL;
let userId: string;
let sessionToken: string;
let token: string;
let repoId: string;

const ALLOWED_ORIGIN = 'https://app.example.org';
const BOTH = 'application/json, text/event-stream';
const listRepositories = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'getRepositories', arguments: {} } };

async function post(body: unknown, headers: Record<string, string> = {}, bearer: string | null = token) {
  const response = await fetch(endpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: BOTH, ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }), ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* an event stream or empty */
  }
  return { status: response.status, headers: response.headers, text, json };
}

/** The JSON-RPC messages of an event stream: each `data:` line of each event. */
const sseMessages = (text: string): any[] =>
  text
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => JSON.parse(line.slice('data: '.length)));

t.before(async () => {
  service = await startTestService({ workers: false, overrides: { mcp: { allowed_origins: [ALLOWED_ORIGIN] } } });
  const user = await registerUser(service, 'owner@example.org');
  userId = user.user.id;
  sessionToken = user.token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token: sessionToken, body: { name: 'Physics' } })).body.id;
  ({ issuer, endpoint } = await listen(service));
  token = await accessToken(service, issuer, userId);
});
t.teardown(() => service.close());

t.test('without a token: 401 with both resource-metadata parameters in the Bearer challenge', async (t) => {
  const response = await post(listRepositories, {}, null);
  t.equal(response.status, 401);
  t.match(response.json, { error: 'unauthorized', message: /authentication required/ });
  const challenge = response.headers.get('www-authenticate') ?? '';
  const metadata = protectedResourceMetadataUrl(issuer);
  t.match(challenge, /^Bearer /);
  t.ok(challenge.includes(`resource_metadata="${metadata}"`), challenge);
  t.ok(challenge.includes(`resource_metadata_url="${metadata}"`), challenge);
  t.ok(challenge.includes('scope="mcp"'), challenge);
  t.notOk(challenge.includes('error='), 'no token is not an invalid token');
  const malformed = await post(listRepositories, { authorization: 'Basic dXNlcjpwYXNz' }, null);
  t.equal(malformed.status, 401);
  t.match(malformed.headers.get('www-authenticate'), /error="invalid_request"/);
});

t.test('a token that is not an access token for this resource: 401 invalid_token', async (t) => {
  const grantId = await createTestGrant(service, { userId, clientId: 'c', resource: mcpResourceUrl(issuer) });
  const cases: [string, string][] = [
    ['another audience', await accessToken(service, issuer, userId, { audience: 'https://other.example.org/api/v1/mcp' })],
    [
      'expired',
      (
        await createTokenService({ secret: TEST_SECRET, issuer: oauthIssuer(service.config), sessionTtlMs: 60_000, accessTtlMs: 60_000, now: () => Date.now() - 3_600_000 }).signAccessToken({
          userId,
          clientId: 'c',
          scope: 'mcp',
          audience: mcpResourceUrl(issuer),
          grantId,
        })
      ).token,
    ],
    [
      'signed with another secret',
      (
        await createTokenService({ secret: 'another-secret-that-is-long-enough-for-hs256!', issuer: oauthIssuer(service.config), sessionTtlMs: 60_000 }).signAccessToken({
          userId,
          clientId: 'c',
          scope: 'mcp',
          audience: mcpResourceUrl(issuer),
          grantId,
        })
      ).token,
    ],
    ['a session token', sessionToken],
    // The JWT library reads a padded signature as the same signature: still a session token.
    ['a session token with a padded signature', `${sessionToken}=`],
    ['a session token with a doubly padded signature', `${sessionToken}==`],
    // RFC 7515: base64url without padding; the JWT library alone reads a padded signature as the same one.
    ['an access token with a padded signature', `${token}=`],
    ['an unknown API key', 'fl_notakeythisservicehasissued'],
    ['no token at all, just text', 'not-a-token'],
  ];
  for (const [name, bad] of cases) {
    const response = await post(listRepositories, {}, bad);
    t.equal(response.status, 401, `${name}: 401`);
    const challenge = response.headers.get('www-authenticate') ?? '';
    t.ok(challenge.includes('error="invalid_token"'), `${name}: invalid_token`);
    t.ok(challenge.includes(`resource_metadata_url="${protectedResourceMetadataUrl(issuer)}"`), `${name}: metadata url`);
  }
  const expired = await post(listRepositories, {}, cases[1][1]);
  t.match(expired.json.message, /expired/);
  const session = await post(listRepositories, {}, sessionToken);
  t.match(session.json.message, /session tokens are not accepted/);
});

const forge = (claims: Record<string, unknown>) => forgeAccessToken(service, claims);

t.test('a well-signed access token its grant does not vouch for: 401 invalid_token', async (t) => {
  const resource = mcpResourceUrl(issuer);
  const other = await registerUser(service, 'other-mcp-user@example.org');
  const own = await createTestGrant(service, { userId, resource });
  const othersGrant = await createTestGrant(service, { userId: other.user.id, resource });
  const anotherClient = await createTestGrant(service, { userId, resource, clientId: 'another-client' });
  const anotherResource = await createTestGrant(service, { userId, resource: 'https://other.example.org/api/v1/mcp' });
  const revoked = await createTestGrant(service, { userId, resource });
  await service.context.db.knex('oauth_grants').where({ id: revoked }).update({ revoked_at: new Date(), revoked_reason: 'test' });
  const claims = { sub: userId, client_id: 'test-client', aud: resource };

  const control = await post(listRepositories, {}, await forge({ ...claims, sid: own }));
  t.equal(control.status, 200, 'the same claims naming their own grant pass: the refusals below are about the grant');

  const cases: [string, string][] = [
    ['no sid', await forge(claims)],
    ['an unknown sid', await forge({ ...claims, sid: 'no-such-grant' })],
    ["another user's grant", await forge({ ...claims, sid: othersGrant })],
    ['own grant, another user as sub', await forge({ ...claims, sub: other.user.id, sid: own })],
    ["another client's grant", await forge({ ...claims, sid: anotherClient })],
    ['a grant for another resource', await forge({ ...claims, sid: anotherResource })],
    ['a revoked grant', await forge({ ...claims, sid: revoked })],
  ];
  for (const [name, bad] of cases) {
    const response = await post(listRepositories, {}, bad);
    t.equal(response.status, 401, `${name}: 401`);
    t.match(response.json, { error: 'unauthorized', message: /invalid/ }, `${name}: body`);
    const challenge = response.headers.get('www-authenticate') ?? '';
    t.ok(challenge.includes('error="invalid_token"'), `${name}: invalid_token`);
    t.ok(challenge.includes(`resource_metadata="${protectedResourceMetadataUrl(issuer)}"`), `${name}: metadata url`);
  }
});

t.test('an access token whose scope lacks mcp: 403 insufficient_scope', async (t) => {
  const response = await post(listRepositories, {}, await accessToken(service, issuer, userId, { scope: 'profile' }));
  t.equal(response.status, 403);
  t.match(response.json, { error: 'forbidden', message: /scope lacks "mcp"/ });
  const challenge = response.headers.get('www-authenticate') ?? '';
  t.ok(challenge.includes('error="insufficient_scope"'), challenge);
  t.ok(challenge.includes('scope="mcp"'), challenge);
});

t.test('GET, DELETE, PUT and PATCH: 405, POST allowed', async (t) => {
  for (const method of ['GET', 'DELETE', 'PUT', 'PATCH']) {
    const response = await fetch(endpoint, { method, headers: { authorization: `Bearer ${token}` } });
    t.equal(response.status, 405, method);
    t.equal(response.headers.get('allow'), 'POST');
    t.match(await response.json(), { error: 'method_not_allowed' });
  }
});

t.test('Origin: a foreign one is 403; the issuer origin and configured ones pass', async (t) => {
  const foreign = await post(listRepositories, { origin: 'https://evil.example.com' });
  t.equal(foreign.status, 403);
  t.match(foreign.json, { error: 'forbidden', message: /origin https:\/\/evil\.example\.com is not allowed/ });
  const unauthenticatedForeign = await post(listRepositories, { origin: 'https://evil.example.com' }, null);
  t.equal(unauthenticatedForeign.status, 403, 'checked before the token');
  for (const origin of [new URL(issuer).origin, ALLOWED_ORIGIN]) {
    const response = await post(listRepositories, { origin, accept: 'application/json' });
    t.equal(response.status, 200, origin);
    t.notOk(response.json.result.isError);
    t.equal(response.headers.get('access-control-allow-origin'), origin, 'a browser may read the answer');
  }
  t.equal(foreign.headers.get('access-control-allow-origin'), null, 'a foreign origin gets no CORS grant');
});

t.test('CORS: an allowed origin\'s preflight and its unauthenticated call can be read by a browser', async (t) => {
  const preflight = (origin: string) =>
    fetch(endpoint, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,mcp-protocol-version' } });
  const allowed = await preflight(ALLOWED_ORIGIN);
  t.equal(allowed.status, 204);
  t.equal(allowed.headers.get('access-control-allow-origin'), ALLOWED_ORIGIN);
  t.match(allowed.headers.get('access-control-allow-methods'), /POST/);
  for (const name of ['authorization', 'content-type', 'mcp-protocol-version']) t.match(allowed.headers.get('access-control-allow-headers')?.toLowerCase(), name);
  t.match(allowed.headers.get('vary'), /Origin/);
  const refused = await preflight('https://evil.example.com');
  t.equal(refused.status, 403);
  t.equal(refused.headers.get('access-control-allow-origin'), null);
  const challenge = await post(listRepositories, { origin: ALLOWED_ORIGIN }, null);
  t.equal(challenge.status, 401);
  t.equal(challenge.headers.get('access-control-allow-origin'), ALLOWED_ORIGIN);
  t.match(challenge.headers.get('access-control-expose-headers'), /WWW-Authenticate/, 'the challenge is readable: it names the authorization server');
  const streamed = await post(listRepositories, { origin: ALLOWED_ORIGIN, accept: 'text/event-stream' });
  t.equal(streamed.status, 200);
  t.equal(streamed.headers.get('access-control-allow-origin'), ALLOWED_ORIGIN, 'the relayed SDK answer keeps the grant');
});

t.test('a raw tools/call without initialize works (stateless)', async (t) => {
  const response = await post(listRepositories, { accept: 'application/json' });
  t.equal(response.status, 200);
  t.match(response.headers.get('content-type'), /^application\/json/);
  t.notOk(response.headers.get('mcp-session-id'), 'no session is kept');
  t.match(response.json, { jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text' }] } });
  t.match(JSON.parse(response.json.result.content[0].text), [{ id: repoId, name: 'Physics', roles: ['owner'] }]);
});

t.test('JSON or an event stream, as Accept prefers', async (t) => {
  const json = await post(listRepositories, { accept: BOTH });
  t.match(json.headers.get('content-type'), /^application\/json/, 'both listed: the first wins');
  t.equal(json.json.id, 1);
  const streamFirst = await post(listRepositories, { accept: 'text/event-stream, application/json' });
  t.match(streamFirst.headers.get('content-type'), /^text\/event-stream/);
  const [message] = sseMessages(streamFirst.text);
  t.match(message, { jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text' }] } });
  const onlyStream = await post(listRepositories, { accept: 'text/event-stream' });
  t.match(onlyStream.headers.get('content-type'), /^text\/event-stream/);
  t.match(sseMessages(onlyStream.text), [{ id: 1 }]);
  const weighted = await post(listRepositories, { accept: 'application/json;q=0.5, text/event-stream' });
  t.match(weighted.headers.get('content-type'), /^text\/event-stream/, 'q-values decide');
  const anything = await post(listRepositories, { accept: '*/*' });
  t.match(anything.headers.get('content-type'), /^application\/json/);
  const html = await post(listRepositories, { accept: 'text/html' });
  t.equal(html.status, 406);
  t.match(html.json, { jsonrpc: '2.0', error: { code: -32000 } });
});

t.test('protocol versions: each supported revision is served; an unsupported one is 400', async (t) => {
  for (const version of ['2025-06-18', '2025-11-25']) {
    const response = await post(listRepositories, { 'mcp-protocol-version': version, accept: 'application/json' });
    t.equal(response.status, 200, version);
    t.match(response.json.result, { content: [{ type: 'text' }] });
    t.notOk('resultType' in response.json.result, `${version}: no 2026-07-28 fields`);
  }
  const modern = await post(
    { ...listRepositories, params: { ...listRepositories.params, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } },
    { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'getRepositories', accept: 'application/json' },
  );
  t.equal(modern.status, 200, '2026-07-28');
  t.match(modern.json.result, { resultType: 'complete', _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'factlog' } } });
  t.match(JSON.parse(modern.json.result.content[0].text), [{ id: repoId }]);
  const base64Name = await post(listRepositories, {
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call',
    'mcp-name': `=?base64?${Buffer.from('getRepositories').toString('base64')}?=`,
    accept: 'application/json',
  });
  t.equal(base64Name.status, 200, 'a base64-encoded Mcp-Name is decoded');
  const modernList = await post({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, { 'mcp-protocol-version': '2026-07-28', accept: 'application/json' });
  t.match(modernList.json.result, { resultType: 'complete', cacheScope: 'private', ttlMs: Number });
  t.equal(modernList.json.result.tools.length, 22);

  const unsupported = await post(listRepositories, { 'mcp-protocol-version': '2024-11-05' });
  t.equal(unsupported.status, 400);
  t.match(unsupported.json, { jsonrpc: '2.0', error: { code: -32022, data: { requested: '2024-11-05', supported: ['2026-07-28', '2025-11-25', '2025-06-18'] } } });
  const unknown = await post(listRepositories, { 'mcp-protocol-version': '1900-01-01' });
  t.equal(unknown.status, 400);
});

t.test('2026-07-28 request metadata must agree with the body (400 HeaderMismatch)', async (t) => {
  const withMeta = (version: string) => ({ ...listRepositories, params: { ...listRepositories.params, _meta: { 'io.modelcontextprotocol/protocolVersion': version } } });
  const versionMismatch = await post(withMeta('2026-07-28'), { 'mcp-protocol-version': '2025-11-25' });
  t.equal(versionMismatch.status, 400);
  t.match(versionMismatch.json, { error: { code: -32020 }, id: 1 });
  const methodMismatch = await post(listRepositories, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' });
  t.equal(methodMismatch.status, 400);
  t.match(methodMismatch.json, { error: { code: -32020, message: /Mcp-Method/ } });
  const nameMismatch = await post(listRepositories, { 'mcp-protocol-version': '2026-07-28', 'mcp-name': 'searchFacts' });
  t.equal(nameMismatch.status, 400);
  t.match(nameMismatch.json, { error: { code: -32020, message: /Mcp-Name/ } });
  const unimplemented = await post({ jsonrpc: '2.0', id: 9, method: 'resources/list' }, { 'mcp-protocol-version': '2026-07-28' });
  t.equal(unimplemented.status, 404, '2026-07-28: an unimplemented method is 404');
  t.match(unimplemented.json, { id: 9, error: { code: -32601, message: /resources\/list/ } });
  const legacyUnimplemented = await post({ jsonrpc: '2.0', id: 9, method: 'resources/list' }, { 'mcp-protocol-version': '2025-11-25', accept: 'application/json' });
  t.equal(legacyUnimplemented.status, 200, 'earlier revisions: a JSON-RPC error in a 200');
  t.match(legacyUnimplemented.json, { id: 9, error: { code: -32601 } });
  const unsupportedMeta = await post(withMeta('2099-01-01'), { 'mcp-protocol-version': '2026-07-28' });
  t.equal(unsupportedMeta.status, 400);
  t.match(unsupportedMeta.json, { error: { code: -32022 } });
});

t.test('initialize answers the revision the client asked for when supported; server/discover lists them', async (t) => {
  const initialize = (protocolVersion: string) => ({
    jsonrpc: '2.0',
    id: 'init',
    method: 'initialize',
    params: { protocolVersion, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  });
  for (const version of ['2025-06-18', '2025-11-25', '2026-07-28']) {
    const response = await post(initialize(version), { accept: 'application/json' });
    t.equal(response.status, 200, version);
    t.equal(response.json.result.protocolVersion, version, `initialize ${version} answers ${version}`);
    t.match(response.json.result, { serverInfo: { name: 'factlog' }, capabilities: { tools: {} } });
  }
  const old = await post(initialize('2024-01-01'), { accept: 'application/json' });
  t.equal(old.json.result.protocolVersion, '2025-11-25', 'an unknown revision gets the newest handshake revision');
  const discover = await post({ jsonrpc: '2.0', id: 7, method: 'server/discover', params: {} }, { 'mcp-protocol-version': '2026-07-28', accept: 'application/json' });
  t.equal(discover.status, 200);
  t.match(discover.json, { id: 7, result: { supportedVersions: ['2026-07-28', '2025-11-25', '2025-06-18'], serverInfo: { name: 'factlog' }, resultType: 'complete' } });
});

t.test('an unknown tool and bad arguments are tool errors', async (t) => {
  const unknown = await post({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'dropDatabase', arguments: {} } }, { accept: 'application/json' });
  t.equal(unknown.status, 200);
  t.match(unknown.json, { id: 3, result: { isError: true, content: [{ type: 'text', text: /Tool dropDatabase not found/ }] } });
  const badArguments = await post({ jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'searchFacts', arguments: { repository: repoId, limit: 0 } } }, { accept: 'application/json' });
  t.match(badArguments.json, { id: 4, result: { isError: true, content: [{ type: 'text', text: /Input validation error.*limit/s }] } });
});

t.test('personal API keys: scoped and repository-bound, as on REST', async (t) => {
  const otherRepo = (await service.call('POST', '/api/v1/repositories', { token: sessionToken, body: { name: 'Chemistry' } })).body.id;
  const createKey = async (body: object) => (await service.call('POST', '/api/v1/users/me/api-keys', { token: sessionToken, body })).body.key as string;
  const call = (key: string, name: string, args: object) =>
    post({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name, arguments: args } }, { accept: 'application/json' }, key);

  const readKey = await createKey({ name: 'physics reader', scopes: ['*:read'], repository: repoId });
  const listed = await call(readKey, 'getRepositories', {});
  t.equal(listed.status, 200);
  t.same(JSON.parse(listed.json.result.content[0].text).map((r: { id: string }) => r.id), [repoId], 'a bound key sees its repository only');
  t.notOk((await call(readKey, 'searchFacts', { repository: repoId, query: 'x' })).json.result.isError);
  const elsewhere = await call(readKey, 'searchFacts', { repository: otherRepo, query: 'x' });
  t.match(elsewhere.json.result, { isError: true, content: [{ text: 'not found: repository not found' }] }, 'another repository: a tool error, no data, not even that it exists');
  const writing = await call(readKey, 'createInvestigation', { repository: repoId, title: 'Why?' });
  t.match(writing.json.result, { isError: true, content: [{ text: /permission denied/ }] }, 'a writing tool with a read-only key');

  const revokedKey = await createKey({ name: 'soon gone', scopes: ['*:read'] });
  const keyId = (await service.call('GET', '/api/v1/users/me/api-keys', { token: sessionToken })).body.api_keys.find((k: { name: string }) => k.name === 'soon gone').id;
  t.equal((await call(revokedKey, 'getRepositories', {})).status, 200);
  await service.call('DELETE', `/api/v1/users/me/api-keys/${keyId}`, { token: sessionToken });
  const refused = await call(revokedKey, 'getRepositories', {});
  t.equal(refused.status, 401, 'a revoked key: 401 with the challenge');
  t.match(refused.headers.get('www-authenticate'), /error="invalid_token"/);
});

t.test('a notification is accepted with 202 and no body', async (t) => {
  const response = await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  t.equal(response.status, 202);
  t.equal(response.text, '');
});

t.test('a body that is not JSON-RPC is 400', async (t) => {
  const response = await post({ hello: 'world' }, { accept: 'application/json' });
  t.equal(response.status, 400);
  t.match(response.json, { error: { code: -32700 } });
  const textBody = await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'text/plain', authorization: `Bearer ${token}` }, body: 'hello' });
  t.equal(textBody.status, 415);
  t.match(await textBody.json(), { error: 'unsupported_media_type', message: /application\/json/ });
  const notJson = await fetch(endpoint, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: '{' });
  t.equal(notJson.status, 400);
  t.match(await notJson.json(), { jsonrpc: '2.0', id: null, error: { code: -32700, message: /^Parse error/ } }, 'a body that is not JSON: a JSON-RPC parse error');
  const scalar = await post(5);
  t.equal(scalar.status, 400);
  t.match(scalar.json, { jsonrpc: '2.0', id: null, error: { code: -32600, message: /^Invalid Request/ } }, 'JSON that is no request');
  // Text no store can keep is refused before the SDK sees it: still JSON-RPC, with the request's id.
  for (const query of ['a\u0000b', 'x\ud800y']) {
    const refused = await post({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'searchFacts', arguments: { repository: 'r', query } } });
    t.equal(refused.status, 400);
    t.match(refused.json, { jsonrpc: '2.0', id: 7, error: { code: -32602, message: /^Invalid params: body\/params\/arguments\/query contains/ } });
  }
});

t.test('the endpoint is in the OpenAPI document', async (t) => {
  const response = await service.call('GET', '/api/v1/openapi.json');
  const path = response.body.paths['/api/v1/mcp'];
  t.match(path.post, { summary: /MCP tool endpoint/, tags: ['mcp'] });
  t.ok(path.post.responses['401'] && path.post.responses['403'] && path.post.responses['400']);
  t.match(path.get, { summary: /405/ });
  t.ok(path.delete);
});

t.test('a tools/call with malformed params: -32602 with a sentence, not an internal error', async (t) => {
  const cases: Array<[string, unknown, RegExp]> = [
    ['arguments a string', { name: 'getRepositories', arguments: 'x' }, /params\.arguments must be an object/],
    ['arguments an array', { name: 'getRepositories', arguments: [1] }, /params\.arguments must be an object/],
    ['name a number', { name: 5, arguments: {} }, /params\.name must be the name of a tool/],
    ['no params', undefined, /params must be an object/],
  ];
  for (const [label, params, message] of cases) {
    const response = await post({ jsonrpc: '2.0', id: 7, method: 'tools/call', ...(params === undefined ? {} : { params }) }, { 'mcp-protocol-version': '2025-06-18' });
    t.equal(response.status, 400, label);
    t.match(response.json, { jsonrpc: '2.0', id: 7, error: { code: -32602, message } }, label);
  }
  const fine = await post(listRepositories, { 'mcp-protocol-version': '2025-06-18' });
  t.equal(fine.status, 200, 'well-formed params still go through');
});

t.test('an initialize with malformed params: -32602 with a sentence, not an internal error', async (t) => {
  const clientInfo = { name: 'test-client', version: '1.0.0' };
  const cases: Array<[string, unknown, RegExp]> = [
    ['empty params', {}, /params\.protocolVersion must be/],
    ['no capabilities', { protocolVersion: '2025-06-18', clientInfo }, /params\.capabilities must be an object/],
    ['a client without a version', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x' } }, /params\.clientInfo must be an object with name and version/],
    ['no params', undefined, /params must be an object/],
  ];
  for (const [label, params, message] of cases) {
    const response = await post({ jsonrpc: '2.0', id: 8, method: 'initialize', ...(params === undefined ? {} : { params }) }, { 'mcp-protocol-version': '2025-06-18' });
    t.equal(response.status, 400, label);
    t.match(response.json, { jsonrpc: '2.0', id: 8, error: { code: -32602, message } }, label);
  }
  const fine = await post({ jsonrpc: '2.0', id: 9, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo } }, { 'mcp-protocol-version': '2025-06-18' });
  t.equal(fine.status, 200, 'a well-formed initialize goes through');
  t.match(fine.json, { id: 9, result: { serverInfo: { name: String } } });
});
