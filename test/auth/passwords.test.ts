import t from 'tap';
import {
  hashPassword,
  MAX_PASSWORD_BYTES,
  MAX_PASSWORD_HASH_COST,
  MIN_PASSWORD_HASH_COST,
  needsRehash,
  validatePasswordPolicy,
  verifyPassword,
} from '../../src/auth/passwords.js';

const FORMAT = /^scrypt\$32768\$8\$1\$[A-Za-z0-9+/]+={0,2}\$[A-Za-z0-9+/]+={0,2}$/;

t.test('hash and verify round trip', async (t) => {
  const encoded = await hashPassword('correct horse battery staple');
  t.match(encoded, FORMAT, 'self-describing scrypt$N$r$p$salt$hash');
  const [, , , , salt, hash] = encoded.split('$');
  t.equal(Buffer.from(salt, 'base64').length, 16, '16-byte salt');
  t.equal(Buffer.from(hash, 'base64').length, 32, '32-byte key');
  t.equal(await verifyPassword('correct horse battery staple', encoded), true);
  t.equal(await verifyPassword('correct horse battery stapl', encoded), false, 'one character short');
  t.equal(await verifyPassword('Correct horse battery staple', encoded), false, 'case matters');
  t.equal(await verifyPassword('', encoded), false, 'empty password');
  t.equal(needsRehash(encoded), false, 'current parameters need no rehash');
});

t.test('the cost is log2 of N: a hash at another cost verifies and needs a rehash; costs out of bounds are refused', async (t) => {
  const cheap = await hashPassword('cost-test password', MIN_PASSWORD_HASH_COST);
  t.match(cheap, /^scrypt\$1024\$8\$1\$/);
  t.equal(await verifyPassword('cost-test password', cheap), true);
  t.equal(await verifyPassword('cost-test passworD', cheap), false);
  t.equal(needsRehash(cheap, MIN_PASSWORD_HASH_COST), false);
  t.equal(needsRehash(cheap), true, 'the default cost is 15');
  t.equal(needsRehash(await hashPassword('cost-test password', 11), MIN_PASSWORD_HASH_COST), true);
  for (const cost of [MIN_PASSWORD_HASH_COST - 1, MAX_PASSWORD_HASH_COST + 1, 12.5, Number.NaN]) {
    await t.rejects(hashPassword('x', cost), RangeError, `cost ${cost}`);
    t.throws(() => needsRehash(cheap, cost), RangeError);
  }
});

t.test('two hashes of one password differ (random salt) and both verify', async (t) => {
  const first = await hashPassword('same password');
  const second = await hashPassword('same password');
  t.not(first, second);
  t.not(first.split('$')[4], second.split('$')[4], 'salts differ');
  t.equal(await verifyPassword('same password', first), true);
  t.equal(await verifyPassword('same password', second), true);
});

t.test('unicode passwords are normalised (NFKC) before hashing', async (t) => {
  const composed = 'caf\u00e9-p\u00e4ss';
  const decomposed = 'cafe\u0301-pa\u0308ss';
  const encoded = await hashPassword(composed);
  t.equal(await verifyPassword(decomposed, encoded), true, 'same password typed decomposed');
  t.equal(await verifyPassword('cafe-pass', encoded), false, 'accents still matter');
});

t.test('verify returns false, never throws, on malformed or hostile encodings', async (t) => {
  const good = await hashPassword('pw-for-malformed');
  const [scheme, n, r, p, salt, hash] = good.split('$');
  const join = (...parts: string[]) => parts.join('$');
  const cases: Record<string, unknown> = {
    empty: '',
    'not a string': 42,
    null: null,
    'wrong scheme': join('bcrypt', n, r, p, salt, hash),
    'too few parts': join(scheme, n, r, p, salt),
    'too many parts': join(scheme, n, r, p, salt, hash, 'x'),
    'N not a power of two': join(scheme, '30000', r, p, salt, hash),
    'N too small (weak)': join(scheme, '2', r, p, salt, hash),
    'N huge (memory exhaustion)': join(scheme, String(2 ** 30), r, p, salt, hash),
    'r huge': join(scheme, n, '1000', p, salt, hash),
    'p zero': join(scheme, n, r, '0', salt, hash),
    'N with sign': join(scheme, '+32768', r, p, salt, hash),
    'N in hex': join(scheme, '0x8000', r, p, salt, hash),
    'salt not base64': join(scheme, n, r, p, 'not*base64!', hash),
    'hash not base64': join(scheme, n, r, p, salt, '%%%%'),
    'empty salt': join(scheme, n, r, p, '', hash),
    'salt too short': join(scheme, n, r, p, Buffer.alloc(4).toString('base64'), hash),
    'hash too short': join(scheme, n, r, p, salt, Buffer.alloc(8).toString('base64')),
    'hash truncated': join(scheme, n, r, p, salt, hash.slice(0, 20)),
  };
  for (const [name, encoded] of Object.entries(cases)) {
    t.equal(await verifyPassword('pw-for-malformed', encoded as string), false, name);
    t.equal(needsRehash(encoded as string), true, `${name}: needs rehash`);
  }
  t.equal(await verifyPassword(undefined as unknown as string, good), false, 'non-string password');
});

t.test('a hash made with other (valid) parameters still verifies and asks for a rehash', async (t) => {
  const { scrypt } = await import('node:crypto');
  const salt = Buffer.alloc(16, 7);
  const key = await new Promise<Buffer>((resolve, reject) =>
    scrypt('older-password', salt, 32, { N: 2 ** 14, r: 8, p: 1 }, (error, derived) => (error ? reject(error) : resolve(derived))),
  );
  const older = ['scrypt', 2 ** 14, 8, 1, salt.toString('base64'), key.toString('base64')].join('$');
  t.equal(await verifyPassword('older-password', older), true);
  t.equal(await verifyPassword('other-password', older), false);
  t.equal(needsRehash(older), true);
});

t.test('a tampered hash does not verify', async (t) => {
  const encoded = await hashPassword('tamper-me');
  const parts = encoded.split('$');
  const hash = Buffer.from(parts[5], 'base64');
  hash[0] ^= 1;
  parts[5] = hash.toString('base64');
  t.equal(await verifyPassword('tamper-me', parts.join('$')), false);
});

t.test('password policy', async (t) => {
  t.equal(validatePasswordPolicy('abcdefgh', 8), null, 'exactly the minimum');
  t.match(validatePasswordPolicy('abcdefg', 8), /at least 8 characters/);
  t.match(validatePasswordPolicy('', 8), /at least 8/);
  t.equal(validatePasswordPolicy('😀😀😀😀😀😀😀😀', 8), null, 'counts code points, not UTF-16 units');
  t.match(validatePasswordPolicy('😀😀😀😀', 8), /at least 8/, 'four emoji are four characters even though eight UTF-16 units');
  t.equal(validatePasswordPolicy('a'.repeat(MAX_PASSWORD_BYTES), 8), null, 'exactly 1024 bytes');
  t.match(validatePasswordPolicy('a'.repeat(MAX_PASSWORD_BYTES + 1), 8), /at most 1024 bytes/);
  t.match(validatePasswordPolicy('é'.repeat(513), 8), /at most 1024 bytes/, 'limit is in UTF-8 bytes (513 × 2)');
  t.match(validatePasswordPolicy('          ', 8), /whitespace/);
  t.match(validatePasswordPolicy(12345678, 8), /must be a string/);
  t.match(validatePasswordPolicy(undefined, 8), /must be a string/);
  t.throws(() => validatePasswordPolicy('whatever', 0), RangeError);
  t.throws(() => validatePasswordPolicy('whatever', 2.5), RangeError);
});
