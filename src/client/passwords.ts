/**
 * Passwords of the client protocol's users: scrypt (node:crypto) with a per-user random salt, the cost stored beside
 * the hash so that it can be raised for new passwords without breaking old ones. Verification compares in constant
 * time (`timingSafeEqual`), and a user who does not exist costs the same scrypt as one who does, so that neither the
 * comparison nor the lookup tells an attacker which names exist.
 */
import { scrypt, timingSafeEqual } from 'node:crypto';
import type { PasswordHash } from '../cluster/metastorage-state.js';
import { BasaltError } from '../core/errors.js';

/** scrypt's N, r, p: about 16 MiB and tens of milliseconds per hash (OWASP's minimum is N = 2^17 with r = 8 at p = 1; N = 2^14 keeps logins of a small node fast). */
export const SCRYPT_COST = 16_384;
const SCRYPT_BLOCK_SIZE = 8;
const SCRYPT_PARALLELIZATION = 1;
const HASH_BYTES = 32;
export const SALT_BYTES = 16;
/** Longer passwords are refused rather than hashed (scrypt takes any length; a bound keeps requests small). */
export const PASSWORD_CHARS_MAX = 1_024;
export const PASSWORD_CHARS_MIN = 8;

/** Why `password` cannot be set, or undefined. */
export function passwordProblem(password: string): string | undefined {
  if (password.length < PASSWORD_CHARS_MIN) return `a password has at least ${PASSWORD_CHARS_MIN} characters`;
  if (password.length > PASSWORD_CHARS_MAX) return `a password has at most ${PASSWORD_CHARS_MAX} characters`;
  return undefined;
}

/** Hashes `password` with `salt` (SALT_BYTES of strong randomness, drawn by the caller). */
export async function hashPassword(password: string, salt: Uint8Array): Promise<PasswordHash> {
  const problem = passwordProblem(password);
  if (problem !== undefined) throw new BasaltError('INVALID_ARGUMENT', problem);
  const params = { cost: SCRYPT_COST, blockSize: SCRYPT_BLOCK_SIZE, parallelization: SCRYPT_PARALLELIZATION };
  const hash = await derive(password, Buffer.from(salt), params, HASH_BYTES);
  return {
    algorithm: 'scrypt',
    salt: Buffer.from(salt).toString('base64'),
    hash: hash.toString('base64'),
    ...params,
  };
}

/** A hash nothing matches, verified against when the user does not exist (same cost as a real one). */
const DECOY: PasswordHash = {
  algorithm: 'scrypt',
  salt: Buffer.alloc(SALT_BYTES).toString('base64'),
  hash: Buffer.alloc(HASH_BYTES).toString('base64'),
  cost: SCRYPT_COST,
  blockSize: SCRYPT_BLOCK_SIZE,
  parallelization: SCRYPT_PARALLELIZATION,
};

/** Whether `password` matches `stored`; undefined `stored` (no such user, or no password) never matches. */
export async function verifyPassword(password: string, stored: PasswordHash | undefined): Promise<boolean> {
  const target = stored ?? DECOY;
  const expected = Buffer.from(target.hash, 'base64');
  if (password.length > PASSWORD_CHARS_MAX || expected.length === 0) return false;
  let actual: Buffer;
  try {
    actual = await derive(password, Buffer.from(target.salt, 'base64'), target, expected.length);
  } catch {
    return false; // parameters scrypt refuses (a damaged record): no login
  }
  return timingSafeEqual(actual, expected) && stored !== undefined;
}

function derive(
  password: string,
  salt: Buffer,
  params: Pick<PasswordHash, 'cost' | 'blockSize' | 'parallelization'>,
  bytes: number,
): Promise<Buffer> {
  const options = {
    N: params.cost,
    r: params.blockSize,
    p: params.parallelization,
    maxmem: 256 * params.cost * params.blockSize,
  };
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFC'), salt, bytes, options, (error, key) => (error ? reject(error) : resolve(key))),
  );
}
