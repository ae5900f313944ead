import { randomBytes, randomUUID } from 'node:crypto';
import type { Random } from './random.js';

/** Process randomness, for real deployments only; simulations use the seeded generator of src/sim. */
export class RealRandom implements Random {
  next(): number {
    return Math.random();
  }
  int(maxExclusive: number): number {
    return Math.floor(Math.random() * maxExclusive);
  }
  uuid(): string {
    return randomUUID();
  }
  fork(_label: string): Random {
    return this;
  }
}

/** Cryptographically strong random bytes (password salts); never from a seeded stream. */
export function secureRandomBytes(bytes: number): Uint8Array {
  return randomBytes(bytes);
}
