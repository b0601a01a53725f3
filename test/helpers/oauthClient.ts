import { createHash, randomBytes } from 'node:crypto';

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
