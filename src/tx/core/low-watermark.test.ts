import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { addMs, hybridTimestamp } from '../../hlc/timestamp.js';
import { LowWatermark, type WatermarkHold } from './low-watermark.js';

class ManualClock {
  constructor(public ms: number) {}
  nowMs(): number {
    return this.ms;
  }
  monotonicMs(): number {
    return this.ms;
  }
}

const at = (ms: number): HybridTimestamp => hybridTimestamp(ms);

function setup(retentionMs = 1_000, startMs = 100_000) {
  const physical = new ManualClock(startMs);
  const clock = new HybridClock(physical);
  return { physical, clock, watermark: new LowWatermark({ clock, retentionMs }) };
}

describe('low watermark (rule 10)', () => {
  it('with no open RO tx the watermark is now − retention', () => {
    const { physical, watermark } = setup(1_000);
    assert.equal(watermark.current(), at(99_000));
    physical.ms += 500;
    assert.equal(watermark.current(), at(99_500));
  });

  it('an open RO tx holds the watermark at its readTs until released; then it catches up with time', () => {
    const { physical, watermark } = setup(1_000);
    const hold = watermark.register(at(99_200));
    physical.ms += 5_000;
    assert.equal(watermark.current(), at(99_200), 'held at the open readTs');
    watermark.check(at(99_200));
    hold.release();
    hold.release();
    assert.equal(watermark.openCount, 0);
    assert.equal(watermark.current(), at(104_000));
  });

  it('a readTs below the watermark is refused at register and at check with TX_READ_ONLY_TOO_OLD', () => {
    const { watermark } = setup(1_000);
    assert.throws(
      () => watermark.register(at(98_999)),
      (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'),
    );
    assert.throws(
      () => watermark.check(at(98_999)),
      (e) => isBasaltError(e, 'TX_READ_ONLY_TOO_OLD'),
    );
    assert.equal(watermark.openCount, 0);
    watermark.check(at(99_000));
  });

  it('the watermark never goes back, even when time does', () => {
    const { physical, watermark } = setup(1_000);
    const before = watermark.current();
    physical.ms -= 10_000;
    assert.equal(watermark.current(), before);
  });

  it('readers past readersMax are refused OVERLOADED', () => {
    const physical = new ManualClock(100_000);
    const watermark = new LowWatermark({ clock: new HybridClock(physical), retentionMs: 10, readersMax: 2 });
    watermark.register(at(100_000));
    watermark.register(at(100_000));
    assert.throws(
      () => watermark.register(at(100_000)),
      (e) => isBasaltError(e, 'OVERLOADED'),
    );
  });

  it('property: the watermark never passes the readTs of an open RO tx and never goes back', () => {
    type Step = { kind: 'advance'; ms: number } | { kind: 'open'; backMs: number } | { kind: 'close'; pick: number };
    const step: fc.Arbitrary<Step> = fc.oneof(
      fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3_000 }) }),
      fc.record({ kind: fc.constant('open' as const), backMs: fc.integer({ min: 0, max: 2_000 }) }),
      fc.record({ kind: fc.constant('close' as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 200 }), (steps) => {
        const { physical, clock, watermark } = setup(1_000);
        const open: WatermarkHold[] = [];
        let last = watermark.current();
        for (const s of steps) {
          if (s.kind === 'advance') physical.ms += s.ms;
          else if (s.kind === 'open') {
            const readTs = addMs(clock.now(), -s.backMs);
            try {
              open.push(watermark.register(readTs));
            } catch (error) {
              assert.ok(isBasaltError(error, 'TX_READ_ONLY_TOO_OLD'));
              assert.ok(readTs < watermark.current());
            }
          } else if (open.length > 0) {
            const [hold] = open.splice(s.pick % open.length, 1);
            hold?.release();
          }
          const w = watermark.current();
          assert.ok(w >= last, 'monotonic');
          for (const hold of open) assert.ok(w <= hold.readTs, 'below every open readTs');
          last = w;
        }
        assert.equal(watermark.openCount, open.length);
      }),
      { seed: 6_010, numRuns: 200 },
    );
  });
});

describe('low watermark: protected timestamps', () => {
  it('a floor holds the watermark below it while defined; without it the watermark catches up with time', () => {
    const physical = new ManualClock(100_000);
    const clock = new HybridClock(physical);
    let floor: HybridTimestamp | undefined = at(99_500);
    const watermark = new LowWatermark({ clock, retentionMs: 1_000, floor: () => floor });
    assert.equal(watermark.current(), at(99_000), 'retention is below the floor');
    physical.ms += 60_000;
    assert.equal(watermark.current(), at(99_500), 'held at the protected timestamp');
    watermark.check(at(99_500));
    const hold = watermark.register(at(99_600));
    hold.release();
    floor = undefined;
    assert.equal(watermark.current(), at(159_000), 'released: back to now − retention');
    assert.throws(
      () => watermark.check(at(99_500)),
      (e: unknown) => isBasaltError(e) && e.code === 'TX_READ_ONLY_TOO_OLD',
    );
    floor = at(99_500);
    assert.equal(watermark.current(), at(159_000), 'a floor below the watermark does not move it back');
  });
});
