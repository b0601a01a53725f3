import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { errors as joseErrors, jwtVerify, SignJWT, type JWTPayload } from 'jose';
import { MIN_TOKEN_TTL_MS } from '../config/duration.js';

/**
 * Bearer tokens. Two kinds of JWT (HS256, secret `auth.jwt_secret`), told apart by the `typ`
 * claim so one can never be replayed as the other:
 *   - `session`: from register / login / refresh; `sid` names the server-side session, which
 *     logout deletes. Verification here is stateless: the caller must also check that `sid`
 *     is still live.
 *   - `access`: OAuth 2.1 access tokens for tool clients, with `scope`, `client_id`, `aud` and
 *     `sid`, the grant they descend from. Verification here is stateless too: the resource
 *     server must also check the grant (`context.oauth.verifyAccessToken`).
 * Opaque tokens (refresh tokens, API keys, authorization codes) are random strings with a
 * recognisable prefix and are stored only as `hashToken(raw)`.
 */

const ALGORITHM = 'HS256';
/** RFC 7518 3.2: an HS256 key must be at least as long as the hash output (256 bits). */
const MIN_SECRET_BYTES = 32;
const DEFAULT_ACCESS_TTL_MS = 15 * 60 * 1000;

/** Prefixes make a leaked token recognisable (secret scanners, logs) and its kind obvious. */
export const OPAQUE_TOKEN_PREFIX = {
  refreshToken: 'flr_',
  apiKey: 'fl_',
  authorizationCode: 'flc_',
} as const;

export type TokenType = 'session' | 'access';

interface CommonClaims {
  sub: string;
  iss: string;
  iat: number;
  exp: number;
  jti: string;
}

export interface SessionClaims extends CommonClaims {
  typ: 'session';
  sid: string;
}

export interface AccessClaims extends CommonClaims {
  typ: 'access';
  scope: string;
  client_id: string;
  aud: string;
  /**
   * The OAuth grant the token descends from. Every access token has one: the resource server
   * checks the grant is live and that `sub`, `client_id` and `aud` are the grant's
   * (src/app/oauth.ts `verifyAccessToken`), so a token the grant table does not vouch for is refused.
   */
  sid: string;
}

export interface SignedToken {
  token: string;
  expiresAt: Date;
}

export interface TokenServiceOptions {
  secret: string;
  issuer: string;
  sessionTtlMs: number;
  /** `oauth.access_token_ttl`; 15 minutes when absent. */
  accessTtlMs?: number;
  /** Milliseconds since the epoch; injectable so tests can move the clock. */
  now?: () => number;
}

export interface TokenService {
  signSession(input: { userId: string; sessionId: string }): Promise<SignedToken>;
  signAccessToken(input: { userId: string; clientId: string; scope: string; audience: string; grantId: string }): Promise<SignedToken>;
  verify(token: string, expectedTyp: 'session'): Promise<SessionClaims>;
  /** Access tokens are only accepted by the resource they were issued for (RFC 8707). */
  verify(token: string, expectedTyp: 'access', expectedAudience: string | string[]): Promise<AccessClaims>;
}

export type InvalidTokenReason = 'expired' | 'invalid';

/** Any token that must not be honoured; the HTTP layer answers 401 for both reasons. */
export class InvalidTokenError extends Error {
  override readonly name = 'InvalidTokenError';
  constructor(
    readonly reason: InvalidTokenReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export function createTokenService(options: TokenServiceOptions): TokenService {
  const { issuer, sessionTtlMs, accessTtlMs = DEFAULT_ACCESS_TTL_MS, now = Date.now } = options;
  const key = new TextEncoder().encode(options.secret);
  if (key.length < MIN_SECRET_BYTES) throw new RangeError(`token secret must be at least ${MIN_SECRET_BYTES} bytes`);
  if (typeof issuer !== 'string' || issuer.length === 0) throw new RangeError('token issuer must be a non-empty string');
  assertPositiveTtl('sessionTtlMs', sessionTtlMs);
  assertPositiveTtl('accessTtlMs', accessTtlMs);

  async function sign(subject: string, claims: JWTPayload, ttlMs: number): Promise<SignedToken> {
    if (typeof subject !== 'string' || subject.length === 0) throw new TypeError('token subject must be a non-empty string');
    const issuedAtMs = now();
    const issuedAt = Math.floor(issuedAtMs / 1000);
    const expiresAt = Math.floor((issuedAtMs + ttlMs) / 1000);
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: ALGORITHM, typ: 'JWT' })
      .setSubject(subject)
      .setIssuer(issuer)
      .setIssuedAt(issuedAt)
      .setExpirationTime(expiresAt)
      .setJti(randomUUID())
      .sign(key);
    return { token, expiresAt: new Date(expiresAt * 1000) };
  }

  async function verify(token: string, expectedTyp: TokenType, expectedAudience?: string | string[]): Promise<SessionClaims | AccessClaims> {
    if (typeof token !== 'string' || token.length === 0) throw new InvalidTokenError('invalid', 'token is empty');
    if (expectedTyp === 'access' && (expectedAudience === undefined || expectedAudience.length === 0)) {
      throw new TypeError('verifying an access token needs the expected audience');
    }
    if (!isCanonicalCompactJws(token)) throw new InvalidTokenError('invalid', 'token is malformed or its signature does not verify');
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, key, {
        algorithms: [ALGORITHM],
        issuer,
        audience: expectedTyp === 'access' ? expectedAudience : undefined,
        currentDate: new Date(now()),
        requiredClaims: ['sub', 'iat', 'exp', 'jti', 'typ'],
      }));
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) throw new InvalidTokenError('expired', 'token has expired', { cause: error });
      throw new InvalidTokenError('invalid', 'token is malformed or its signature does not verify', { cause: error });
    }
    if (payload.typ !== expectedTyp) throw new InvalidTokenError('invalid', `expected a ${expectedTyp} token`);
    const claims = expectedTyp === 'session' ? asSessionClaims(payload) : asAccessClaims(payload);
    if (!claims) throw new InvalidTokenError('invalid', `${expectedTyp} token is missing claims`);
    return claims;
  }

  return {
    // async so that bad input rejects like every other failure, rather than throwing synchronously.
    signSession: async ({ userId, sessionId }) => {
      if (typeof sessionId !== 'string' || sessionId.length === 0) throw new TypeError('sessionId must be a non-empty string');
      return sign(userId, { typ: 'session', sid: sessionId }, sessionTtlMs);
    },
    signAccessToken: async ({ userId, clientId, scope, audience, grantId }) => {
      if (typeof clientId !== 'string' || clientId.length === 0) throw new TypeError('clientId must be a non-empty string');
      if (typeof audience !== 'string' || audience.length === 0) throw new TypeError('audience must be a non-empty string');
      if (typeof scope !== 'string') throw new TypeError('scope must be a string');
      if (typeof grantId !== 'string' || grantId.length === 0) throw new TypeError('grantId must be a non-empty string');
      return sign(userId, { typ: 'access', scope, client_id: clientId, aud: audience, sid: grantId }, accessTtlMs);
    },
    // One implementation behind the two overloads of the interface.
    verify: verify as TokenService['verify'],
  };
}

const BASE64URL_SEGMENT = /^[A-Za-z0-9_-]*$/;

/**
 * RFC 7515 7.1 and 2: three segments of base64url without padding. jose decodes a segment with
 * `atob`, which also takes `=` padding, ASCII whitespace and non-zero trailing bits, so one
 * signature could be spelt several ways and each spelling was accepted. Only the spelling an
 * encoder writes passes: re-encoding the decoded bytes must give the segment back.
 */
function isCanonicalCompactJws(token: string): boolean {
  const segments = token.split('.');
  return segments.length === 3 && segments.every((segment) => BASE64URL_SEGMENT.test(segment) && Buffer.from(segment, 'base64url').toString('base64url') === segment);
}

function assertPositiveTtl(name: string, ttlMs: number): void {
  if (!Number.isFinite(ttlMs) || ttlMs < MIN_TOKEN_TTL_MS) throw new RangeError(`${name} must be at least ${MIN_TOKEN_TTL_MS} ms`);
}

function isNonEmptyString(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0;
}

function commonClaims(payload: JWTPayload): CommonClaims | null {
  const { sub, iss, iat, exp, jti } = payload;
  if (!isNonEmptyString(sub) || !isNonEmptyString(iss) || !isNonEmptyString(jti)) return null;
  if (typeof iat !== 'number' || typeof exp !== 'number') return null;
  return { sub, iss, iat, exp, jti };
}

function asSessionClaims(payload: JWTPayload): SessionClaims | null {
  const common = commonClaims(payload);
  if (!common || !isNonEmptyString(payload.sid)) return null;
  return { ...common, typ: 'session', sid: payload.sid };
}

function asAccessClaims(payload: JWTPayload): AccessClaims | null {
  const common = commonClaims(payload);
  const { scope, client_id: clientId, aud, sid } = payload;
  if (!common || typeof scope !== 'string' || !isNonEmptyString(clientId) || !isNonEmptyString(aud) || !isNonEmptyString(sid)) return null;
  return { ...common, typ: 'access', scope, client_id: clientId, aud, sid };
}

/** 32 random bytes as base64url (256 bits: unguessable, no padding, URL- and header-safe). */
export function newOpaqueToken(prefix = ''): string {
  return prefix + randomBytes(32).toString('base64url');
}

/**
 * How refresh tokens, API keys and authorization codes are stored and looked up. A plain
 * SHA-256 suffices (no salt, no slow hash): the input is 256 random bits, not a password.
 */
export function hashToken(raw: string): string {
  return createHash('sha256').update(raw, 'utf8').digest('hex');
}
