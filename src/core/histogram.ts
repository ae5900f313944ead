/**
 * A fixed-bucket histogram, the shape Prometheus exposes: ascending finite upper bounds, one count per bucket (a
 * value lands in the first bucket whose bound is ≥ it; above the last bound it lands in the implicit `+Inf` bucket),
 * plus the sum and count of every observation. Memory is fixed at construction whatever is observed.
 *
 * Invariants: bounds are finite and strictly ascending; `counts` has one more entry than `bounds` (the `+Inf` bucket);
 * the counts add up to `count`. Quantiles are estimates read off the buckets by linear interpolation within the
 * bucket that holds the rank (as Prometheus' `histogram_quantile` does), so they are only as fine as the buckets.
 */
import { assert } from './assert.js';
import { BasaltError } from './errors.js';

/** Upper bounds for latencies in milliseconds, from sub-millisecond local commits to one second. */
export const LATENCY_BUCKETS_MS: readonly number[] = [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];

export interface HistogramSnapshot {
  /** Finite upper bounds, strictly ascending (the `+Inf` bucket is implicit). */
  readonly bounds: readonly number[];
  /** Observations per bucket (not cumulative); the last entry is the `+Inf` bucket. */
  readonly counts: readonly number[];
  readonly sum: number;
  readonly count: number;
}

export class Histogram {
  readonly bounds: readonly number[];
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(bounds: readonly number[]) {
    const ascending = bounds.every((b, i) => Number.isFinite(b) && (i === 0 || b > (bounds[i - 1] ?? b)));
    if (bounds.length === 0 || !ascending) {
      throw new BasaltError('INVALID_ARGUMENT', 'histogram bounds must be finite and strictly ascending', { bounds });
    }
    this.bounds = [...bounds];
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  /** Records one value; a non-finite value is a caller bug. */
  observe(value: number): void {
    assert(Number.isFinite(value), 'a histogram observation is finite', value);
    const i = this.bounds.findIndex((b) => value <= b);
    const bucket = i === -1 ? this.bounds.length : i;
    this.counts[bucket] = (this.counts[bucket] ?? 0) + 1;
    this.sum += value;
    this.count++;
  }

  snapshot(): HistogramSnapshot {
    return { bounds: this.bounds, counts: [...this.counts], sum: this.sum, count: this.count };
  }
}

/** Running totals per bucket, as Prometheus' `_bucket{le=...}` series; the last one (`+Inf`) equals `count`. */
export function cumulativeCounts(snapshot: HistogramSnapshot): number[] {
  let total = 0;
  return snapshot.counts.map((c) => {
    total += c;
    return total;
  });
}

/**
 * The estimated `q`-quantile (0 ≤ q ≤ 1): linear within the bucket holding rank `q·count`, from the previous bound
 * (0 for the first bucket). A rank in the `+Inf` bucket answers the largest finite bound (nothing finer is known).
 * Undefined without observations.
 */
export function estimateQuantile(snapshot: HistogramSnapshot, q: number): number | undefined {
  if (!(q >= 0 && q <= 1)) throw new BasaltError('INVALID_ARGUMENT', `quantile out of [0, 1]: ${q}`);
  if (snapshot.count === 0) return undefined;
  const rank = q * snapshot.count;
  const cumulative = cumulativeCounts(snapshot);
  const i = cumulative.findIndex((c) => c >= rank && c > 0);
  const { bounds } = snapshot;
  if (i === -1 || i >= bounds.length) return bounds.at(-1);
  const upper = bounds[i] ?? 0;
  const lower = i === 0 ? 0 : (bounds[i - 1] ?? 0);
  const before = i === 0 ? 0 : (cumulative[i - 1] ?? 0);
  const inBucket = snapshot.counts[i] ?? 0;
  return lower + ((upper - lower) * (rank - before)) / inBucket;
}
