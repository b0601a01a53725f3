import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { auth as sdkAuth } from '@modelcontextprotocol/sdk/client/auth.js';
import { createTokenService } from '../../../src/auth/tokens.js';
import { InvalidTokenError } from '../../../src/auth/tokens.js';
import { OAUTH_PATHS } from '../../../src/api/issuer.js';
import { mcpResourceUrl } from '../../../src/auth/oauth/resource.js';
import { cookieHeader } from '../../../src/api/cookies.js';
import type { ClientDocumentFetch } from '../../../src/auth/oauth/clientDocuments.js';
import type { RecordedEvent } from '../../../src/eventstore/envelope.js';
import { checkWritesBesideTheirEnd } from '../../helpers/racedWrites.js';
import { registerUser, startTestService, TEST_SECRET } from '../../helpers/service.js';
import { createTestGrant, forgeAccessToken } from '../../mcp/helpers.js';
import { oauthIssuer } from '../../../src/config/derived.js';
import { formField, formOf, newPkce, postForm, postJson, SdkAuthProvider, signInAndDecide, TestBrowser } from '../../helpers/oauthClient.js';

/**
 * The OAuth 2.1 server over real HTTP: a browser that keeps cookies drives the authorization
 * pages, a client calls the token endpoint. Client ID Metadata Documents are served by a local
 * HTTP server: the injected fetch maps https://clients.test/... onto it.
 */
const documents = new Map<string, { status?: number; body: unknown }>();
let documentFetches = 0;
const documentServer = http.createServer((request, response) => {
  const document = documents.get(request.url ?? '');
  if (!document) {
    response.writeHead(404).end();
    return;
  }
  response.writeHead(document.status ?? 200, { 'content-type': 'application/json' }).end(JSON.stringify(document.body));
});
await new Promise<void>((resolve) => documentServer.listen(0, '127.0.0.1', resolve));
const documentOrigin = `http://127.0.0.1:${(documentServer.address() as AddressInfo).port}`;
const clientDocumentFetch: ClientDocumentFetch = async (url) => {
  documentFetches += 1;
  const local = url.replace('https://clients.test', documentOrigin);
  const response = await fetch(local, { redirect: 'manual' });
  return { finalUrl: url, status: response.status, contentType: response.headers.get('content-type'), body: Buffer.from(await response.arrayBuffer()) };
};

const service = await startTestService({ clientDocumentFetch });
const address = await service.app.listen({ host: '127.0.0.1', port: 0 });
const issuer = address.replace('localhost', '127.0.0.1');
const mcp = mcpResourceUrl(issuer);
t.teardown(async () => {
  await service.close();
  await new Promise((resolve) => documentServer.close(resolve));
});

const PASSWORD = 'correct horse battery';
const alice = await registerUser(service, 'alice@example.org', PASSWORD);
const REDIRECT = 'http://127.0.0.1:33418/callback';

async function registerClient(overrides: Record<string, unknown> = {}) {
  const response = await postJson(`${issuer}/api/v1/oauth/register`, { client_name: 'Test <Client>', redirect_uris: [REDIRECT], ...overrides });
  if (response.status !== 201) throw new Error(`register: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body as { client_id: string };
}

function authorizeUrl(params: Record<string, string | undefined>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) query.set(name, value);
  return `/api/v1/oauth/authorize?${query}`;
}

const baseParams = (clientId: string, challenge: string, extra: Record<string, string | undefined> = {}) => ({
  response_type: 'code',
  client_id: clientId,
  redirect_uri: REDIRECT,
  code_challenge: challenge,
  code_challenge_method: 'S256',
  scope: 'mcp',
  state: 'state-123',
  ...extra,
});

/** The browser's way through login and consent as alice; returns the redirect back to the client. */
const approve = (browser: TestBrowser, params: Record<string, string | undefined>, decision = 'approve'): Promise<URL> =>
  signInAndDecide(browser, authorizeUrl(params), { email: 'alice@example.org', password: PASSWORD }, decision);

async function codeFor(clientId: string, challenge: string, extra: Record<string, string | undefined> = {}) {
  const back = await approve(new TestBrowser(issuer), baseParams(clientId, challenge, extra));
  return back.searchParams.get('code') ?? '';
}

/** The reason an access token was refused, or 'accepted'. */
const refusal = (verification: Promise<unknown>) =>
  verification.then(
    () => 'accepted',
    (error: unknown) => (error instanceof InvalidTokenError ? error.reason : `unexpected ${String(error)}`),
  );

const token = (form: Record<string, string | string[]>) => postForm(`${issuer}/api/v1/oauth/token`, form);

t.test('the code flow as a browser drives it, then refresh rotation', async (t) => {
  const client = await registerClient();
  const { verifier, challenge } = newPkce();
  const browser = new TestBrowser(issuer);

  const loginPage = await browser.request('GET', authorizeUrl(baseParams(client.client_id, challenge)));
  t.equal(loginPage.status, 200);
  t.match(loginPage.headers.get('content-type'), /^text\/html/);
  t.equal(loginPage.headers.get('content-security-policy'), `default-src 'none'; style-src 'self'; form-action 'self' http://127.0.0.1:33418; frame-ancestors 'none'; base-uri 'none'`);
  t.equal(loginPage.headers.get('x-frame-options'), 'DENY');
  t.equal(loginPage.headers.get('referrer-policy'), 'no-referrer');
  t.equal(loginPage.headers.get('cache-control'), 'no-store');
  t.match(loginPage.text, 'Test &#60;Client&#62;', 'names the client, escaped');
  t.notMatch(loginPage.text, /<script|style=|<style/i, 'no inline script or style');
  const csrfCookie = loginPage.setCookies.find((line) => line.startsWith('fl_oauth_csrf='));
  t.ok(csrfCookie, 'a CSRF cookie is set');
  t.match(csrfCookie, /HttpOnly/i);
  t.match(csrfCookie, /SameSite=Lax/i);
  t.match(csrfCookie, /Path=\/api\/v1\/oauth\/authorize/);
  t.notMatch(csrfCookie, /Secure/i, 'not Secure on the embedded profile');
  t.ok(formField(loginPage.text, 'csrf'), 'the form carries the CSRF token');

  const css = await fetch(`${issuer}/api/v1/oauth/assets/authorize.css`);
  t.equal(css.status, 200);
  t.match(css.headers.get('content-type'), /^text\/css/);

  const consent = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, ...formOf(loginPage) });
  t.equal(consent.status, 200);
  t.match(consent.text, 'alice@example.org');
  t.match(consent.text, 'value="approve"');
  t.match(consent.text, mcp, 'says which resource');
  const loginCookie = consent.setCookies.find((line) => line.startsWith('fl_oauth_login='));
  t.match(loginCookie, /HttpOnly/i);

  const again = await browser.request('GET', authorizeUrl(baseParams(client.client_id, challenge)));
  t.match(again.text, 'value="approve"', 'signed in: straight to consent');
  const switchForm = /<form method="get" action="\/api\/v1\/oauth\/authorize"[^]*?<\/form>/.exec(again.text)?.[0] ?? '';
  const switchQuery = new URLSearchParams([...switchForm.matchAll(/name="([^"]+)" value="([^"]*)"/g)].map((match): [string, string] => [match[1], match[2].replace(/&#(\d+);/g, (_all, code: string) => String.fromCharCode(Number(code)))]));
  t.equal(switchQuery.get('prompt'), 'login');
  const switched = await browser.request('GET', `/api/v1/oauth/authorize?${switchQuery}`);
  t.match(switched.text, 'name="password"', '"use another account" shows the login form for the same request');
  t.equal(formField(switched.text, 'authorization_request')?.split('.').length, 2);

  const decided = await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(consent) });
  t.equal(decided.status, 302);
  const back = new URL(decided.headers.get('location') ?? '');
  t.equal(`${back.origin}${back.pathname}`, REDIRECT);
  t.equal(back.searchParams.get('state'), 'state-123');
  t.equal(back.searchParams.get('iss'), issuer, 'RFC 9207 iss');
  const code = back.searchParams.get('code') ?? '';
  t.match(code, /^flc_[A-Za-z0-9_-]{43}$/);

  const issued = await token({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: verifier });
  t.equal(issued.status, 200, JSON.stringify(issued.body));
  t.equal(issued.headers.get('cache-control'), 'no-store');
  t.equal(issued.body.token_type, 'Bearer');
  t.equal(issued.body.scope, 'mcp');
  t.ok(issued.body.expires_in >= 899 && issued.body.expires_in <= 900, `15 minutes (the JWT's exp is in whole seconds): ${issued.body.expires_in}`);
  t.match(issued.body.refresh_token, /^flr_/);
  const claims = await service.context.tokens.verify(issued.body.access_token, 'access', mcp);
  t.equal(claims.sub, alice.user.id);
  t.equal(claims.aud, mcp, 'audience is the MCP resource');
  t.equal(claims.client_id, client.client_id);
  t.equal(claims.scope, 'mcp');
  await t.rejects(service.context.tokens.verify(issued.body.access_token, 'access', `${issuer}/elsewhere`), InvalidTokenError, 'bound to its audience');

  const rotated = await token({ grant_type: 'refresh_token', refresh_token: issued.body.refresh_token, client_id: client.client_id });
  t.equal(rotated.status, 200, JSON.stringify(rotated.body));
  t.not(rotated.body.refresh_token, issued.body.refresh_token, 'a new refresh token');
  t.ok(await service.context.oauth.verifyAccessToken(rotated.body.access_token, mcp));

  const stored = await service.context.db.knex('oauth_refresh_tokens').select('token_hash');
  t.notOk(stored.some((row: { token_hash: string }) => row.token_hash.includes('flr_')), 'refresh tokens stored only hashed');
  const log = JSON.stringify(await service.context.db.knex('events').select('data'));
  t.notMatch(log, code, 'no code in the event log');
  t.notMatch(log, issued.body.refresh_token, 'no refresh token in the event log');
});

t.test('the login form refuses a wrong password and sets no login cookie', async (t) => {
  const client = await registerClient();
  const browser = new TestBrowser(issuer);
  const page = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
  const refused = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: 'wrong password', ...formOf(page) });
  t.equal(refused.status, 400);
  t.match(refused.text, 'Wrong email or password');
  t.notOk(refused.setCookies.some((line) => line.startsWith('fl_oauth_login=')));
  t.notMatch(refused.text, 'value="approve"');
});

t.test('the login form reads a form only: the same fields as JSON sign no one in', async (t) => {
  const client = await registerClient();
  const browser = new TestBrowser(issuer);
  const page = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
  const response = await fetch(`${issuer}/api/v1/oauth/authorize/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', cookie: [...browser.cookies].map(([name, value]) => `${name}=${value}`).join('; ') },
    body: JSON.stringify({ email: 'alice@example.org', password: PASSWORD, ...formOf(page) }),
  });
  t.equal(response.status, 400);
  t.match(await response.text(), /application\/x-www-form-urlencoded/, 'the page says what it reads');
  t.notOk(response.headers.getSetCookie().some((line) => line.startsWith('fl_oauth_login=')), 'no login cookie');
});

t.test('CSRF: a missing or wrong token is refused before login or consent', async (t) => {
  const client = await registerClient();
  const browser = new TestBrowser(issuer);
  const page = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
  const { authorization_request } = formOf(page);
  const missing = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, authorization_request });
  t.equal(missing.status, 403);
  t.notOk(missing.setCookies.some((line) => line.startsWith('fl_oauth_login=')), 'no login without the token');
  const wrong = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, authorization_request, csrf: 'x'.repeat(43) });
  t.equal(wrong.status, 403);

  // Another browser's token (an attacker's page posting its own token into the victim's browser).
  const attacker = new TestBrowser(issuer);
  const attackerPage = await attacker.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
  const foreign = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, ...formOf(attackerPage) });
  t.equal(foreign.status, 403, 'a token tied to another browser\'s cookie');

  const consent = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, ...formOf(page) });
  t.equal(consent.status, 200);
  const noToken = await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', authorization_request: formOf(consent).authorization_request });
  t.equal(noToken.status, 403);
  t.equal(noToken.headers.get('location'), null, 'no redirect, no code');
});

t.test('a tampered authorization request in the form is refused', async (t) => {
  const client = await registerClient({ redirect_uris: [REDIRECT, 'https://app.example/cb'] });
  const browser = new TestBrowser(issuer);
  await approve(browser, baseParams(client.client_id, newPkce().challenge));
  const page = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
  const form = formOf(page);
  const [body, mac] = form.authorization_request.split('.');
  const altered = JSON.parse(Buffer.from(body, 'base64url').toString());
  altered.redirect_uri = 'https://app.example/cb';
  const forged = `${Buffer.from(JSON.stringify(altered)).toString('base64url')}.${mac}`;
  const refused = await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', csrf: form.csrf, authorization_request: forged });
  t.equal(refused.status, 400);
  t.equal(refused.headers.get('location'), null);
});

t.test('denial: back to the client with error=access_denied, state and iss', async (t) => {
  const client = await registerClient();
  const back = await approve(new TestBrowser(issuer), baseParams(client.client_id, newPkce().challenge), 'deny');
  t.equal(back.searchParams.get('error'), 'access_denied');
  t.equal(back.searchParams.get('state'), 'state-123');
  t.equal(back.searchParams.get('iss'), issuer);
  t.equal(back.searchParams.get('code'), null);
  for (const other of ['maybe', 'Approve', 'DENY']) {
    const answer = await approve(new TestBrowser(issuer), baseParams(client.client_id, newPkce().challenge), other);
    t.equal(answer.searchParams.get('error'), 'access_denied', `decision=${other} denies, back at the client (not a 400 page)`);
    t.equal(answer.searchParams.get('code'), null);
  }
});

t.test('a consent form answers its request once: a replay, or a second post at once, is a 400 page and issues no code', async (t) => {
  const client = await registerClient();
  const grantsOfClient = async () => (await service.context.db.knex('oauth_grants').where({ client_id: client.client_id }).select('id')).length;
  const browser = new TestBrowser(issuer);
  const consentFor = async () => {
    const loginPage = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge)));
    const consent = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, ...formOf(loginPage) });
    t.equal(consent.status, 200);
    return { loginPage, consent };
  };
  const refusedAsAnswered = (page: { status: number; headers: Headers; text: string }, name: string) => {
    t.equal(page.status, 400, `${name}: 400`);
    t.match(page.headers.get('content-type'), /^text\/html/, `${name}: a page`);
    t.equal(page.headers.get('location'), null, `${name}: nothing goes to the client`);
    t.match(page.text, 'already answered', `${name}: says why`);
  };

  const { loginPage, consent } = await consentFor();
  const first = await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(consent) });
  t.equal(first.status, 302);
  t.match(new URL(first.headers.get('location') ?? '').searchParams.get('code'), /^flc_/);
  refusedAsAnswered(await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(consent) }), 'the same approval again');
  refusedAsAnswered(await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'deny', ...formOf(consent) }), 'a denial after it');
  // The login page's form carries the same request: neither signing in again nor posting it as consent answers it anew.
  refusedAsAnswered(await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(loginPage) }), 'the login form posted as consent');
  const relogin = await browser.request('POST', '/api/v1/oauth/authorize/login', { email: 'alice@example.org', password: PASSWORD, ...formOf(loginPage) });
  refusedAsAnswered(relogin, 'the login form again');
  t.equal(await grantsOfClient(), 1, 'one grant');

  const denial = await consentFor();
  const denied = await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'deny', ...formOf(denial.consent) });
  t.equal(new URL(denied.headers.get('location') ?? '').searchParams.get('error'), 'access_denied');
  refusedAsAnswered(await browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(denial.consent) }), 'an approval after a denial');
  t.equal(await grantsOfClient(), 1, 'no grant from the denied request');

  // A double click: the same form posted twice at once.
  const twice = await consentFor();
  const answers = await Promise.all([0, 1].map(() => browser.request('POST', '/api/v1/oauth/authorize', { decision: 'approve', ...formOf(twice.consent) })));
  t.same(answers.map((answer) => answer.status).sort(), [302, 400], 'one code, one refusal');
  refusedAsAnswered(answers.find((answer) => answer.status === 400) ?? answers[0], 'the second of two at once');
  t.equal(await grantsOfClient(), 2, 'one more grant');

  const fresh = await approve(browser, baseParams(client.client_id, newPkce().challenge));
  t.match(fresh.searchParams.get('code'), /^flc_/, 'a new authorization request is answered as usual');
});

t.test('an unregistered redirect URI never reaches consent and is never redirected to', async (t) => {
  const client = await registerClient();
  const browser = new TestBrowser(issuer);
  for (const redirect of ['https://evil.example/callback', `${REDIRECT}/other`, `${REDIRECT}?added=1`, `${REDIRECT}#fragment`, 'http://localhost:33418/callback', 'https://127.0.0.1:33418/callback']) {
    const page = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge, { redirect_uri: redirect })));
    t.equal(page.status, 400, redirect);
    t.equal(page.headers.get('location'), null, 'no redirect');
    t.match(page.text, 'invalid_request');
    t.notMatch(page.text, 'name="password"', 'no login form');
    t.notMatch(page.text, 'value="approve"', 'no consent');
  }
  const unknownClient = await browser.request('GET', authorizeUrl(baseParams('no-such-client', newPkce().challenge)));
  t.equal(unknownClient.status, 400);
  t.match(unknownClient.text, 'invalid_client');
  const missingRedirect = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge, { redirect_uri: undefined })));
  t.equal(missingRedirect.status, 400);
});

t.test('a loopback redirect URI works at any port, and the code is bound to the port it was sent to', async (t) => {
  const client = await registerClient({ redirect_uris: ['http://127.0.0.1/callback'] });
  const pkce = newPkce();
  const ephemeral = 'http://127.0.0.1:50123/callback';
  const back = await approve(new TestBrowser(issuer), baseParams(client.client_id, pkce.challenge, { redirect_uri: ephemeral }));
  t.equal(`${back.origin}${back.pathname}`, ephemeral, 'redirected to the port the client listens on');
  t.equal(back.searchParams.get('state'), 'state-123');
  const exchange = { grant_type: 'authorization_code', code: back.searchParams.get('code') ?? '', client_id: client.client_id, code_verifier: pkce.verifier };
  const otherPort = await token({ ...exchange, redirect_uri: 'http://127.0.0.1:50124/callback' });
  t.equal(otherPort.body.error, 'invalid_grant', 'the token request names the very URI of the authorization request');
  const fresh = await approve(new TestBrowser(issuer), baseParams(client.client_id, pkce.challenge, { redirect_uri: ephemeral }));
  const issued = await token({ ...exchange, code: fresh.searchParams.get('code') ?? '', redirect_uri: ephemeral });
  t.equal(issued.status, 200, JSON.stringify(issued.body));
});

t.test('PKCE: plain or a missing challenge is refused with invalid_request, never reaching consent', async (t) => {
  const client = await registerClient();
  const browser = new TestBrowser(issuer);
  const { verifier } = newPkce();
  const cases: Array<[string, Record<string, string | undefined>]> = [
    ['plain', { code_challenge: verifier, code_challenge_method: 'plain' }],
    ['missing challenge', { code_challenge: undefined }],
    ['missing method', { code_challenge_method: undefined }],
    ['malformed challenge', { code_challenge: 'short' }],
  ];
  for (const [name, override] of cases) {
    const response = await browser.request('GET', authorizeUrl({ ...baseParams(client.client_id, newPkce().challenge), ...override }));
    t.equal(response.status, 302, name);
    const back = new URL(response.headers.get('location') ?? '');
    t.equal(`${back.origin}${back.pathname}`, REDIRECT, `${name}: to the registered redirect URI only`);
    t.equal(back.searchParams.get('error'), 'invalid_request', name);
    t.equal(back.searchParams.get('state'), 'state-123');
    t.equal(back.searchParams.get('iss'), issuer);
  }
  const badScope = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge, { scope: 'mcp admin' })));
  t.equal(new URL(badScope.headers.get('location') ?? '').searchParams.get('error'), 'invalid_scope');
  const badResource = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge, { resource: 'https://other.example/mcp' })));
  t.equal(new URL(badResource.headers.get('location') ?? '').searchParams.get('error'), 'invalid_target');
  const badType = await browser.request('GET', authorizeUrl(baseParams(client.client_id, newPkce().challenge, { response_type: 'token' })));
  t.equal(new URL(badType.headers.get('location') ?? '').searchParams.get('error'), 'unsupported_response_type');
});

t.test('token endpoint: wrong verifier, another client, another resource, another redirect URI', async (t) => {
  const client = await registerClient();
  const other = await registerClient();
  const pkce = newPkce();

  const wrongVerifier = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: newPkce().verifier });
  t.equal(wrongVerifier.status, 400);
  t.same(Object.keys(wrongVerifier.body).sort(), ['error', 'error_description']);
  t.equal(wrongVerifier.body.error, 'invalid_grant');

  const plainVerifier = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.challenge });
  t.equal(plainVerifier.body.error, 'invalid_grant', 'the challenge itself is no verifier (plain refused)');

  const shortVerifier = await token({ grant_type: 'authorization_code', code: 'flc_x', redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: 'too-short' });
  t.equal(shortVerifier.body.error, 'invalid_request');

  const anotherClient = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: other.client_id, code_verifier: pkce.verifier });
  t.equal(anotherClient.body.error, 'invalid_grant', 'a code from another client');

  const anotherRedirect = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: 'http://127.0.0.1:1/x', client_id: client.client_id, code_verifier: pkce.verifier });
  t.equal(anotherRedirect.body.error, 'invalid_grant');

  const unknownResource = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier, resource: 'https://other.example/mcp' });
  t.equal(unknownResource.body.error, 'invalid_target');

  // A code bound at authorize to the MCP resource (given explicitly), redeemed for that resource with another spelling of the issuer host.
  const bound = await codeFor(client.client_id, pkce.challenge, { resource: mcp });
  const otherAudience = await postForm(`${issuer.replace('127.0.0.1', 'localhost')}/api/v1/oauth/token`, { grant_type: 'authorization_code', code: bound, redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier, resource: mcp.replace('127.0.0.1', 'localhost') });
  t.equal(otherAudience.body.error, 'invalid_target', 'a code redeemed for another resource than it was issued for');

  const matching = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge, { resource: mcp }), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier, resource: mcp });
  t.equal(matching.status, 200, 'the same resource at both ends');
});

t.test('token endpoint: malformed requests are refused in OAuth terms', async (t) => {
  const client = await registerClient();
  t.equal((await token({ grant_type: 'password', username: 'a', password: 'b' })).body.error, 'unsupported_grant_type');
  t.equal((await token({ code: 'x' })).body.error, 'invalid_request', 'no grant_type');
  t.equal((await token({ grant_type: 'authorization_code', code: 'x', redirect_uri: REDIRECT, code_verifier: newPkce().verifier })).body.error, 'invalid_request', 'no client_id');
  t.equal((await token({ grant_type: 'authorization_code', code: 'x', redirect_uri: REDIRECT, client_id: 'nobody', code_verifier: newPkce().verifier })).body.error, 'invalid_client');
  t.equal((await token({ grant_type: 'authorization_code', code: 'flc_unknown', redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: newPkce().verifier })).body.error, 'invalid_grant');
  t.equal((await token({ grant_type: ['authorization_code', 'refresh_token'], client_id: client.client_id })).body.error, 'invalid_request', 'a repeated parameter');
  t.equal((await token({ grant_type: 'refresh_token', refresh_token: 'flr_x', client_id: client.client_id, scope: 'admin' })).body.error, 'invalid_scope');
  const json = await fetch(`${issuer}/api/v1/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ grant_type: 'authorization_code' }) });
  t.equal(json.status, 400);
  t.equal(((await json.json()) as { error: string }).error, 'invalid_request', 'form encoding only');
  const basic = await fetch(`${issuer}/api/v1/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${client.client_id}:secret`).toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'authorization_code', code: 'x', redirect_uri: REDIRECT, code_verifier: newPkce().verifier }).toString(),
  });
  t.equal(basic.status, 401, 'client authentication by header: RFC 6749 5.2');
  t.equal(((await basic.json()) as { error: string }).error, 'invalid_client');
  t.match(basic.headers.get('www-authenticate'), /^Basic/);
  // A Bearer header is no client authentication either, whether or not it holds a valid REST token.
  for (const [endpoint, bearer] of [
    ['token', 'not-a-token'],
    ['token', alice.token],
    ['revoke', 'not-a-token'],
    ['revoke', alice.token],
  ] as const) {
    const answer = await fetch(`${issuer}/api/v1/oauth/${endpoint}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Bearer ${bearer}` },
      body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'flr_x', token: 'x', client_id: client.client_id }).toString(),
    });
    t.equal(answer.status, 401, `${endpoint} with a Bearer header`);
    t.same(await answer.json(), { error: 'invalid_client', error_description: 'public clients do not authenticate; send client_id in the form and no Authorization header' });
    t.equal(answer.headers.get('cache-control'), 'no-store');
  }
});

t.test('a code works once; its second redemption revokes what the first issued', async (t) => {
  const client = await registerClient();
  const pkce = newPkce();
  const code = await codeFor(client.client_id, pkce.challenge);
  const form = { grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier };
  const first = await token(form);
  t.equal(first.status, 200);
  t.ok(await service.context.oauth.verifyAccessToken(first.body.access_token, mcp));
  const second = await token(form);
  t.equal(second.status, 400);
  t.equal(second.body.error, 'invalid_grant');
  await t.rejects(service.context.oauth.verifyAccessToken(first.body.access_token, mcp), InvalidTokenError, 'the access token of the first redemption is revoked');
  const refreshed = await token({ grant_type: 'refresh_token', refresh_token: first.body.refresh_token, client_id: client.client_id });
  t.equal(refreshed.body.error, 'invalid_grant', 'and so is its refresh token');
});

t.test('an expired code is refused', async (t) => {
  const client = await registerClient();
  const pkce = newPkce();
  const code = await codeFor(client.client_id, pkce.challenge);
  await service.context.db.knex('oauth_codes').update({ expires_at: new Date(Date.now() - 1000) });
  const expired = await token({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  t.equal(expired.body.error, 'invalid_grant');
  t.match(expired.body.error_description, /expired/);
});

t.test('refresh tokens: reuse revokes the whole family; revoked and expired ones are refused', async (t) => {
  const client = await registerClient();
  const pkce = newPkce();
  const issued = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  const second = await token({ grant_type: 'refresh_token', refresh_token: issued.body.refresh_token, client_id: client.client_id });
  const third = await token({ grant_type: 'refresh_token', refresh_token: second.body.refresh_token, client_id: client.client_id });
  t.equal(third.status, 200);

  const other = await registerClient();
  const foreign = await token({ grant_type: 'refresh_token', refresh_token: third.body.refresh_token, client_id: other.client_id });
  t.equal(foreign.body.error, 'invalid_grant', 'another client cannot use it');

  const reused = await token({ grant_type: 'refresh_token', refresh_token: issued.body.refresh_token, client_id: client.client_id });
  t.equal(reused.body.error, 'invalid_grant', 'a rotated-away token is refused');
  const latest = await token({ grant_type: 'refresh_token', refresh_token: third.body.refresh_token, client_id: client.client_id });
  t.equal(latest.body.error, 'invalid_grant', 'and the reuse revoked the newest token of the family');
  await t.rejects(service.context.oauth.verifyAccessToken(third.body.access_token, mcp), InvalidTokenError, 'and its access tokens');

  const revokedFamily = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  const revoke = await postForm(`${issuer}/api/v1/oauth/revoke`, { token: revokedFamily.body.refresh_token, token_type_hint: 'refresh_token', client_id: client.client_id });
  t.equal(revoke.status, 200);
  t.equal((await token({ grant_type: 'refresh_token', refresh_token: revokedFamily.body.refresh_token, client_id: client.client_id })).body.error, 'invalid_grant', 'a revoked refresh token');
  await t.rejects(service.context.oauth.verifyAccessToken(revokedFamily.body.access_token, mcp), InvalidTokenError);

  const byAccess = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  t.equal((await postForm(`${issuer}/api/v1/oauth/revoke`, { token: byAccess.body.access_token, client_id: client.client_id })).status, 200);
  t.equal((await token({ grant_type: 'refresh_token', refresh_token: byAccess.body.refresh_token, client_id: client.client_id })).body.error, 'invalid_grant', 'revoking an access token revokes its grant');

  t.equal((await postForm(`${issuer}/api/v1/oauth/revoke`, { token: 'flr_unknown', client_id: client.client_id })).status, 200, 'an unknown token: 200');
  const kept = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  t.equal((await postForm(`${issuer}/api/v1/oauth/revoke`, { token: kept.body.refresh_token, client_id: other.client_id })).status, 200, 'another client\'s token: 200');
  const stillGood = await token({ grant_type: 'refresh_token', refresh_token: kept.body.refresh_token, client_id: client.client_id });
  t.equal(stillGood.status, 200, 'but nothing revoked');
  t.equal((await postForm(`${issuer}/api/v1/oauth/revoke`, { client_id: client.client_id })).body.error, 'invalid_request', 'no token');

  await service.context.db.knex('oauth_refresh_tokens').update({ expires_at: new Date(Date.now() - 1000) });
  const expired = await token({ grant_type: 'refresh_token', refresh_token: stillGood.body.refresh_token, client_id: client.client_id });
  t.equal(expired.body.error, 'invalid_grant', 'an expired refresh token');
  t.match(expired.body.error_description, /expired/);
});

const signer = (secret: string, now: number) => createTokenService({ secret, issuer: oauthIssuer(service.config), sessionTtlMs: 60_000, now: () => now });

t.test('a refresh for another resource is refused before rotating: the refresh token stays good', async (t) => {
  const client = await registerClient();
  const pkce = newPkce();
  const issued = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
  // The issuer derived from another spelling of the host: the MCP URL there is another resource than the grant's.
  const otherHost = issuer.replace('127.0.0.1', 'localhost');
  const refused = await postForm(`${otherHost}/api/v1/oauth/token`, { grant_type: 'refresh_token', refresh_token: issued.body.refresh_token, client_id: client.client_id, resource: mcpResourceUrl(otherHost) });
  t.equal(refused.status, 400);
  t.equal(refused.body.error, 'invalid_target');
  t.equal(refused.headers.get('cache-control'), 'no-store');
  const retried = await token({ grant_type: 'refresh_token', refresh_token: issued.body.refresh_token, client_id: client.client_id, resource: mcp });
  t.equal(retried.status, 200, `the same token still refreshes, no reuse is detected: ${JSON.stringify(retried.body)}`);
  t.ok(await service.context.oauth.verifyAccessToken(issued.body.access_token, mcp), 'and the grant is not revoked');
});

t.test('expired and foreign-secret access tokens are refused', async (t) => {
  const grantId = await createTestGrant(service, { userId: alice.user.id, clientId: 'c', resource: mcp });
  const claims = { userId: alice.user.id, clientId: 'c', scope: 'mcp', audience: mcp, grantId };
  const expired = await signer(TEST_SECRET, Date.now() - 3_600_000).signAccessToken(claims);
  t.equal(await refusal(service.context.oauth.verifyAccessToken(expired.token, mcp)), 'expired');
  const foreign = await signer('another-secret-another-secret-another-secret!!', Date.now()).signAccessToken(claims);
  t.equal(await refusal(service.context.oauth.verifyAccessToken(foreign.token, mcp)), 'invalid');
  const fresh = await signer(TEST_SECRET, Date.now()).signAccessToken(claims);
  t.ok(await service.context.oauth.verifyAccessToken(fresh.token, mcp), 'the same token from the right secret passes');
});

t.test('an access token is good only with its grant: sid required, and sub, client_id and aud must be the grant\'s', async (t) => {
  const client = await registerClient();
  const { verifier, challenge } = newPkce();
  const code = await codeFor(client.client_id, challenge);
  const issued = await token({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: verifier });
  t.equal(issued.status, 200, JSON.stringify(issued.body));
  const real = await service.context.oauth.verifyAccessToken(issued.body.access_token, mcp);
  t.match(real, { sub: alice.user.id, client_id: client.client_id, aud: mcp }, 'the token from the flow passes');
  const grant = await service.context.db.knex('oauth_grants').where({ id: real.sid }).first();
  t.match(grant, { user_id: alice.user.id, client_id: client.client_id, resource: mcp, revoked_at: null }, 'and names the grant the flow made');

  const atEndpoint = await fetch(mcp, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${issued.body.access_token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'getRepositories', arguments: {} } }),
  });
  t.equal(atEndpoint.status, 200, 'POST /api/v1/mcp accepts it');
  await atEndpoint.body?.cancel();

  // Tokens anyone knowing the secret could sign.
  const bob = await registerUser(service, 'bob-forger@example.org', PASSWORD);
  const forge = (claims: Record<string, unknown>) => forgeAccessToken(service, claims);
  const own = { sub: alice.user.id, client_id: client.client_id, aud: mcp, sid: real.sid };
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge(own), mcp)), 'accepted', 'a forgery copying every claim of a live grant passes: the grant id is what binds');
  const { sid: _sid, ...withoutSid } = own;
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge(withoutSid), mcp)), 'invalid', 'no sid');
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge({ ...own, sid: 'no-such-grant' }), mcp)), 'invalid', 'an unknown grant');
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge({ ...own, sub: bob.user.id }), mcp)), 'invalid', "alice's grant, bob as sub");
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge({ ...own, client_id: 'another-client' }), mcp)), 'invalid', 'another client_id');
  const elsewhere = `${issuer}/elsewhere`;
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge({ ...own, aud: elsewhere }), elsewhere)), 'invalid', 'another audience, checked by a resource server for it');
  const signed = await signer(TEST_SECRET, Date.now()).signAccessToken({ userId: bob.user.id, clientId: client.client_id, scope: 'mcp', audience: mcp, grantId: real.sid });
  t.equal(await refusal(service.context.oauth.verifyAccessToken(signed.token, mcp)), 'invalid', 'signAccessToken itself cannot mint a token for another user on the grant');

  t.equal((await postForm(`${issuer}/api/v1/oauth/revoke`, { token: issued.body.refresh_token, client_id: client.client_id })).status, 200);
  t.equal(await refusal(service.context.oauth.verifyAccessToken(issued.body.access_token, mcp)), 'invalid', 'revoking the grant ends the token');
  t.equal(await refusal(service.context.oauth.verifyAccessToken(await forge(own), mcp)), 'invalid', 'and every forgery naming it');
});

t.test('dynamic registration: the record, its event, and bad inputs', async (t) => {
  const registered = await postJson(`${issuer}/api/v1/oauth/register`, {
    client_name: 'Inspector',
    redirect_uris: ['https://app.example/cb', 'http://localhost:6274/oauth/callback'],
    application_type: 'native',
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code', 'refresh_token'],
    unknown_field: 'ignored',
  });
  t.equal(registered.status, 201);
  t.match(registered.body, { client_name: 'Inspector', token_endpoint_auth_method: 'none', application_type: 'native', grant_types: ['authorization_code', 'refresh_token'] });
  t.notOk('client_secret' in registered.body, 'no secret');
  t.notOk('client_uri' in registered.body, 'absent metadata is left out, not null (RFC 7591 3.2.1)');
  const events = await service.context.store.readStream(`oauthclient-${registered.body.client_id}`);
  t.same(events.map((event) => event.type), ['OAuthClientRegistered']);
  t.same((events[0].data as { redirect_uris: string[] }).redirect_uris, ['https://app.example/cb', 'http://localhost:6274/oauth/callback']);
  t.equal(events[0].repositoryId, null);

  const bad: Array<[string, unknown, string]> = [
    ['http on a public host', { client_name: 'x', redirect_uris: ['http://app.example/cb'] }, 'invalid_redirect_uri'],
    ['missing redirect_uris', { client_name: 'x' }, 'invalid_redirect_uri'],
    ['empty redirect_uris', { client_name: 'x', redirect_uris: [] }, 'invalid_redirect_uri'],
    ['fragment', { client_name: 'x', redirect_uris: ['https://app.example/cb#frag'] }, 'invalid_redirect_uri'],
    ['relative', { client_name: 'x', redirect_uris: ['/cb'] }, 'invalid_redirect_uri'],
    ['custom scheme', { client_name: 'x', redirect_uris: ['javascript:alert(1)'] }, 'invalid_redirect_uri'],
    ['a secret-based client', { client_name: 'x', redirect_uris: ['https://app.example/cb'], token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
    ['implicit grant', { client_name: 'x', redirect_uris: ['https://app.example/cb'], grant_types: ['implicit'] }, 'invalid_client_metadata'],
    ['bad application_type', { client_name: 'x', redirect_uris: ['https://app.example/cb'], application_type: 'desktop' }, 'invalid_client_metadata'],
    ['another scope', { client_name: 'x', redirect_uris: ['https://app.example/cb'], scope: 'admin' }, 'invalid_client_metadata'],
  ];
  for (const [name, body, error] of bad) {
    const refused = await postJson(`${issuer}/api/v1/oauth/register`, body);
    t.equal(refused.status, 400, name);
    t.equal(refused.body.error, error, name);
    t.type(refused.body.error_description, 'string');
  }
  // Open registration takes no credentials: a stale Bearer header a client sends along is ignored, not a REST 401.
  const stale = await fetch(`${issuer}/api/v1/oauth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer stale-token' },
    body: JSON.stringify({ client_name: 'x', redirect_uris: ['https://app.example/cb'] }),
  });
  t.equal(stale.status, 201, 'registered despite a stale Bearer header');
  const notJson = await fetch(`${issuer}/api/v1/oauth/register`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
  t.equal(notJson.status, 400);
  t.equal(((await notJson.json()) as { error: string }).error, 'invalid_client_metadata');
});

t.test('Client ID Metadata Documents: fetched, validated and cached', async (t) => {
  const good = 'https://clients.test/good/client.json';
  documents.set('/good/client.json', { body: { client_id: good, client_name: 'Document Client', redirect_uris: [REDIRECT] } });
  documentFetches = 0;
  const pkce = newPkce();
  const browser = new TestBrowser(issuer);
  const page = await browser.request('GET', authorizeUrl(baseParams(good, pkce.challenge)));
  t.equal(page.status, 200);
  t.match(page.text, 'Document Client');
  t.match(page.text, good, 'names the document URL as the identity');
  const back = await approve(browser, baseParams(good, pkce.challenge));
  const issued = await token({ grant_type: 'authorization_code', code: back.searchParams.get('code') ?? '', redirect_uri: REDIRECT, client_id: good, code_verifier: pkce.verifier });
  t.equal(issued.status, 200);
  t.equal((await service.context.tokens.verify(issued.body.access_token, 'access', mcp)).client_id, good);
  t.equal(documentFetches, 1, 'one fetch for the page, the login, the consent and the token request: the cache answered');

  const mismatched = 'https://clients.test/mismatch.json';
  documents.set('/mismatch.json', { body: { client_id: 'https://clients.test/someone-else.json', client_name: 'Impostor', redirect_uris: [REDIRECT] } });
  const impostor = await browser.request('GET', authorizeUrl(baseParams(mismatched, pkce.challenge)));
  t.equal(impostor.status, 400);
  t.match(impostor.text, 'invalid_client');
  t.notMatch(impostor.text, 'Impostor');
  t.equal(impostor.headers.get('location'), null);

  const badRedirects = 'https://clients.test/bad-redirects.json';
  documents.set('/bad-redirects.json', { body: { client_id: badRedirects, client_name: 'Bad', redirect_uris: ['http://app.example/cb'] } });
  t.equal((await browser.request('GET', authorizeUrl(baseParams(badRedirects, pkce.challenge, { redirect_uri: 'http://app.example/cb' })))).status, 400, 'a document with a non-loopback http redirect URI');

  const unlisted = await browser.request('GET', authorizeUrl(baseParams(good, pkce.challenge, { redirect_uri: 'http://127.0.0.1:9/elsewhere' })));
  t.equal(unlisted.status, 400, 'a redirect URI the document does not list');
  t.equal(unlisted.headers.get('location'), null);

  const missing = await browser.request('GET', authorizeUrl(baseParams('https://clients.test/missing.json', pkce.challenge)));
  t.equal(missing.status, 400, 'a document that does not exist');
  const notUrlShaped = await browser.request('GET', authorizeUrl(baseParams('https://clients.test/', pkce.challenge)));
  t.equal(notUrlShaped.status, 400, 'a client_id URL without a path');

  const secretClient = 'https://clients.test/secret.json';
  documents.set('/secret.json', { body: { client_id: secretClient, redirect_uris: [REDIRECT], token_endpoint_auth_method: 'client_secret_post' } });
  t.equal((await browser.request('GET', authorizeUrl(baseParams(secretClient, pkce.challenge)))).status, 400, 'a document asking for a secret');
});

t.test('the oauth_clients read model rebuilds from the log; grants and tokens (service state) are left alone', async (t) => {
  await registerClient({ client_name: 'Rebuilt' });
  const knex = service.context.db.knex;
  const clients = async () => knex('oauth_clients').orderBy('client_id').select();
  const before = await clients();
  const grants = await knex('oauth_grants').count<{ n: string }[]>('* as n');
  t.ok(before.some((row: { client_name: string }) => row.client_name === 'Rebuilt'));
  await service.context.projections.rebuild('oauth-clients');
  t.same(await clients(), before);
  t.same(await knex('oauth_grants').count<{ n: string }[]>('* as n'), grants);
});

/** Discovery, registration (or a metadata document), the browser's consent, the token and a refresh, all by the MCP SDK's own client. */
async function sdkFlow(t: Test, provider: SdkAuthProvider) {
  t.equal(await sdkAuth(provider, { serverUrl: mcp }), 'REDIRECT');
  const url = provider.authorizationUrl;
  if (!url) throw new Error('the SDK did not redirect');
  t.equal(`${url.origin}${url.pathname}`, `${issuer}/api/v1/oauth/authorize`);
  t.equal(url.searchParams.get('code_challenge_method'), 'S256');
  t.equal(url.searchParams.get('resource'), mcp, 'the SDK names the resource from the protected-resource document');
  const browser = new TestBrowser(issuer);
  const back = await approve(browser, Object.fromEntries(url.searchParams));
  t.equal(back.searchParams.get('state'), 'sdk-state');
  t.equal(await sdkAuth(provider, { serverUrl: mcp, authorizationCode: back.searchParams.get('code') ?? '' }), 'AUTHORIZED');
  const first = provider.saved;
  t.ok(first?.access_token);
  const claims = await service.context.oauth.verifyAccessToken(first?.access_token ?? '', mcp);
  t.equal(claims.sub, alice.user.id);
  t.equal(await sdkAuth(provider, { serverUrl: mcp }), 'AUTHORIZED', 'the SDK refreshes with the refresh token');
  t.not(provider.saved?.refresh_token, first?.refresh_token, 'rotated');
  return claims;
}

t.test('the MCP SDK client: discovery, dynamic registration, code flow and refresh', async (t) => {
  const provider = new SdkAuthProvider(REDIRECT);
  const claims = await sdkFlow(t, provider);
  t.equal(claims.client_id, provider.information?.client_id, 'the client it registered');
  t.ok(await service.context.db.knex('oauth_clients').where({ client_id: claims.client_id, client_name: 'SDK client' }).first(), 'registered through the endpoint');
});

t.test('the MCP SDK client with a Client ID Metadata Document', async (t) => {
  const url = 'https://clients.test/sdk/client.json';
  documents.set('/sdk/client.json', { body: { client_id: url, client_name: 'SDK document client', redirect_uris: [REDIRECT], grant_types: ['authorization_code', 'refresh_token'], token_endpoint_auth_method: 'none' } });
  const claims = await sdkFlow(t, new SdkAuthProvider(REDIRECT, url));
  t.equal(claims.client_id, url, 'the document URL is the client id: no registration');
});

t.test('profile production: cookies are Secure, the issuer is the configured one', async (t) => {
  const production = await startTestService({ overrides: { profile: 'production', oauth: { issuer: 'https://kg.example.org' }, bootstrap: { auto_promote_first_user: false } } });
  t.teardown(() => production.close());
  const registered = await production.call('POST', '/api/v1/oauth/register', { body: { client_name: 'Prod', redirect_uris: [REDIRECT] } });
  t.equal(registered.status, 201);
  const page = await production.call('GET', authorizeUrl(baseParams(registered.body.client_id, newPkce().challenge)));
  t.equal(page.status, 200);
  const cookies = [page.headers['set-cookie']].flat().map(String);
  t.ok(cookies.length > 0 && cookies.every((line) => /;\s*Secure/i.test(line)), 'Secure');
  // Written by src/api/cookies.ts, the service's one cookie writer (its attributes in its order), not by @fastify/cookie.
  const nonce = /^fl_oauth_csrf=([A-Za-z0-9_-]{43});/.exec(cookies[0] ?? '')?.[1] ?? '';
  t.same(cookies, [cookieHeader('production', 'fl_oauth_csrf', nonce, { path: OAUTH_PATHS.authorize, maxAgeSeconds: 3600 })], 'the CSRF cookie as cookieHeader writes it');
  const denied = await production.call('GET', authorizeUrl(baseParams(registered.body.client_id, newPkce().challenge, { code_challenge_method: 'plain' })));
  t.equal(new URL(String(denied.headers.location)).searchParams.get('iss'), 'https://kg.example.org');
});

/** A createInvestigation tool call on the MCP endpoint with `bearer`; `requestId` correlates the event it appends. */
async function createInvestigationOverMcp(bearer: string, repository: string, requestId: string): Promise<{ status: number; isError: boolean; text: string }> {
  const response = await fetch(mcp, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${bearer}`, 'x-request-id': requestId },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'createInvestigation', arguments: { repository, title: `raced ${requestId}` } } }),
  });
  const body = await response.text();
  if (response.status !== 200) return { status: response.status, isError: true, text: body };
  const result = JSON.parse(body).result as { isError?: boolean; content: Array<{ text: string }> };
  return { status: 200, isError: result.isError === true, text: result.content[0]?.text ?? '' };
}

t.test('tool calls sent with an access token beside its revocation: each lands before the revocation answers or is refused, with nothing written', async (t) => {
  const repository = (await service.call('POST', '/api/v1/repositories', { token: alice.token, body: { name: 'Revoked while used over MCP' } })).body.id;
  const client = await registerClient();
  for (let round = 0; round < 4; round++) {
    const pkce = newPkce();
    const issued = await token({ grant_type: 'authorization_code', code: await codeFor(client.client_id, pkce.challenge), redirect_uri: REDIRECT, client_id: client.client_id, code_verifier: pkce.verifier });
    t.equal(issued.status, 200);
    const ids = [0, 1, 2, 3, 4, 5].map((n) => `oauth-raced-${round}-${n}`);
    await checkWritesBesideTheirEnd(t, {
      end: () =>
        postForm(`${issuer}/api/v1/oauth/revoke`, { token: issued.body.refresh_token, client_id: client.client_id }).then((revoked) => t.equal(revoked.status, 200)),
      readLog: () => service.context.store.readAll({ types: ['InvestigationCreated'], limit: 100_000 }),
      writes: ids.map((id) => ({
        name: id,
        answer: createInvestigationOverMcp(issued.body.access_token, repository, id),
        wrote: (event: RecordedEvent) => event.correlationId === id,
      })),
      succeeded: (answer) => answer.status === 200 && !answer.isError,
      refusedAsExpected: (answer) => /revoked|invalid|permission denied/.test(answer.text),
      describe: (answer) => `${answer.status} ${answer.text}`,
    });
    t.equal((await createInvestigationOverMcp(issued.body.access_token, repository, `oauth-after-${round}`)).status, 401, 'after the revocation the token is refused');
  }
});
