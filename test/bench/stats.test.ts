import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { percentile, SeededRandom, summarize } from '../../bench/stats.js';
import { ScrambledZipfian, Zipfian } from '../../bench/zipf.js';

describe('bench percentiles', () => {
  it('are nearest-rank over every sample: 1..1000 gives p50 500, p99 990, p999 999', () => {
    const samples = Array.from({ length: 1000 }, (_, i) => 1000 - i);
    const s = summarize(samples);
    assert.deepEqual([s.samples, s.p50Us, s.p99Us, s.p999Us], [1000, 500, 990, 999]);
    assert.equal(s.meanUs, 500.5);
  });

  it('of one sample are that sample, and of none are 0', () => {
    assert.deepEqual([percentile([7], 0.5), percentile([7], 0.999)], [7, 7]);
    assert.deepEqual(summarize([]), { samples: 0, p50Us: 0, p99Us: 0, p999Us: 0, meanUs: 0 });
  });

  it('p999 of 100 samples is the maximum, not an interpolation past it', () => {
    const samples = Array.from({ length: 100 }, (_, i) => i + 1);
    assert.equal(summarize(samples).p999Us, 100);
    assert.equal(summarize(samples).p99Us, 99);
  });
});

describe('bench random streams', () => {
  it('repeat for a seed, differ across seeds, and pairs are always two distinct keys in range', () => {
    const draw = (seed: number): number[] => {
      const r = new SeededRandom(seed);
      return Array.from({ length: 20 }, () => r.int(1000));
    };
    assert.deepEqual(draw(3), draw(3));
    assert.notDeepEqual(draw(3), draw(4));
    const r = new SeededRandom(1);
    for (let i = 0; i < 10_000; i++) {
      const [a, b] = r.pair(20);
      assert.ok(a !== b && a >= 0 && a < 20 && b >= 0 && b < 20, `pair ${a}, ${b}`);
    }
  });
});

describe('Zipfian key chooser', () => {
  const DRAWS = 100_000;

  it('draws ranks in range with rank 0 at its theoretical share 1/zeta(n, 0.99)', () => {
    const n = 1000;
    const zipf = new Zipfian(n, new SeededRandom(7));
    const counts = new Array<number>(n).fill(0);
    for (let i = 0; i < DRAWS; i++) {
      const rank = zipf.next();
      assert.ok(Number.isInteger(rank) && rank >= 0 && rank < n, `rank ${rank}`);
      counts[rank]!++;
    }
    let zeta = 0;
    for (let i = 1; i <= n; i++) zeta += 1 / i ** 0.99;
    const share0 = counts[0]! / DRAWS;
    assert.ok(Math.abs(share0 - 1 / zeta) < 0.01, `rank 0 share ${share0} vs ${1 / zeta}`);
    assert.ok(counts[0]! > counts[1]! && counts[1]! > counts[10]! && counts[10]! > counts[500]!, 'popularity falls');
  });

  it('is skewed: the 10% most drawn keys get most draws, also once scrambled over the key space', () => {
    const n = 1000;
    const zipf = new ScrambledZipfian(n, new SeededRandom(11));
    const counts = new Array<number>(n).fill(0);
    for (let i = 0; i < DRAWS; i++) counts[zipf.next()]!++;
    const sorted = [...counts].sort((a, b) => b - a);
    const top = sorted.slice(0, n / 10).reduce((s, c) => s + c, 0) / DRAWS;
    assert.ok(top > 0.5, `top 10% of keys drew ${top}`);
    assert.notEqual(counts.indexOf(sorted[0]!), 0, 'the hottest key is scrambled away from key 0');
  });

  it('refuses a key space it cannot draw from', () => {
    assert.throws(() => new Zipfian(1, new SeededRandom(1)), RangeError);
  });
});
