import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

/**
 * Password hashing with scrypt (memory-hard, in node:crypto, no native add-on).
 *
 * Encoding: `scrypt$N$r$p$saltB64$hashB64` (standard base64 with padding). The cost parameters
 * travel with each hash, so they can be raised later and old hashes still verify; `needsRehash`
 * tells the caller when to re-hash on a successful login.
 *
 * These hashes are secrets: they live in the users read model only, never in an event.
 */

const SCHEME = 'scrypt';
/**
 * The cost as log2 of scrypt's N (`auth.password_hash_cost`), with r=8, p=1. The default, 15, is
 * 32 MiB per hash and about 100 ms on this project's machines (see docs/auth.md).
 */
export const DEFAULT_PASSWORD_HASH_COST = 15;
const BLOCK_SIZE_R = 8;
const PARALLELISM_P = 1;
const SALT_BYTES = 16;
const HASH_BYTES = 32;

/**
 * Bounds for parameters read back from a stored hash, so a corrupt or planted value can neither
 * exhaust memory nor pass with a trivially weak cost.
 */
export const MIN_PASSWORD_HASH_COST = 10;
export const MAX_PASSWORD_HASH_COST = 20;
const MAX_R = 32;
const MAX_P = 16;
const MAX_SCRYPT_MEMORY_BYTES = 256 * 1024 * 1024;
const MIN_SALT_BYTES = 8;
const MIN_HASH_BYTES = 16;
const MAX_HASH_BYTES = 128;

export const MAX_PASSWORD_BYTES = 1024;

interface ScryptCost {
  N: number;
  r: number;
  p: number;
}

interface ParsedHash extends ScryptCost {
  salt: Buffer;
  hash: Buffer;
}

/** Node's default maxmem (32 MiB) is exactly what N=2^15, r=8 needs and scrypt refuses it; add headroom. */
function maxmemFor({ N, r, p }: ScryptCost): number {
  return 128 * r * (N + p + 2) + 1024 * 1024;
}

function deriveKey(password: string, salt: Buffer, keyLength: number, cost: ScryptCost): Promise<Buffer> {
  const options: ScryptOptions = { ...cost, maxmem: maxmemFor(cost) };
  return new Promise((resolve, reject) => {
    scrypt(normalizePassword(password), salt, keyLength, options, (error, key) => (error ? reject(error) : resolve(key)));
  });
}

/**
 * NFKC so that the same password typed on different keyboards or platforms (composed vs.
 * decomposed accents, full-width digits) hashes the same (NIST SP 800-63B 5.1.1.2).
 */
function normalizePassword(password: string): string {
  return password.normalize('NFKC');
}

/** scrypt's parameters for a cost (log2 of N) within the bounds a stored hash may have. */
function scryptCost(cost: number): ScryptCost {
  if (!Number.isInteger(cost) || cost < MIN_PASSWORD_HASH_COST || cost > MAX_PASSWORD_HASH_COST) {
    throw new RangeError(`password hash cost must be an integer from ${MIN_PASSWORD_HASH_COST} to ${MAX_PASSWORD_HASH_COST}`);
  }
  return { N: 2 ** cost, r: BLOCK_SIZE_R, p: PARALLELISM_P };
}

export async function hashPassword(password: string, cost: number = DEFAULT_PASSWORD_HASH_COST): Promise<string> {
  if (typeof password !== 'string') throw new TypeError('password must be a string');
  const { N, r, p } = scryptCost(cost);
  const salt = randomBytes(SALT_BYTES);
  const hash = await deriveKey(password, salt, HASH_BYTES, { N, r, p });
  return [SCHEME, N, r, p, salt.toString('base64'), hash.toString('base64')].join('$');
}

/**
 * True only when `password` matches `encoded`. Every malformed, out-of-bounds or unknown
 * encoding gives false rather than an exception: a login must fail closed, never 500.
 */
export async function verifyPassword(password: string, encoded: string): Promise<boolean> {
  if (typeof password !== 'string') return false;
  const parsed = parseEncodedHash(encoded);
  if (!parsed) return false;
  let candidate: Buffer;
  try {
    candidate = await deriveKey(password, parsed.salt, parsed.hash.length, parsed);
  } catch {
    return false;
  }
  return timingSafeEqual(candidate, parsed.hash);
}

/** True when a (valid) stored hash was made with other parameters than those of `cost`. */
export function needsRehash(encoded: string, cost: number = DEFAULT_PASSWORD_HASH_COST): boolean {
  const parsed = parseEncodedHash(encoded);
  if (!parsed) return true;
  const current = scryptCost(cost);
  return (
    parsed.N !== current.N ||
    parsed.r !== current.r ||
    parsed.p !== current.p ||
    parsed.salt.length !== SALT_BYTES ||
    parsed.hash.length !== HASH_BYTES
  );
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DECIMAL = /^[1-9][0-9]{0,9}$/;

function parseEncodedHash(encoded: unknown): ParsedHash | null {
  if (typeof encoded !== 'string') return null;
  const parts = encoded.split('$');
  if (parts.length !== 6) return null;
  const [scheme, nText, rText, pText, saltText, hashText] = parts;
  if (scheme !== SCHEME) return null;
  if (!DECIMAL.test(nText) || !DECIMAL.test(rText) || !DECIMAL.test(pText)) return null;
  const N = Number(nText);
  const r = Number(rText);
  const p = Number(pText);
  const log2N = Math.log2(N);
  if (!Number.isInteger(log2N) || log2N < MIN_PASSWORD_HASH_COST || log2N > MAX_PASSWORD_HASH_COST) return null;
  if (r > MAX_R || p > MAX_P) return null;
  if (128 * r * (N + p + 2) > MAX_SCRYPT_MEMORY_BYTES) return null;
  if (saltText.length === 0 || hashText.length === 0 || !BASE64.test(saltText) || !BASE64.test(hashText)) return null;
  const salt = Buffer.from(saltText, 'base64');
  const hash = Buffer.from(hashText, 'base64');
  if (salt.length < MIN_SALT_BYTES || hash.length < MIN_HASH_BYTES || hash.length > MAX_HASH_BYTES) return null;
  return { N, r, p, salt, hash };
}

/**
 * The password rules applied on register (and on any future password change). Returns a message
 * fit for the client, or null when the password is acceptable. Length counts Unicode code points
 * (an emoji is one character); the upper bound is in UTF-8 bytes and keeps hashing cost bounded.
 */
export function validatePasswordPolicy(password: unknown, minLength: number): string | null {
  if (!Number.isInteger(minLength) || minLength < 1) throw new RangeError('minLength must be a positive integer');
  if (typeof password !== 'string') return 'password must be a string';
  const characters = Array.from(password).length;
  if (characters < minLength) return `password must be at least ${minLength} characters`;
  if (Buffer.byteLength(password, 'utf8') > MAX_PASSWORD_BYTES) {
    return `password must be at most ${MAX_PASSWORD_BYTES} bytes`;
  }
  if (password.trim().length === 0) return 'password must not be only whitespace';
  return null;
}
