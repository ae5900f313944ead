import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sleep } from '../env/timers.js';
import { SimulationError } from './errors.js';
import { drainMicrotasks, Scheduler, SIM_EPOCH_MS } from './scheduler.js';

const SEED = 'scheduler-test';

describe('Scheduler', () => {
  it('starts at the fixed epoch', () => {
    assert.equal(new Scheduler({ seed: SEED }).nowMs(), SIM_EPOCH_MS);
  });

  it('runs events by time, then by insertion order', () => {
    const s = new Scheduler({ seed: SEED });
    const order: string[] = [];
    s.schedule(10, () => order.push('a10'));
    s.schedule(5, () => order.push('b5'));
    s.schedule(10, () => order.push('c10'));
    s.schedule(0, () => order.push('d0'));
    s.schedule(5, () => order.push('e5'));
    const result = s.runSync();
    assert.deepEqual(order, ['d0', 'b5', 'e5', 'a10', 'c10']);
    assert.equal(result.stop, 'idle');
    assert.equal(result.events, 5);
    assert.equal(s.nowMs(), SIM_EPOCH_MS + 10);
  });

  it('an event scheduled from an event at delay 0 runs after the events already due at that time', () => {
    const s = new Scheduler({ seed: SEED });
    const order: string[] = [];
    s.schedule(1, () => {
      order.push('first');
      s.schedule(0, () => order.push('nested'));
    });
    s.schedule(1, () => order.push('second'));
    s.runSync();
    assert.deepEqual(order, ['first', 'second', 'nested']);
  });

  it('keeps a large random schedule in (time, sequence) order', () => {
    const s = new Scheduler({ seed: SEED });
    const fired: Array<[number, number]> = [];
    let x = 12345;
    for (let i = 0; i < 5000; i++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      const delay = x % 50;
      s.schedule(delay, () => fired.push([s.nowMs(), i]));
    }
    s.runSync();
    assert.equal(fired.length, 5000);
    for (let i = 1; i < fired.length; i++) {
      const [t0, i0] = fired[i - 1]!;
      const [t1, i1] = fired[i]!;
      assert.ok(t0 < t1 || (t0 === t1 && i0 < i1), `out of order at ${i}`);
    }
  });

  it('cancel removes a pending event and is a no-op afterwards', () => {
    const s = new Scheduler({ seed: SEED });
    const order: string[] = [];
    const h = s.schedule(5, () => order.push('cancelled'));
    s.schedule(6, () => order.push('kept'));
    s.cancel(h);
    s.cancel(h);
    assert.equal(s.pendingCount, 1);
    s.runSync();
    assert.deepEqual(order, ['kept']);
  });

  it('cancelOwner cancels only that owner’s timers, and a retired owner cannot schedule again', () => {
    const s = new Scheduler({ seed: SEED });
    const fired: string[] = [];
    const t1 = s.timers('n1#1');
    const t2 = s.timers('n2#1');
    t1.setTimer(() => fired.push('n1-a'), 5);
    t1.setTimer(() => fired.push('n1-b'), 7);
    t2.setTimer(() => fired.push('n2'), 6);
    assert.equal(s.cancelOwner('n1#1'), 2);
    s.runSync();
    assert.deepEqual(fired, ['n2']);
    s.retireOwner('n2#1');
    t2.setTimer(() => fired.push('zombie'), 1);
    s.runSync();
    assert.deepEqual(fired, ['n2']);
  });

  it('untilMs stops before later events and advances the clock to the bound', () => {
    const s = new Scheduler({ seed: SEED });
    const fired: number[] = [];
    for (const d of [5, 10, 15]) s.schedule(d, () => fired.push(d));
    const r = s.runSync({ untilMs: SIM_EPOCH_MS + 12 });
    assert.deepEqual(fired, [5, 10]);
    assert.equal(r.stop, 'time');
    assert.equal(s.nowMs(), SIM_EPOCH_MS + 12);
    const r2 = s.runSync({ forMs: 100 });
    assert.equal(r2.stop, 'idle');
    assert.equal(s.nowMs(), SIM_EPOCH_MS + 112);
  });

  it('until stops as soon as the predicate holds', () => {
    const s = new Scheduler({ seed: SEED });
    let n = 0;
    for (let i = 0; i < 10; i++) s.schedule(i, () => n++);
    const r = s.runSync({ until: () => n === 4 });
    assert.equal(r.stop, 'until');
    assert.equal(n, 4);
  });

  it('a runaway run throws a SimulationError naming the seed', () => {
    const s = new Scheduler({ seed: 'runaway-seed' });
    const again = (): void => {
      s.schedule(1, again, 'loop');
    };
    again();
    assert.throws(
      () => s.runSync({ maxEvents: 100 }),
      (e: unknown) => e instanceof SimulationError && e.message.includes('"runaway-seed"'),
    );
  });

  it('an event that throws surfaces as a SimulationError with the seed and the label', () => {
    const s = new Scheduler({ seed: 77 });
    s.schedule(
      3,
      () => {
        throw new Error('boom');
      },
      'bad-event',
    );
    assert.throws(
      () => s.runSync(),
      (e: unknown) =>
        e instanceof SimulationError && e.message.includes('bad-event') && e.message.includes('boom') && e.seed === 77,
    );
  });

  it('drains promise continuations after every event, in the same order every run', async () => {
    const runOnce = async (): Promise<{ log: string[]; hash: string }> => {
      const s = new Scheduler({ seed: SEED });
      const log: string[] = [];
      const node = async (name: string, timers: ReturnType<Scheduler['timers']>, delays: number[]): Promise<void> => {
        for (const [i, d] of delays.entries()) {
          await sleep(timers, d);
          log.push(`${name}:${i}@${s.nowMs() - SIM_EPOCH_MS}`);
          await Promise.resolve();
          log.push(`${name}:${i}+`);
        }
      };
      void node('a', s.timers('a'), [3, 1, 0, 2]);
      void node('b', s.timers('b'), [3, 0, 1, 2]);
      void node('c', s.timers('c'), [1, 1, 1, 1, 1]);
      await s.run();
      return { log, hash: s.traceHash() };
    };
    const first = await runOnce();
    const second = await runOnce();
    assert.deepEqual(first.log, second.log);
    assert.equal(first.hash, second.hash);
    // Each event's continuation (including the extra await) runs before the next event: a:0 is fully done before b:0.
    const a0 = first.log.indexOf('a:0@3');
    assert.equal(first.log[a0 + 1], 'a:0+');
    assert.equal(first.log.length, 2 * (4 + 4 + 5));
  });

  it('runSync does not drain microtasks between events, run does', async () => {
    const s = new Scheduler({ seed: SEED });
    const log: string[] = [];
    const timers = s.timers('x');
    void sleep(timers, 1).then(() => log.push('continuation'));
    s.schedule(1, () => log.push('second event'));
    await s.run();
    assert.deepEqual(log, ['continuation', 'second event']);
    await drainMicrotasks();
  });

  it('the trace hash depends on event times and labels, and the bounded trace keeps the latest entries', () => {
    const make = (shift: number): Scheduler => {
      const s = new Scheduler({ seed: SEED, traceMax: 3 });
      for (let i = 0; i < 5; i++) s.schedule(i + (i === 4 ? shift : 0), () => {}, `e${i}`);
      s.runSync();
      return s;
    };
    assert.equal(make(0).traceHash(), make(0).traceHash());
    assert.notEqual(make(0).traceHash(), make(1).traceHash());
    assert.deepEqual(
      make(0)
        .trace()
        .map((e) => e.label),
      ['e2', 'e3', 'e4'],
    );
  });

  it('compacts cancelled timers without losing live ones', () => {
    const s = new Scheduler({ seed: SEED });
    const timers = s.timers('raft');
    let fired = 0;
    // An election timer reset on every heartbeat: most timers are cancelled before they fire.
    let handle = timers.setTimer(() => fired++, 1000);
    for (let i = 0; i < 20_000; i++) {
      timers.clearTimer(handle);
      handle = timers.setTimer(() => fired++, 1000 + i);
    }
    assert.equal(s.pendingCount, 1);
    s.runSync();
    assert.equal(fired, 1);
    assert.equal(s.nowMs(), SIM_EPOCH_MS + 1000 + 19_999);
  });
});
