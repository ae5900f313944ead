/**
 * The proposal coalescer: one command in flight per partition and kind; what arrives meanwhile goes into the next
 * command together, within its bound and without two items of one distinct key; every submit settles as its command.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { ProposalCoalescer } from './coalesced-proposals.js';

interface Item {
  readonly tx: string;
  readonly v: number;
}

/** A coalescer whose proposals the test settles by hand, in order. */
function harness(batchMax = 3) {
  const proposed: Item[][] = [];
  const settle: { resolve: () => void; reject: (e: unknown) => void }[] = [];
  const coalescer = new ProposalCoalescer<Item>({
    batchMax,
    key: (i) => `${i.tx}/${i.v}`,
    distinct: (i) => i.tx,
    propose: (items) =>
      new Promise<void>((resolve, reject) => {
        proposed.push([...items]);
        settle.push({ resolve, reject });
      }),
  });
  return { coalescer, proposed, settle };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('ProposalCoalescer', () => {
  it('a lone item is proposed at once; items that arrive while it is in flight go into the next command together', async () => {
    const { coalescer, proposed, settle } = harness();
    const outcomes: string[] = [];
    const track = (name: string, p: Promise<void>) => p.then(() => outcomes.push(name));
    const a = track('a', coalescer.submit({ tx: 'a', v: 1 }));
    assert.deepEqual(proposed, [[{ tx: 'a', v: 1 }]], 'nothing waits when nothing is in flight');
    const b = track('b', coalescer.submit({ tx: 'b', v: 1 }));
    const c = track('c', coalescer.submit({ tx: 'c', v: 1 }));
    await tick();
    assert.equal(proposed.length, 1, 'one command in flight at a time');
    assert.equal(coalescer.queuedCount, 2);
    settle[0]!.resolve();
    await a;
    await tick();
    assert.deepEqual(proposed[1], [
      { tx: 'b', v: 1 },
      { tx: 'c', v: 1 },
    ]);
    assert.deepEqual(outcomes, ['a'], 'b and c settle only with their own command');
    settle[1]!.resolve();
    await Promise.all([b, c]);
    assert.deepEqual(outcomes, ['a', 'b', 'c']);
  });

  it('equal items share one slot; a command holds at most batchMax items and no two of one distinct key', async () => {
    const { coalescer, proposed, settle } = harness(2);
    const first = coalescer.submit({ tx: 'x', v: 0 });
    const waiting = [
      coalescer.submit({ tx: 'a', v: 1 }),
      coalescer.submit({ tx: 'a', v: 1 }),
      coalescer.submit({ tx: 'a', v: 2 }),
      coalescer.submit({ tx: 'b', v: 1 }),
      coalescer.submit({ tx: 'c', v: 1 }),
    ];
    assert.equal(coalescer.queuedCount, 4, 'the repeated a/1 is one queued item');
    settle[0]!.resolve();
    await first;
    await tick();
    assert.deepEqual(proposed[1], [
      { tx: 'a', v: 1 },
      { tx: 'b', v: 1 },
    ]);
    settle[1]!.resolve();
    await tick();
    assert.deepEqual(proposed[2], [
      { tx: 'a', v: 2 },
      { tx: 'c', v: 1 },
    ]);
    settle[2]!.resolve();
    await Promise.all(waiting);
    assert.equal(coalescer.queuedCount, 0);
  });

  it('a failed proposal fails every submit it carried, and the queue goes on', async () => {
    const { coalescer, proposed, settle } = harness();
    const first = coalescer.submit({ tx: 'a', v: 1 });
    const second = coalescer.submit({ tx: 'b', v: 1 });
    const repeated = coalescer.submit({ tx: 'b', v: 1 });
    settle[0]!.reject(new Error('not leader'));
    await assert.rejects(first, /not leader/);
    await tick();
    assert.deepEqual(proposed[1], [{ tx: 'b', v: 1 }]);
    settle[1]!.reject(new Error('overwritten'));
    await assert.rejects(second, /overwritten/);
    await assert.rejects(repeated, /overwritten/);
    const later = coalescer.submit({ tx: 'c', v: 1 });
    assert.equal(proposed.length, 3, 'proposed at once again');
    settle[2]!.resolve();
    await later;
  });

  it('a gathering coalescer proposes only after its delay, with every item of that window in one command', async () => {
    const due: { fn: () => void; delayMs: number }[] = [];
    const timers: Timers = {
      setTimer: (fn, delayMs) => {
        due.push({ fn, delayMs });
        return { timerId: due.length } as TimerHandle;
      },
      clearTimer: () => {},
    };
    const proposed: string[][] = [];
    const coalescer = new ProposalCoalescer<string>({
      batchMax: 10,
      key: (tx) => tx,
      distinct: (tx) => tx,
      propose: async (txs) => {
        proposed.push([...txs]);
      },
      gather: { timers, delayMs: 50 },
    });
    const all = Promise.all(['a', 'b', 'c'].map((tx) => coalescer.submit(tx)));
    await tick();
    assert.deepEqual(proposed, [], 'nothing proposed before the delay');
    assert.deepEqual(
      due.map((d) => d.delayMs),
      [50],
      'one gathering timer',
    );
    due[0]!.fn();
    await all;
    assert.deepEqual(proposed, [['a', 'b', 'c']]);
  });
});
