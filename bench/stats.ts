/**
 * Latency summaries of the benchmarks: nearest-rank percentiles over every sample of a cell (no histogram buckets, so
 * p999 of a few thousand samples is an actual sample, not an interpolation), and a seeded PRNG so that every client
 * thread draws its own reproducible key stream.
 */

export interface LatencySummary {
  readonly samples: number;
  readonly p50Us: number;
  readonly p99Us: number;
  readonly p999Us: number;
  readonly meanUs: number;
}

/** Nearest-rank percentile `q` (0..1) of samples sorted ascending; 0 when there are none. */
export function percentile(sortedUs: ArrayLike<number>, q: number): number {
  if (sortedUs.length === 0) return 0;
  const rank = Math.ceil(q * sortedUs.length);
  return sortedUs[Math.min(sortedUs.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samplesUs: ArrayLike<number>): LatencySummary {
  const sorted = Float64Array.from(samplesUs).sort();
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    samples: sorted.length,
    p50Us: percentile(sorted, 0.5),
    p99Us: percentile(sorted, 0.99),
    p999Us: percentile(sorted, 0.999),
    meanUs: sorted.length === 0 ? 0 : sum / sorted.length,
  };
}

/** mulberry32: a small, fast 32-bit PRNG; `next()` is uniform in [0, 1). */
export class SeededRandom {
  private state: number;

  constructor(seed: number) {
    this.state = seed >>> 0;
  }

  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Two distinct integers in [0, n), n >= 2. */
  pair(n: number): [number, number] {
    const a = this.int(n);
    const b = (a + 1 + this.int(n - 1)) % n;
    return [a, b];
  }
}
