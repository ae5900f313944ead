/**
 * The simulator's seeded pseudo-random generator (xoshiro128**, seeded through cyrb128 from a text seed). One seed
 * drives a whole simulated cluster: each component takes `fork(label)`, a stream derived from the seed *path* and not
 * from how many numbers the parent already drew, so adding a draw in one component never shifts another's.
 */
import type { Random } from '../env/random.js';

function cyrb128(text: string): [number, number, number, number] {
  let h1 = 1779033703;
  let h2 = 3144134277;
  let h3 = 1013904242;
  let h4 = 2773480762;
  for (let i = 0; i < text.length; i++) {
    const k = text.charCodeAt(i);
    h1 = h2 ^ Math.imul(h1 ^ k, 597399067);
    h2 = h3 ^ Math.imul(h2 ^ k, 2869860233);
    h3 = h4 ^ Math.imul(h3 ^ k, 951274213);
    h4 = h1 ^ Math.imul(h4 ^ k, 2716044179);
  }
  h1 = Math.imul(h3 ^ (h1 >>> 18), 597399067);
  h2 = Math.imul(h4 ^ (h2 >>> 22), 2869860233);
  h3 = Math.imul(h1 ^ (h3 >>> 17), 951274213);
  h4 = Math.imul(h2 ^ (h4 >>> 19), 2716044179);
  h1 ^= h2 ^ h3 ^ h4;
  h2 ^= h1;
  h3 ^= h1;
  h4 ^= h1;
  return [h1 >>> 0, h2 >>> 0, h3 >>> 0, h4 >>> 0];
}

export class SeededRandom implements Random {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  /** `seed` is printed by every failing simulation; the same seed replays the same run. */
  constructor(readonly seed: string | number) {
    [this.a, this.b, this.c, this.d] = cyrb128(String(seed));
    if ((this.a | this.b | this.c | this.d) === 0) this.a = 1;
  }

  /** A uniformly distributed unsigned 32-bit integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result;
  }

  next(): number {
    // 53 bits of randomness from two draws.
    const hi = this.nextUint32() >>> 5;
    const lo = this.nextUint32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  int(maxExclusive: number): number {
    if (!(maxExclusive > 0)) return 0;
    return Math.floor(this.next() * maxExclusive);
  }

  /** Uniform integer in [min, max]. */
  between(min: number, max: number): number {
    return min + this.int(max - min + 1);
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return p > 0 && this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick from an empty list');
    return items[this.int(items.length)] as T;
  }

  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const tmp = items[i] as T;
      items[i] = items[j] as T;
      items[j] = tmp;
    }
    return items;
  }

  uuid(): string {
    const hex = (n: number): string => n.toString(16).padStart(8, '0');
    const w = [this.nextUint32(), this.nextUint32(), this.nextUint32(), this.nextUint32()];
    const s = hex(w[0]!) + hex(w[1]!) + hex(w[2]!) + hex(w[3]!);
    return `${s.slice(0, 8)}-${s.slice(8, 12)}-4${s.slice(13, 16)}-${((Number.parseInt(s[16]!, 16) & 3) | 8).toString(16)}${s.slice(17, 20)}-${s.slice(20, 32)}`;
  }

  fork(label: string): SeededRandom {
    return new SeededRandom(`${this.seed}/${label}`);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}
