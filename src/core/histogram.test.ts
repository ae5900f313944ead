/**
 * The fixed-bucket histogram: bucket placement on the `le` edges, cumulative counts ending in the total, quantile
 * estimates within the right bucket, and bounds that are refused.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isBasaltError } from './errors.js';
import { cumulativeCounts, estimateQuantile, Histogram, LATENCY_BUCKETS_MS } from './histogram.js';

describe('Histogram', () => {
  it('puts a value in the first bucket whose bound is at least the value, above the last in +Inf', () => {
    const h = new Histogram([1, 5, 10]);
    for (const v of [0, 1, 1.5, 5, 10, 10.01, 700]) h.observe(v);
    const s = h.snapshot();
    assert.deepEqual(s.counts, [2, 2, 1, 2]);
    assert.equal(s.count, 7);
    assert.equal(s.sum, 0 + 1 + 1.5 + 5 + 10 + 10.01 + 700);
    assert.deepEqual(cumulativeCounts(s), [2, 4, 5, 7]);
  });

  it('a snapshot is a copy: later observations do not change it', () => {
    const h = new Histogram(LATENCY_BUCKETS_MS);
    h.observe(3);
    const before = h.snapshot();
    h.observe(3);
    assert.equal(before.count, 1);
    assert.equal(h.snapshot().count, 2);
  });

  it('refuses empty, unordered or non-finite bounds', () => {
    for (const bounds of [[], [2, 1], [1, 1], [1, Number.POSITIVE_INFINITY]]) {
      assert.throws(
        () => new Histogram(bounds),
        (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
        JSON.stringify(bounds),
      );
    }
  });

  it('cumulative counts never fall and end at the count; a quantile lies within its bucket (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 5_000, noNaN: true }), { minLength: 1, maxLength: 200 }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (values, q) => {
          const h = new Histogram(LATENCY_BUCKETS_MS);
          for (const v of values) h.observe(v);
          const s = h.snapshot();
          const cumulative = cumulativeCounts(s);
          assert.equal(cumulative.at(-1), values.length);
          assert.ok(cumulative.every((c, i) => i === 0 || c >= (cumulative[i - 1] ?? 0)));
          // The estimate lies within the bucket that holds the true q-quantile (the +Inf bucket: the top bound).
          const sorted = [...values].sort((a, b) => a - b);
          const truth = sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
          const estimate = estimateQuantile(s, q)!;
          const i = LATENCY_BUCKETS_MS.findIndex((b) => truth <= b);
          if (i === -1) {
            assert.equal(estimate, LATENCY_BUCKETS_MS.at(-1));
          } else {
            const lower = i === 0 ? 0 : LATENCY_BUCKETS_MS[i - 1]!;
            assert.ok(lower <= estimate && estimate <= LATENCY_BUCKETS_MS[i]!, `q=${q}: ${estimate} vs ${truth}`);
          }
        },
      ),
    );
  });

  it('estimates p50 and p99 by interpolating inside the bucket; none without observations', () => {
    const h = new Histogram([10, 20]);
    assert.equal(estimateQuantile(h.snapshot(), 0.5), undefined);
    for (let i = 0; i < 50; i++) h.observe(5);
    for (let i = 0; i < 50; i++) h.observe(15);
    assert.equal(estimateQuantile(h.snapshot(), 0.5), 10, 'rank 50 ends the first bucket');
    assert.equal(estimateQuantile(h.snapshot(), 0.75), 15, 'halfway into the second bucket');
    h.observe(1_000);
    assert.equal(estimateQuantile(h.snapshot(), 1), 20, 'the +Inf bucket answers the largest finite bound');
    assert.throws(
      () => estimateQuantile(h.snapshot(), 1.5),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });
});
