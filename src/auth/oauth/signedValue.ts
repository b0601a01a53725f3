import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Small tamper-proof values for the authorization pages (the login cookie, the CSRF token, the
 * authorization request carried through the forms): base64url JSON plus an HMAC-SHA256 under a
 * key derived from `auth.jwt_secret` for one purpose, so a value made for one use is never
 * accepted for another.
 */
export interface SignedValues {
  sign(purpose: string, payload: object, ttlMs: number): string;
  /** The payload, or null for a forged, foreign-purpose, malformed or expired value. */
  verify<T extends object>(purpose: string, value: string | undefined): T | null;
  /** A keyed hash of `data` for `purpose` (base64url), e.g. the CSRF token of a cookie nonce. */
  mac(purpose: string, data: string): string;
}

export function createSignedValues(secret: string, now: () => number = Date.now): SignedValues {
  const keyFor = (purpose: string) => createHmac('sha256', secret).update(`factlog oauth ${purpose}`).digest();
  const mac = (purpose: string, data: string) => createHmac('sha256', keyFor(purpose)).update(data).digest('base64url');
  return {
    mac,
    sign(purpose, payload, ttlMs) {
      const body = Buffer.from(JSON.stringify({ ...payload, exp: now() + ttlMs }), 'utf8').toString('base64url');
      return `${body}.${mac(purpose, body)}`;
    },
    verify<T extends object>(purpose: string, value: string | undefined): T | null {
      if (typeof value !== 'string' || value.length > 16_384) return null;
      const dot = value.indexOf('.');
      if (dot <= 0) return null;
      const body = value.slice(0, dot);
      if (!equalStrings(value.slice(dot + 1), mac(purpose, body))) return null;
      let payload: unknown;
      try {
        payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
      } catch {
        return null;
      }
      if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return null;
      const { exp } = payload as { exp?: unknown };
      if (typeof exp !== 'number' || exp <= now()) return null;
      return payload as T;
    },
  };
}

/** Constant-time comparison of two strings. */
export function equalStrings(a: string, b: string): boolean {
  const left = Buffer.from(a, 'utf8');
  const right = Buffer.from(b, 'utf8');
  return left.length === right.length && timingSafeEqual(left, right);
}
