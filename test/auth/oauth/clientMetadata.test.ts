import t from 'tap';
import { OAuthError } from '../../../src/auth/oauth/errors.js';
import { isMetadataDocumentClientId, isRegisteredRedirectUri, redirectUriProblem, validateClientMetadata, validateMetadataDocument } from '../../../src/auth/oauth/clientMetadata.js';

const codeOf = (run: () => unknown): string => {
  try {
    run();
  } catch (error) {
    if (error instanceof OAuthError) return error.code;
    throw error;
  }
  return 'accepted';
};

t.test('redirect URIs: https, or http on loopback; no fragment, no user information', async (t) => {
  for (const good of ['https://app.example/cb', 'https://app.example:8443/cb?x=1', 'http://127.0.0.1:33418/callback', 'http://localhost/cb', 'http://[::1]:9/cb']) {
    t.equal(redirectUriProblem(good), null, good);
  }
  for (const bad of ['http://app.example/cb', 'https://app.example/cb#x', 'https://user:pw@app.example/cb', '/relative', 'javascript:alert(1)', 'cursor://callback', 'http://127.0.0.2.example/cb', '', 'https://a.example/' + 'x'.repeat(2000)]) {
    t.type(redirectUriProblem(bad), 'string', bad);
  }
  t.type(redirectUriProblem(42), 'string', 'not a string');
  // Compared as written, redirected to as parsed: a spelling the parser rewrites is refused, naming the one to register.
  for (const [spelt, canonical] of [
    ['https://app.example/cb\n', 'https://app.example/cb'],
    ['http://127.1/cb', 'http://127.0.0.1/cb'],
    ['http://2130706433/cb', 'http://127.0.0.1/cb'],
    ['http://0x7f000001/cb', 'http://127.0.0.1/cb'],
    ['https://@app.example/cb', 'https://app.example/cb'],
    ['https://APP.example/cb', 'https://app.example/cb'],
    ['https://app.example/a/../cb', 'https://app.example/cb'],
  ]) {
    t.equal(redirectUriProblem(spelt), `redirect URI ${JSON.stringify(spelt)} is not written as a URL parser writes it: register ${canonical}`, JSON.stringify(spelt));
  }
  t.equal(redirectUriProblem('http://localhost:3000'), null, 'an origin without its path slash is the same URL');
});

t.test('redirect URI matching: exact, but a loopback one at any port (RFC 8252 7.3)', async (t) => {
  const registered = ['http://127.0.0.1/callback', 'http://[::1]:4000/cb?app=1', 'http://localhost:3000/done', 'https://app.example/cb', 'http://127.0.0.1:9'];
  for (const uri of registered) t.ok(isRegisteredRedirectUri(registered, uri), `as registered: ${uri}`);
  for (const uri of ['http://127.0.0.1:53124/callback', 'http://[::1]/cb?app=1', 'http://[::1]:65000/cb?app=1', 'http://localhost:51000/done', 'http://127.0.0.1:2']) {
    t.ok(isRegisteredRedirectUri(registered, uri), `another loopback port: ${uri}`);
  }
  for (const uri of [
    'http://127.0.0.1:53124/callback/',
    'http://127.0.0.1:53124/callback?extra=1',
    'http://127.0.0.1:53124/callback#frag',
    'http://127.0.0.1:53124/callbacks',
    'http://127.0.0.1:53124/CALLBACK',
    'http://localhost:53124/callback',
    'https://127.0.0.1:53124/callback',
    'http://user@127.0.0.1:53124/callback',
    'http://127.1:53124/callback',
    'HTTP://127.0.0.1:53124/callback',
    'http://[::1]:65000/cb',
    'https://app.example:8443/cb',
    'https://app.example/cb?x=1',
    'https://app.example/c',
  ]) {
    t.notOk(isRegisteredRedirectUri(registered, uri), `refused: ${uri}`);
  }
});

t.test('registration metadata: defaults, what is kept, and refusals with RFC 7591 codes', async (t) => {
  t.same(validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_name: ' App ', logo_uri: 'ignored', contacts: ['ignored'] }), {
    client_name: 'App',
    redirect_uris: ['https://app.example/cb'],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    application_type: 'web',
    client_uri: null,
    software_id: null,
    software_version: null,
  });
  t.equal(codeOf(() => validateClientMetadata(null)), 'invalid_client_metadata');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: 'https://app.example/cb' })), 'invalid_redirect_uri', 'a string, not an array');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: Array.from({ length: 11 }, (_, i) => `https://app.example/${i}`) })), 'invalid_redirect_uri', 'too many');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], grant_types: ['refresh_token'] })), 'invalid_client_metadata', 'no authorization_code');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], response_types: ['token'] })), 'invalid_client_metadata');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_secret: 's' })), 'invalid_client_metadata');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_name: 'x'.repeat(201) })), 'invalid_client_metadata');
  // Counted in characters, as every other text bound: 200 emoji are 400 UTF-16 units.
  t.equal(validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_name: '😀'.repeat(200) }).client_name, '😀'.repeat(200));
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_name: '😀'.repeat(201) })), 'invalid_client_metadata');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], client_uri: 'not a url' })), 'invalid_client_metadata');
  t.equal(codeOf(() => validateClientMetadata({ redirect_uris: ['https://app.example/cb'], scope: 'mcp' })), 'accepted');
});

t.test('client id URLs of metadata documents', async (t) => {
  t.ok(isMetadataDocumentClientId('https://app.example/oauth/client.json'));
  t.ok(isMetadataDocumentClientId('https://app.example:8443/client'));
  for (const bad of ['http://app.example/client.json', 'https://app.example', 'https://app.example/', 'https://app.example/a/../client.json', 'https://app.example/./c', 'https://app.example/c#x', 'https://u:p@app.example/c', 'not a url', 'uuid-like-client-id']) {
    t.notOk(isMetadataDocumentClientId(bad), bad);
  }
});

t.test('a metadata document must name its own URL as client_id', async (t) => {
  const url = 'https://app.example/client.json';
  t.match(validateMetadataDocument(url, { client_id: url, client_name: 'App', redirect_uris: ['https://app.example/cb'] }), { client_id: url, client_name: 'App', kind: 'metadata_document' });
  t.equal(codeOf(() => validateMetadataDocument(url, { client_id: 'https://other.example/client.json', redirect_uris: ['https://app.example/cb'] })), 'invalid_client');
  t.equal(codeOf(() => validateMetadataDocument(url, { redirect_uris: ['https://app.example/cb'] })), 'invalid_client', 'no client_id');
  t.equal(codeOf(() => validateMetadataDocument(url, { client_id: url, redirect_uris: ['http://app.example/cb'] })), 'invalid_client', 'a bad redirect URI');
  t.equal(codeOf(() => validateMetadataDocument(url, [])), 'invalid_client');
});
