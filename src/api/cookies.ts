import type { FastifyReply } from 'fastify';
import type { Profile } from '../config/types.js';

/** The profiles served over plain http on a laptop: there a Secure cookie would never come back. */
const DEVELOPMENT_PROFILES: ReadonlySet<Profile> = new Set(['embedded', 'dev']);

export interface CookieOptions {
  /** Lifetime in seconds; absent = a session cookie (gone when the browser closes). */
  maxAgeSeconds?: number;
  /** Defaults to `/`; narrow it to the pages that read the cookie. */
  path?: string;
  /** `Lax` by default: sent on top-level navigations back from another site (an OAuth redirect), never on cross-site subrequests. */
  sameSite?: 'Strict' | 'Lax';
}

/**
 * The one way the service writes a cookie: always `HttpOnly` (no script reads it) and `SameSite`,
 * and `Secure` outside the development profiles. Names and values are checked, so a header
 * can never be split or extended by what is put in it.
 */
export function cookieHeader(profile: Profile, name: string, value: string, options: CookieOptions = {}): string {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(name)) throw new Error(`cookie name '${name}' must be letters, digits, _ or -`);
  if (!/^[\x21\x23-\x2B\x2D-\x3A\x3C-\x5B\x5D-\x7E]*$/.test(value)) throw new Error(`cookie ${name}: the value holds characters a cookie cannot carry`);
  const parts = [`${name}=${value}`, `Path=${options.path ?? '/'}`, 'HttpOnly', `SameSite=${options.sameSite ?? 'Lax'}`];
  if (!DEVELOPMENT_PROFILES.has(profile)) parts.push('Secure');
  if (options.maxAgeSeconds !== undefined) parts.push(`Max-Age=${Math.max(0, Math.floor(options.maxAgeSeconds))}`);
  return parts.join('; ');
}

/** Adds a cookie to the reply (several cookies each get their own Set-Cookie line). */
export function setCookie(reply: FastifyReply, profile: Profile, name: string, value: string, options: CookieOptions = {}): void {
  // fastify appends to Set-Cookie instead of replacing it.
  reply.header('set-cookie', cookieHeader(profile, name, value, options));
}

/** Removes a cookie: the same attributes, empty, expired at once. */
export function clearCookie(reply: FastifyReply, profile: Profile, name: string, options: Pick<CookieOptions, 'path' | 'sameSite'> = {}): void {
  setCookie(reply, profile, name, '', { ...options, maxAgeSeconds: 0 });
}
