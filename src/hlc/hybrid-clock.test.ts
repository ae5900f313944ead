import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { BasaltError } from '../core/errors.js';
import type { Clock } from '../env/clock.js';
import { HybridClock } from './hybrid-clock.js';
import {
  addMs,
  asTimestamp,
  formatTimestamp,
  hybridTimestamp,
  LOGICAL_MASK,
  logical,
  NULL_TIMESTAMP,
  physicalMs,
} from './timestamp.js';

class ManualClock implements Clock {
  constructor(public ms: number) {}
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

describe('hybrid timestamp layout', () => {
  it('packs 48 bits of physical ms above 16 logical bits', () => {
    const ts = hybridTimestamp(1_700_000_000_123, 7);
    assert.equal(physicalMs(ts), 1_700_000_000_123);
    assert.equal(logical(ts), 7);
    assert.equal(ts, (1_700_000_000_123n << 16n) | 7n);
    assert.equal(formatTimestamp(ts), '1700000000123.7');
    assert.equal(formatTimestamp(NULL_TIMESTAMP), 'null');
  });

  it('orders timestamps as integers: physical first, then logical', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 47 }),
        fc.integer({ min: 0, max: 65535 }),
        fc.integer({ min: 0, max: 2 ** 47 }),
        fc.integer({ min: 0, max: 65535 }),
        (p1, l1, p2, l2) => {
          const a = hybridTimestamp(p1, l1);
          const b = hybridTimestamp(p2, l2);
          const expected = p1 !== p2 ? p1 < p2 : l1 < l2;
          assert.equal(a < b, expected);
        },
      ),
    );
  });

  it('rejects out-of-range parts', () => {
    assert.throws(() => hybridTimestamp(-1));
    assert.throws(() => hybridTimestamp(2 ** 48));
    assert.throws(() => hybridTimestamp(5, 65536));
    assert.throws(() => asTimestamp(-1n));
  });

  it('addMs moves whole milliseconds and clamps at zero', () => {
    const ts = hybridTimestamp(1000, 3);
    assert.equal(addMs(ts, 5), hybridTimestamp(1005, 3));
    assert.equal(addMs(ts, -2000), NULL_TIMESTAMP);
  });
});

describe('HybridClock', () => {
  it('now() is strictly increasing while the physical clock stands still', () => {
    const clock = new HybridClock(new ManualClock(1000));
    const a = clock.now();
    const b = clock.now();
    const c = clock.now();
    assert.ok(a < b && b < c);
    assert.equal(physicalMs(c), 1000);
  });

  it('now() stays strictly increasing when the physical clock goes backwards', () => {
    const physical = new ManualClock(5000);
    const clock = new HybridClock(physical);
    const before = clock.now();
    physical.ms = 1000;
    const after = clock.now();
    assert.ok(after > before);
    assert.equal(physicalMs(after), 5000);
  });

  it('now() follows physical time when it moves ahead', () => {
    const physical = new ManualClock(5000);
    const clock = new HybridClock(physical);
    clock.now();
    physical.ms = 6000;
    assert.equal(clock.now(), hybridTimestamp(6000, 0));
  });

  it('a full logical counter carries into the physical part', () => {
    const clock = new HybridClock(new ManualClock(1000));
    clock.update(hybridTimestamp(1000, Number(LOGICAL_MASK)));
    const next = clock.current();
    assert.equal(physicalMs(next), 1001);
    assert.equal(logical(next), 0);
    const after = clock.now();
    assert.equal(after, hybridTimestamp(1001, 1));
  });

  it('update(remote) returns a value greater than remote and than the previous reading', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.array(
          fc.oneof(
            fc.constant<'now'>('now'),
            fc.bigInt({ min: 0n, max: 1n << 57n }),
            fc.integer({ min: -5000, max: 5000 }),
          ),
        ),
        (startMs, ops) => {
          const physical = new ManualClock(startMs);
          const clock = new HybridClock(physical);
          let previous = clock.current();
          for (const op of ops) {
            if (op === 'now') {
              const ts = clock.now();
              assert.ok(ts > previous);
              previous = ts;
            } else if (typeof op === 'bigint') {
              const remote = asTimestamp(op);
              const ts = clock.update(remote);
              assert.ok(ts > remote && ts > previous);
              previous = ts;
            } else {
              physical.ms = Math.max(0, physical.ms + op);
              const cur = clock.current();
              assert.ok(cur >= previous, 'current() never goes back');
            }
          }
        },
      ),
    );
  });

  it('update() with an older remote just ticks the local clock', () => {
    const clock = new HybridClock(new ManualClock(1000));
    const a = clock.now();
    const b = clock.update(hybridTimestamp(10, 0));
    assert.equal(b, a + 1n);
  });

  it('update() with a newer remote jumps past it even when beyond the skew bound (the messenger guards it first)', () => {
    const clock = new HybridClock(new ManualClock(1000), { maxClockSkewMs: 100 });
    const remote = hybridTimestamp(1_000_000, 5);
    assert.equal(clock.update(remote), remote + 1n);
  });

  it('beyondSkewMs is 0 up to physical time + maxClockSkew and the excess past it, without moving the clock', () => {
    const clock = new HybridClock(new ManualClock(10_000), { maxClockSkewMs: 500 });
    const before = clock.current();
    assert.equal(clock.beyondSkewMs(hybridTimestamp(9_000, 0)), 0);
    assert.equal(clock.beyondSkewMs(hybridTimestamp(10_500, 7)), 0);
    assert.equal(clock.beyondSkewMs(hybridTimestamp(10_501, 0)), 1);
    assert.equal(clock.beyondSkewMs(hybridTimestamp(310_000, 0)), 299_500);
    assert.equal(clock.current(), before);
  });

  it('current() does not tick', () => {
    const clock = new HybridClock(new ManualClock(1000));
    const a = clock.now();
    assert.equal(clock.current(), a);
    assert.equal(clock.current(), a);
  });

  it('checkUntrusted rejects a timestamp further than maxClockSkew ahead of physical time, without moving the clock', () => {
    const clock = new HybridClock(new ManualClock(10_000), { maxClockSkewMs: 500 });
    const before = clock.current();
    clock.checkUntrusted(hybridTimestamp(10_500, 0));
    assert.throws(
      () => clock.checkUntrusted(hybridTimestamp(10_501, 0), 'readTimestamp'),
      (e: unknown) => e instanceof BasaltError && e.code === 'INVALID_ARGUMENT' && /readTimestamp/.test(e.message),
    );
    assert.equal(clock.current(), before);
  });

  it('onAdvance listeners see each new reading', () => {
    const clock = new HybridClock(new ManualClock(1000));
    const seen: bigint[] = [];
    const off = clock.onAdvance((ts) => seen.push(ts));
    const a = clock.now();
    const b = clock.update(hybridTimestamp(2000, 0));
    off();
    clock.now();
    assert.deepEqual(seen, [a, b]);
  });
});
