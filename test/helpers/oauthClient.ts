import { createHash, randomBytes } from 'node:crypto';
import type { OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js';

/**
 * A browser and an OAuth client for tests of the authorization server over real HTTP: the
 * browser keeps cookies and never follows redirects, so each step can be looked at.
 */
export interface PageResponse {
  status: number;
  headers: Headers;
  text: string;
  setCookies: string[];
}

export class TestBrowser {
  readonly cookies = new Map<string, string>();
  constructor(readonly baseUrl: string) {}

  async request(method: 'GET' | 'POST', path: string, form?: Record<string, string>): Promise<PageResponse> {
    const headers: Record<string, string> = {};
    if (this.cookies.size > 0) headers.cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    let body: string | undefined;
    if (form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(form).toString();
    }
    const response = await fetch(new URL(path, this.baseUrl), { method, headers, body, redirect: 'manual' });
    const setCookies = response.headers.getSetCookie();
    for (const line of setCookies) {
      const pair = line.split(';')[0];
      const equals = pair.indexOf('=');
      this.cookies.set(pair.slice(0, equals).trim(), pair.slice(equals + 1).trim());
    }
    return { status: response.status, headers: response.headers, text: await response.text(), setCookies };
  }
}

/** The value of a form field of an HTML page (`name="..." value="..."`), entities decoded. */
export function formField(html: string, name: string): string | null {
  const match = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  if (!match) return null;
  return match[1].replace(/&#(\d+);/g, (_all, code: string) => String.fromCharCode(Number(code)));
}

export function newPkce(): { verifier: string; challenge: string } {
  const verifier = randomBytes(48).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/**
 * The parsed JSON of a reply. Loosely typed on purpose, like `TestService.call`'s body: tests
 * read the fields they assert on, and a missing one fails the assertion.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type JsonBody = any;

export async function postForm(url: string, form: Record<string, string | string[]>): Promise<{ status: number; headers: Headers; body: JsonBody }> {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(form)) for (const item of Array.isArray(value) ? value : [value]) params.append(name, item);
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: params.toString() });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text === '' ? null : JSON.parse(text) };
}

export async function postJson(url: string, body: unknown): Promise<{ status: number; body: JsonBody }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

/** The hidden fields the login and consent forms carry from page to page. */
export const formOf = (page: PageResponse) => ({ authorization_request: formField(page.text, 'authorization_request') ?? '', csrf: formField(page.text, 'csrf') ?? '' });

/**
 * The browser's way through the authorization pages: open the authorize URL, sign in on the
 * login form when it is shown, then approve or deny on the consent page. Returns the redirect
 * back to the client (its `code`, `state` and `iss`, or `error`).
 */
export async function signInAndDecide(
  browser: TestBrowser,
  authorizePath: string,
  credentials: { email: string; password: string },
  // The form sends approve or deny; a test may send anything else a client could.
  decision: string = 'approve',
): Promise<URL> {
  const loginPage = await browser.request('GET', authorizePath);
  if (loginPage.status !== 200) throw new Error(`authorize page: ${loginPage.status} ${loginPage.text}`);
  let consent = loginPage;
  if (formField(loginPage.text, 'email') !== null || loginPage.text.includes('name="password"')) {
    consent = await browser.request('POST', '/api/v1/oauth/authorize/login', { ...credentials, ...formOf(loginPage) });
    if (consent.status !== 200) throw new Error(`login: ${consent.status}`);
  }
  const decided = await browser.request('POST', '/api/v1/oauth/authorize', { decision, ...formOf(consent) });
  if (decided.status !== 302) throw new Error(`decision: ${decided.status} ${decided.text}`);
  return new URL(decided.headers.get('location') ?? '');
}

/**
 * The MCP SDK's OAuth client provider, kept in memory: it registers (or names its metadata
 * document), and where a desktop client would open a browser it remembers the authorization URL
 * for the test to drive with `signInAndDecide`.
 */
export class SdkAuthProvider implements OAuthClientProvider {
  information: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  authorizationUrl: URL | null = null;
  constructor(
    readonly redirect: string,
    readonly clientMetadataUrl?: string,
  ) {}
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata(): OAuthClientMetadata {
    return { client_name: 'SDK client', redirect_uris: [this.redirect], grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }
  state() {
    return 'sdk-state';
  }
  clientInformation() {
    return this.information;
  }
  saveClientInformation(information: OAuthClientInformationMixed) {
    this.information = information;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}
