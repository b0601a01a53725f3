import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * PKCE (RFC 7636) with S256 only: OAuth 2.1 and the spec refuse `plain`, which would let anyone
 * who saw the authorization request redeem its code.
 */
export const PKCE_METHOD = 'S256';

/** RFC 7636 4.1: 43 to 128 characters of [A-Z] / [a-z] / [0-9] / "-" / "." / "_" / "~". */
const VERIFIER_PATTERN = /^[A-Za-z0-9\-._~]{43,128}$/;
/** An S256 challenge is the unpadded base64url of a SHA-256: exactly 43 characters. */
const S256_CHALLENGE_PATTERN = /^[A-Za-z0-9_-]{43}$/;

export const isValidCodeVerifier = (verifier: string): boolean => VERIFIER_PATTERN.test(verifier);
export const isValidS256Challenge = (challenge: string): boolean => S256_CHALLENGE_PATTERN.test(challenge);

/** BASE64URL(SHA256(ASCII(code_verifier))), unpadded. */
export function s256Challenge(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url');
}

/** Whether `verifier` is well formed and hashes to `challenge` (compared in constant time). */
export function verifyCodeVerifier(verifier: string, challenge: string): boolean {
  if (!isValidCodeVerifier(verifier) || !isValidS256Challenge(challenge)) return false;
  const expected = Buffer.from(challenge, 'ascii');
  const actual = Buffer.from(s256Challenge(verifier), 'ascii');
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}
