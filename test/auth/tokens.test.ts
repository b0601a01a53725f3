import t, { type Test } from 'tap';
import { SignJWT } from 'jose';
import { createTokenService, hashToken, InvalidTokenError, newOpaqueToken, OPAQUE_TOKEN_PREFIX } from '../../src/auth/tokens.js';

const SECRET = 'test-secret-that-is-at-least-32-bytes-long!';
const OTHER_SECRET = 'another-secret-that-is-at-least-32-bytes-long';
const ISSUER = 'https://factlog.test';
const HOUR = 60 * 60 * 1000;
const T0 = Date.UTC(2025, 0, 1, 12, 0, 0);
const RESOURCE = 'https://factlog.test/api/v1/mcp';

function clock(start = T0) {
  let current = start;
  return { now: () => current, advance: (ms: number) => void (current += ms) };
}

function service(overrides: Partial<Parameters<typeof createTokenService>[0]> = {}) {
  return createTokenService({ secret: SECRET, issuer: ISSUER, sessionTtlMs: 24 * HOUR, now: () => T0, ...overrides });
}

async function rejectsWith(t: Test, promise: Promise<unknown>, reason: 'expired' | 'invalid', name: string) {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  t.ok(error instanceof InvalidTokenError, `${name}: InvalidTokenError`);
  t.equal((error as InvalidTokenError | undefined)?.reason, reason, `${name}: reason ${reason}`);
}

function base64url(value: object): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

t.test('a session token round-trips with all its claims', async (t) => {
  const tokens = service();
  const { token, expiresAt } = await tokens.signSession({ userId: 'user-1', sessionId: 'session-1' });
  t.equal(expiresAt.getTime(), T0 + 24 * HOUR);
  const claims = await tokens.verify(token, 'session');
  t.match(claims, { sub: 'user-1', sid: 'session-1', typ: 'session', iss: ISSUER, iat: T0 / 1000, exp: (T0 + 24 * HOUR) / 1000 });
  t.match(claims.jti, /^[0-9a-f-]{36}$/);
  const header = JSON.parse(Buffer.from(token.split('.')[0], 'base64url').toString());
  t.same(header, { alg: 'HS256', typ: 'JWT' });
  const second = await tokens.signSession({ userId: 'user-1', sessionId: 'session-1' });
  t.not((await tokens.verify(second.token, 'session')).jti, claims.jti, 'every token gets its own jti');
});

t.test('an expired session token is rejected as expired', async (t) => {
  const time = clock();
  const tokens = service({ now: time.now, sessionTtlMs: HOUR });
  const { token } = await tokens.signSession({ userId: 'u', sessionId: 's' });
  time.advance(HOUR - 1000);
  t.equal((await tokens.verify(token, 'session')).sub, 'u', 'still valid one second before expiry');
  time.advance(1000);
  await rejectsWith(t, tokens.verify(token, 'session'), 'expired', 'at exp');
  time.advance(365 * 24 * HOUR);
  await rejectsWith(t, tokens.verify(token, 'session'), 'expired', 'a year later');
});

t.test('a token signed with another secret is invalid', async (t) => {
  const { token } = await service({ secret: OTHER_SECRET }).signSession({ userId: 'u', sessionId: 's' });
  await rejectsWith(t, service().verify(token, 'session'), 'invalid', 'other secret');
});

t.test('an expired token with a bad signature is invalid, not expired', async (t) => {
  const { token } = await service({ secret: OTHER_SECRET, now: () => T0 - 48 * HOUR }).signSession({ userId: 'u', sessionId: 's' });
  await rejectsWith(t, service().verify(token, 'session'), 'invalid', 'signature checked before expiry');
});

t.test('a token from another issuer is invalid', async (t) => {
  const { token } = await service({ issuer: 'https://elsewhere.test' }).signSession({ userId: 'u', sessionId: 's' });
  await rejectsWith(t, service().verify(token, 'session'), 'invalid', 'other issuer');
});

t.test('session and access tokens cannot stand in for each other', async (t) => {
  const tokens = service();
  const session = await tokens.signSession({ userId: 'u', sessionId: 's' });
  const access = await tokens.signAccessToken({ userId: 'u', clientId: 'client-1', scope: 'mcp', audience: RESOURCE, grantId: 'g' });
  await rejectsWith(t, tokens.verify(session.token, 'access', RESOURCE), 'invalid', 'session as access');
  await rejectsWith(t, tokens.verify(access.token, 'session'), 'invalid', 'access as session');
});

t.test('access tokens carry scope, client and audience, and last accessTtlMs (15 min default)', async (t) => {
  const tokens = service();
  const { token, expiresAt } = await tokens.signAccessToken({ userId: 'u', clientId: 'client-1', scope: 'mcp', audience: RESOURCE, grantId: 'g' });
  t.equal(expiresAt.getTime(), T0 + 15 * 60 * 1000);
  t.match(await tokens.verify(token, 'access', RESOURCE), { sub: 'u', typ: 'access', scope: 'mcp', client_id: 'client-1', aud: RESOURCE, iss: ISSUER, sid: 'g' });
  t.match(await tokens.verify(token, 'access', ['https://other.test', RESOURCE]), { aud: RESOURCE }, 'any of several audiences');
  await rejectsWith(t, tokens.verify(token, 'access', 'https://other.test/api/v1/mcp'), 'invalid', 'wrong audience');
  await t.rejects(tokens.verify(token, 'access', undefined as unknown as string), TypeError, 'audience is required for access tokens');
  const custom = await service({ accessTtlMs: 5 * 60 * 1000 }).signAccessToken({ userId: 'u', clientId: 'c', scope: 'mcp', audience: RESOURCE, grantId: 'g' });
  t.equal(custom.expiresAt.getTime(), T0 + 5 * 60 * 1000);
});

t.test('every access token names its OAuth grant (claim sid): signing needs one, verifying requires it', async (t) => {
  const tokens = service();
  const withGrant = await tokens.signAccessToken({ userId: 'u', clientId: 'c', scope: 'mcp', audience: RESOURCE, grantId: 'grant-1' });
  t.equal((await tokens.verify(withGrant.token, 'access', RESOURCE)).sid, 'grant-1');
  await t.rejects(tokens.signAccessToken({ userId: 'u', clientId: 'c', scope: 'mcp', audience: RESOURCE, grantId: '' }), TypeError, 'empty grant id');
  await t.rejects(tokens.signAccessToken({ userId: 'u', clientId: 'c', scope: 'mcp', audience: RESOURCE } as unknown as Parameters<typeof tokens.signAccessToken>[0]), TypeError, 'no grant id');

  // What anyone knowing the secret could sign.
  const key = new TextEncoder().encode(SECRET);
  const base = { typ: 'access', sub: 'u', client_id: 'c', scope: 'mcp', aud: RESOURCE, iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 600, jti: 'j' };
  const forged = await new SignJWT(base).setProtectedHeader({ alg: 'HS256' }).sign(key);
  await rejectsWith(t, tokens.verify(forged, 'access', RESOURCE), 'invalid', 'well signed, without sid');
  for (const sid of ['', 7, null]) {
    const bad = await new SignJWT({ ...base, sid } as Record<string, unknown>).setProtectedHeader({ alg: 'HS256' }).sign(key);
    await rejectsWith(t, tokens.verify(bad, 'access', RESOURCE), 'invalid', `sid ${JSON.stringify(sid)}`);
  }
  const named = await new SignJWT({ ...base, sid: 'grant-2' }).setProtectedHeader({ alg: 'HS256' }).sign(key);
  t.equal((await tokens.verify(named, 'access', RESOURCE)).sid, 'grant-2', 'the same claims with a sid pass this (stateless) check');
});

t.test('a tampered payload is invalid', async (t) => {
  const tokens = service();
  const { token } = await tokens.signSession({ userId: 'user-1', sessionId: 's' });
  const [header, payload, signature] = token.split('.');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  const forged = [header, base64url({ ...claims, sub: 'admin' }), signature].join('.');
  await rejectsWith(t, tokens.verify(forged, 'session'), 'invalid', 'sub changed');
  const extended = [header, base64url({ ...claims, exp: claims.exp + 1_000_000 }), signature].join('.');
  await rejectsWith(t, tokens.verify(extended, 'session'), 'invalid', 'exp extended');
  const flipped = signature.slice(0, -2) + (signature.at(-2) === 'A' ? 'B' : 'A') + signature.at(-1);
  await rejectsWith(t, tokens.verify([header, payload, flipped].join('.'), 'session'), 'invalid', 'signature changed');
});

t.test('alg none and other algorithms are rejected', async (t) => {
  const tokens = service();
  const claims = { sub: 'admin', sid: 's', typ: 'session', iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 3600, jti: 'x' };
  const unsigned = [base64url({ alg: 'none', typ: 'JWT' }), base64url(claims), ''].join('.');
  await rejectsWith(t, tokens.verify(unsigned, 'session'), 'invalid', 'alg none');
  const noneWithSignature = [base64url({ alg: 'none' }), base64url(claims), 'c2ln'].join('.');
  await rejectsWith(t, tokens.verify(noneWithSignature, 'session'), 'invalid', 'alg none with a signature');
  const key = new TextEncoder().encode(SECRET);
  const hs512 = await new SignJWT(claims).setProtectedHeader({ alg: 'HS512' }).sign(key);
  await rejectsWith(t, tokens.verify(hs512, 'session'), 'invalid', 'HS512 with the right secret');
});

t.test('well-signed tokens missing required claims are invalid', async (t) => {
  const tokens = service();
  const key = new TextEncoder().encode(SECRET);
  const base = { sub: 'u', sid: 's', typ: 'session', iss: ISSUER, iat: T0 / 1000, exp: T0 / 1000 + 3600, jti: 'j' };
  for (const missing of ['sub', 'sid', 'typ', 'exp', 'jti', 'iat'] as const) {
    const claims: Record<string, unknown> = { ...base };
    delete claims[missing];
    const token = await new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).sign(key);
    await rejectsWith(t, tokens.verify(token, 'session'), 'invalid', `without ${missing}`);
  }
  const emptySid = await new SignJWT({ ...base, sid: '' }).setProtectedHeader({ alg: 'HS256' }).sign(key);
  await rejectsWith(t, tokens.verify(emptySid, 'session'), 'invalid', 'empty sid');
  const numericSub = await new SignJWT({ ...base, sub: 7 } as unknown as Record<string, unknown>).setProtectedHeader({ alg: 'HS256' }).sign(key);
  await rejectsWith(t, tokens.verify(numericSub, 'session'), 'invalid', 'numeric sub');
});

t.test('malformed tokens are invalid', async (t) => {
  const tokens = service();
  for (const malformed of ['', 'abc', 'a.b.c', 'a.b', '...', 'Bearer x.y.z', 'é.é.é']) {
    await rejectsWith(t, tokens.verify(malformed, 'session'), 'invalid', JSON.stringify(malformed));
  }
  await rejectsWith(t, tokens.verify(undefined as unknown as string, 'session'), 'invalid', 'undefined');
});

/**
 * Spellings of a token's segments that decode to the same bytes (or would, on a decoder that
 * maps the base64 alphabet onto base64url) but are not the unpadded base64url RFC 7515 requires.
 */
function respellings(token: string): [string, string][] {
  const [header, payload, signature] = token.split('.');
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  // A 43-character segment ends in 4 bits of data and 2 zero bits: the other three endings read the same.
  const last = alphabet.indexOf(signature[signature.length - 1]);
  const trailingBits = alphabet[(last & ~3) | ((last + 1) & 3)];
  const standardAlphabet = (segment: string) => segment.replace(/-/g, '+').replace(/_/g, '/');
  return [
    ['signature padded', `${token}=`],
    ['signature doubly padded', `${token}==`],
    ['header padded', `${header}==.${payload}.${signature}`],
    ['payload padded', `${header}.${payload}=.${signature}`],
    ['signature with non-zero trailing bits', `${header}.${payload}.${signature.slice(0, -1)}${trailingBits}`],
    ['a newline in the signature', `${header}.${payload}.${signature.slice(0, 20)}\n${signature.slice(20)}`],
    ['a space in the signature', `${header}.${payload}.${signature.slice(0, 20)} ${signature.slice(20)}`],
    ['a tab in the payload', `${header}.${payload.slice(0, 8)}\t${payload.slice(8)}.${signature}`],
    ['the base64 alphabet', `${standardAlphabet(header)}.${standardAlphabet(payload)}.${standardAlphabet(signature)}`],
    ['a fourth segment', `${token}.`],
  ];
}

t.test('a token is accepted only as unpadded base64url (RFC 7515): padding, whitespace, trailing bits or + and / make it invalid', async (t) => {
  const tokens = service();
  // Signatures are random (claim jti): one with a - or _ to spell with + or /.
  const withUrlCharacters = async (sign: () => Promise<{ token: string }>) => {
    for (;;) {
      const { token } = await sign();
      if (/[-_]/.test(token.split('.')[2])) return token;
    }
  };
  const session = await withUrlCharacters(() => tokens.signSession({ userId: 'user-1', sessionId: 'session-1' }));
  const access = await withUrlCharacters(() => tokens.signAccessToken({ userId: 'user-1', clientId: 'client-1', scope: 'mcp', audience: RESOURCE, grantId: 'grant-1' }));
  t.ok(await tokens.verify(session, 'session'), 'the session token as signed');
  t.ok(await tokens.verify(access, 'access', RESOURCE), 'the access token as signed');
  for (const [name, respelt] of respellings(session)) await rejectsWith(t, tokens.verify(respelt, 'session'), 'invalid', `session token, ${name}`);
  for (const [name, respelt] of respellings(access)) await rejectsWith(t, tokens.verify(respelt, 'access', RESOURCE), 'invalid', `access token, ${name}`);
});

t.test('the service refuses unsafe configuration and bad sign inputs', async (t) => {
  t.throws(() => service({ secret: 'short' }), RangeError, 'secret under 32 bytes');
  t.throws(() => service({ secret: '' }), RangeError, 'empty secret');
  t.throws(() => service({ issuer: '' }), RangeError, 'empty issuer');
  t.throws(() => service({ sessionTtlMs: 0 }), RangeError, 'zero ttl');
  t.throws(() => service({ sessionTtlMs: Number.NaN }), RangeError, 'NaN ttl');
  t.throws(() => service({ accessTtlMs: -5 }), RangeError, 'negative access ttl');
  const tokens = service();
  await t.rejects(tokens.signSession({ userId: '', sessionId: 's' }), TypeError, 'empty user id');
  await t.rejects(tokens.signSession({ userId: 'u', sessionId: '' }), TypeError, 'empty session id');
  await t.rejects(tokens.signAccessToken({ userId: '', clientId: 'c', scope: 'mcp', audience: RESOURCE, grantId: 'g' }), TypeError, 'empty user id (access)');
  await t.rejects(tokens.signAccessToken({ userId: 'u', clientId: '', scope: 'mcp', audience: RESOURCE, grantId: 'g' }), TypeError, 'empty client id');
  await t.rejects(tokens.signAccessToken({ userId: 'u', clientId: 'c', scope: 'mcp', audience: '', grantId: 'g' }), TypeError, 'empty audience');
});

t.test('opaque tokens: 32 random bytes in base64url behind an optional prefix', async (t) => {
  const plain = newOpaqueToken();
  t.match(plain, /^[A-Za-z0-9_-]{43}$/);
  t.equal(Buffer.from(plain, 'base64url').length, 32);
  const refresh = newOpaqueToken(OPAQUE_TOKEN_PREFIX.refreshToken);
  t.match(refresh, /^flr_[A-Za-z0-9_-]{43}$/);
  t.match(newOpaqueToken(OPAQUE_TOKEN_PREFIX.apiKey), /^fl_[A-Za-z0-9_-]{43}$/);
  const many = new Set(Array.from({ length: 1000 }, () => newOpaqueToken()));
  t.equal(many.size, 1000, 'no repeats');
});

t.test('hashToken is SHA-256 hex', async (t) => {
  t.equal(hashToken('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'FIPS 180-2 test vector');
  const raw = newOpaqueToken('flr_');
  t.match(hashToken(raw), /^[0-9a-f]{64}$/);
  t.equal(hashToken(raw), hashToken(raw), 'deterministic, so it can be looked up');
  t.not(hashToken(raw), hashToken(raw + 'x'));
  t.not(hashToken(raw), raw);
});
