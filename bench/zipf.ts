/**
 * The Zipfian key chooser of YCSB (Gray et al., "Quickly generating billion-record synthetic databases", as in YCSB's
 * ZipfianGenerator), with YCSB's default skew θ = 0.99: rank 0 is the most popular item. `ScrambledZipfian` spreads
 * the ranks over the key space with an FNV-1a hash, as YCSB's workload A does, so that the hot keys land on different
 * partitions instead of all being neighbours.
 */
import type { SeededRandom } from './stats.js';

export const ZIPF_THETA_DEFAULT = 0.99;

export class Zipfian {
  private readonly alpha: number;
  private readonly zetaN: number;
  private readonly eta: number;
  private readonly halfPowTheta: number;

  constructor(
    readonly items: number,
    private readonly random: SeededRandom,
    theta = ZIPF_THETA_DEFAULT,
  ) {
    if (!(items >= 2) || !(theta > 0 && theta < 1)) throw new RangeError(`zipfian needs items >= 2 and 0 < θ < 1`);
    const zeta2 = zeta(2, theta);
    this.zetaN = zeta(items, theta);
    this.alpha = 1 / (1 - theta);
    this.eta = (1 - (2 / items) ** (1 - theta)) / (1 - zeta2 / this.zetaN);
    this.halfPowTheta = 1 + 0.5 ** theta;
  }

  /** A rank in [0, items). */
  next(): number {
    const u = this.random.next();
    const uz = u * this.zetaN;
    if (uz < 1) return 0;
    if (uz < this.halfPowTheta) return 1;
    return Math.min(this.items - 1, Math.floor(this.items * (this.eta * u - this.eta + 1) ** this.alpha));
  }
}

/** Zipfian ranks hashed onto [0, items): popularity is skewed, placement is not. */
export class ScrambledZipfian {
  private readonly zipf: Zipfian;

  constructor(
    readonly items: number,
    random: SeededRandom,
    theta = ZIPF_THETA_DEFAULT,
  ) {
    this.zipf = new Zipfian(items, random, theta);
  }

  next(): number {
    return fnv1a32(this.zipf.next()) % this.items;
  }
}

function zeta(n: number, theta: number): number {
  let sum = 0;
  for (let i = 1; i <= n; i++) sum += 1 / i ** theta;
  return sum;
}

/** FNV-1a over the four bytes of a 32-bit integer. */
export function fnv1a32(value: number): number {
  let hash = 0x811c9dc5;
  for (let shift = 0; shift < 32; shift += 8) {
    hash ^= (value >>> shift) & 0xff;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}
