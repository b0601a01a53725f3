import t from 'tap';
import { isValidCodeVerifier, isValidS256Challenge, s256Challenge, verifyCodeVerifier } from '../../../src/auth/oauth/pkce.js';

// RFC 7636 Appendix B.
const VERIFIER = 'dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk';
const CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';

t.test('S256 of the RFC 7636 example', async (t) => {
  t.equal(s256Challenge(VERIFIER), CHALLENGE);
  t.ok(verifyCodeVerifier(VERIFIER, CHALLENGE));
  t.notOk(verifyCodeVerifier(VERIFIER.replace('d', 'e'), CHALLENGE), 'another verifier');
  t.notOk(verifyCodeVerifier(CHALLENGE, CHALLENGE), 'plain: the challenge as its own verifier');
});

t.test('verifier: 43 to 128 unreserved characters', async (t) => {
  t.ok(isValidCodeVerifier('a'.repeat(43)));
  t.ok(isValidCodeVerifier('A-._~'.repeat(25) + 'abc'));
  t.notOk(isValidCodeVerifier('a'.repeat(42)), 'too short');
  t.notOk(isValidCodeVerifier('a'.repeat(129)), 'too long');
  t.notOk(isValidCodeVerifier('a'.repeat(42) + '+'), 'a reserved character');
  t.notOk(isValidCodeVerifier('a'.repeat(42) + '='), 'padding');
  t.notOk(verifyCodeVerifier('a'.repeat(42), s256Challenge('a'.repeat(42))), 'a short verifier never verifies, even when it hashes right');
});

t.test('challenge: exactly 43 base64url characters', async (t) => {
  t.ok(isValidS256Challenge(CHALLENGE));
  t.notOk(isValidS256Challenge(`${CHALLENGE}=`), 'padded');
  t.notOk(isValidS256Challenge(CHALLENGE.slice(1)), 'short');
  t.notOk(isValidS256Challenge(CHALLENGE.replace('-', '+')), 'base64, not base64url');
});
