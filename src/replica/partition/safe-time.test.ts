/**
 * Safe time (rules 9 and 11): applied safe-time waiters, the async wait with a timeout, the primary's readable safe
 * time, and the in-flight proposal registry (take-and-register in one step; removal only on apply or abandon, or for
 * a proposal whose entry left the local log, once it is decided).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import { type HybridTimestamp, logIndex, term } from '../../core/ids.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { HybridClock } from '../../hlc/hybrid-clock.js';
import { EntryLeftLogError } from '../../raft/driver.js';
import { at, incarnation, lease, ManualClock } from '../../testing/replica-support.js';
import { tokenOf } from './lease.js';
import { ProposalTracker, proposeCommand } from './proposals.js';
import { AppliedSafeTime, primarySafeTime, waitForSafeTime } from './safe-time.js';

/** Timers fired by hand, in due order. */
class ManualTimers implements Timers {
  private nowMs = 0;
  private nextId = 1;
  private readonly pending = new Map<number, { dueMs: number; fn: () => void }>();

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timerId = this.nextId++;
    this.pending.set(timerId, { dueMs: this.nowMs + delayMs, fn });
    return { timerId };
  }

  clearTimer(handle: TimerHandle): void {
    this.pending.delete(handle.timerId);
  }

  get count(): number {
    return this.pending.size;
  }

  advance(ms: number): void {
    this.nowMs += ms;
    for (const [id, t] of [...this.pending].sort((a, b) => a[1].dueMs - b[1].dueMs)) {
      if (t.dueMs > this.nowMs) continue;
      this.pending.delete(id);
      t.fn();
    }
  }
}

describe('applied safe time', () => {
  it('waiters run once safe time reaches their target, in target order; an earlier target is reached at once', () => {
    const st = new AppliedSafeTime(at(10));
    const order: string[] = [];
    assert.deepEqual(
      st.waitFor(at(10), () => order.push('never')),
      { kind: 'reached' },
    );
    st.waitFor(at(30), () => order.push('30'));
    st.waitFor(at(20), () => order.push('20a'));
    st.waitFor(at(20), () => order.push('20b'));
    assert.equal(st.waiterCount, 3);
    st.advance(at(19));
    assert.deepEqual(order, []);
    st.advance(at(25));
    assert.deepEqual(order, ['20a', '20b']);
    st.advance(at(24));
    assert.equal(st.current(), at(25), 'safe time never goes back');
    st.advance(at(30));
    assert.deepEqual(order, ['20a', '20b', '30']);
    assert.equal(st.waiterCount, 0);
  });

  it('a cancelled waiter never runs; cancelling twice reports false', () => {
    const st = new AppliedSafeTime(at(1));
    let ran = false;
    const w = st.waitFor(at(5), () => {
      ran = true;
    });
    assert.ok(w.kind === 'waiting');
    assert.equal(w.cancel(), true);
    assert.equal(w.cancel(), false);
    st.advance(at(9));
    assert.equal(ran, false);
  });

  it('the waiter table is bounded: past the bound a wait is refused', () => {
    const st = new AppliedSafeTime(at(1), 2);
    st.waitFor(at(5), () => {});
    st.waitFor(at(6), () => {});
    assert.deepEqual(
      st.waitFor(at(7), () => {}),
      { kind: 'refused', code: 'OVERLOADED' },
    );
  });

  it('waitForSafeTime resolves when reached and rejects with TIMEOUT (cancelling its waiter) otherwise', async () => {
    const st = new AppliedSafeTime(at(1));
    const timers = new ManualTimers();
    const reached = waitForSafeTime(st, at(5), timers, 100);
    st.advance(at(5));
    await reached;
    assert.equal(timers.count, 0, 'the timeout timer was cleared');
    const late = waitForSafeTime(st, at(50), timers, 100);
    timers.advance(100);
    await assert.rejects(late, (e: unknown) => isBasaltError(e, 'TIMEOUT'));
    assert.equal(st.waiterCount, 0);
    await waitForSafeTime(st, at(2), timers, 100);
  });

  it('waitForSafeTime rejects with the abort reason and cleans up', async () => {
    const st = new AppliedSafeTime(at(1));
    const timers = new ManualTimers();
    const controller = new AbortController();
    const waiting = waitForSafeTime(st, at(5), timers, 100, controller.signal);
    controller.abort(new BasaltError('CANCELLED', 'stop'));
    await assert.rejects(waiting, (e: unknown) => isBasaltError(e, 'CANCELLED'));
    assert.equal(st.waiterCount, 0);
    assert.equal(timers.count, 0);
  });
});

describe("the primary's readable safe time", () => {
  it('is now with nothing in flight, just below the smallest in-flight timestamp otherwise, never below applied', () => {
    assert.equal(primarySafeTime(at(10), at(50), undefined), at(50));
    assert.equal(primarySafeTime(at(10), at(50), at(40)), (at(40) - 1n) as HybridTimestamp);
    assert.equal(primarySafeTime(at(10), at(50), at(60)), at(50));
    // Every later command's effective timestamp exceeds the applied one, whatever was proposed below it.
    assert.equal(primarySafeTime(at(45), at(50), at(40)), at(45));
  });
});

describe('rule 9: in-flight proposals', () => {
  function tracker() {
    const physical = new ManualClock(100);
    const clock = new HybridClock(physical);
    return { physical, clock, tracker: new ProposalTracker(incarnation('p1'), clock, 3) };
  }

  it('take reads the timestamp and registers it in flight in one step (design-review #11b)', () => {
    const { tracker: t, clock } = tracker();
    const before = clock.current();
    const taken = t.take(() => {});
    assert.ok(taken.kind === 'taken');
    assert.ok(taken.proposal.ts > before);
    // No read can be served at or above this proposal's timestamp from here on until it settles.
    assert.equal(t.smallestInFlight(), taken.proposal.ts);
    assert.ok(primarySafeTime(at(1), clock.now(), t.smallestInFlight()) < taken.proposal.ts);
  });

  it('the smallest in-flight timestamp follows take order; a proposal leaves only when applied or abandoned', () => {
    const { tracker: t } = tracker();
    const outcomes: string[] = [];
    const a = t.take((o) => outcomes.push(`a:${o.kind}`));
    const b = t.take((o) => outcomes.push(`b:${o.kind}`));
    assert.ok(a.kind === 'taken' && b.kind === 'taken');
    assert.ok(a.proposal.ts < b.proposal.ts);
    assert.equal(t.settleApplied(b.proposal.id, { kind: 'SAFE_TIME', appliedTs: b.proposal.ts }), true);
    assert.equal(t.smallestInFlight(), a.proposal.ts, 'an older proposal still in flight keeps safe time below it');
    assert.equal(t.abandon(a.proposal.id, new BasaltError('NOT_LEADER', 'overwritten')), true);
    assert.equal(t.smallestInFlight(), undefined);
    assert.equal(t.abandon(a.proposal.id, new BasaltError('NOT_LEADER', 'again')), false, 'settles once');
    assert.deepEqual(outcomes, ['b:applied', 'a:abandoned']);
  });

  it('results of other incarnations are not routed here, even with the same node id and counter', () => {
    const { tracker: t } = tracker();
    const taken = t.take(() => assert.fail('must not settle'));
    assert.ok(taken.kind === 'taken');
    const foreign = { ...taken.proposal.id, incarnation: 'other' };
    assert.equal(t.owns(foreign), false);
    assert.equal(t.settleApplied(foreign, { kind: 'SAFE_TIME', appliedTs: at(1) }), false);
    assert.equal(t.inFlightCount, 1);
  });

  it('the in-flight set is bounded; abandonAll empties it', () => {
    const { tracker: t } = tracker();
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) assert.equal(t.take((o) => seen.push(o.kind)).kind, 'taken');
    assert.deepEqual(
      t.take(() => {}),
      { kind: 'refused', code: 'OVERLOADED' },
    );
    t.abandonAll(new BasaltError('NODE_UNAVAILABLE', 'stopping'));
    assert.deepEqual(seen, ['abandoned', 'abandoned', 'abandoned']);
    assert.equal(t.inFlightCount, 0);
  });

  it('proposeCommand abandons a malformed command before submitting it', async () => {
    const { tracker: t } = tracker();
    let submitted = false;
    const result = proposeCommand(
      t,
      (p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id, extra: true }) as never,
      async () => {
        submitted = true;
      },
    );
    await assert.rejects(result, (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'));
    assert.equal(submitted, false);
    assert.equal(t.inFlightCount, 0);
  });

  it('proposeCommand keeps the proposal in flight until Raft settles it (design-review #11c)', async () => {
    const { tracker: t } = tracker();
    let fail: ((e: unknown) => void) | undefined;
    const result = proposeCommand(
      t,
      (p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id }),
      () =>
        new Promise((_resolve, reject) => {
          fail = reject;
        }),
    );
    await Promise.resolve();
    assert.equal(t.inFlightCount, 1, 'a proposal whose fate is open stays in flight');
    fail?.(new BasaltError('TIMEOUT', 'a snapshot covered it'));
    await assert.rejects(result, (e: unknown) => isBasaltError(e, 'TIMEOUT'));
    assert.equal(t.inFlightCount, 0);
  });

  const leftLog = (index: number) => new EntryLeftLogError(logIndex(index), term(1), { index });

  it('a proposal whose entry left the log is answered at once and stays in flight until the applied index reaches it (design-review #11c)', () => {
    const { tracker: t } = tracker();
    const outcomes: string[] = [];
    const a = t.take((o) => outcomes.push(`a:${o.kind}`));
    const b = t.take((o) => outcomes.push(`b:${o.kind}`));
    assert.ok(a.kind === 'taken' && b.kind === 'taken');
    t.appliedThrough(4, null);
    assert.equal(t.hold(a.proposal.id, leftLog(7), { index: 7, token: undefined }), true);
    assert.deepEqual(outcomes, ['a:abandoned'], 'the proposer learns at once that the outcome is unknown');
    assert.equal(t.hold(a.proposal.id, leftLog(7), { index: 7, token: undefined }), false, 'answered once');
    assert.equal(t.settleApplied(b.proposal.id, { kind: 'SAFE_TIME', appliedTs: b.proposal.ts }), true);
    // A later leader may still commit the entry at 7: no read at or above its timestamp may be served meanwhile.
    assert.equal(t.smallestInFlight(), a.proposal.ts);
    assert.equal(t.heldInFlightCount, 1);
    t.appliedThrough(6, null);
    assert.equal(t.smallestInFlight(), a.proposal.ts);
    // An entry at 7 was applied here: it was this one (and settled) or another, so this one can never apply.
    t.appliedThrough(7, null);
    assert.equal(t.smallestInFlight(), undefined);
    assert.equal(t.heldInFlightCount, 0);
    assert.deepEqual(outcomes, ['a:abandoned', 'b:applied']);
  });

  it('a held proposal that a later leader commits is settled by its apply, without a second answer', () => {
    const { tracker: t } = tracker();
    const outcomes: string[] = [];
    const a = t.take((o) => outcomes.push(o.kind));
    assert.ok(a.kind === 'taken');
    t.hold(a.proposal.id, leftLog(3), { index: 3, token: undefined });
    assert.equal(t.settleApplied(a.proposal.id, { kind: 'SAFE_TIME', appliedTs: a.proposal.ts }), true);
    assert.equal(t.inFlightCount, 0);
    assert.deepEqual(outcomes, ['abandoned']);
  });

  it('a held data proposal leaves the in-flight set once the applied lease no longer names its lease (rule 4: a no-op)', () => {
    const { tracker: t } = tracker();
    const own = lease(incarnation('p1'), 100, 200);
    const a = t.take(() => {});
    assert.ok(a.kind === 'taken');
    t.appliedThrough(2, own);
    t.hold(a.proposal.id, leftLog(9), { index: 9, token: tokenOf(own) });
    t.appliedThrough(3, { ...own, expiration: at(300) });
    assert.equal(t.smallestInFlight(), a.proposal.ts, 'an extension keeps the token: the proposal may still apply');
    t.appliedThrough(4, lease(incarnation('p2'), 300, 400));
    assert.equal(t.smallestInFlight(), undefined);
  });

  it('a proposal held after its lease was replaced leaves at once; abandonAll also ends held ones', () => {
    const { tracker: t } = tracker();
    const own = lease(incarnation('p1'), 100, 200);
    const a = t.take(() => {});
    const b = t.take(() => {});
    assert.ok(a.kind === 'taken' && b.kind === 'taken');
    t.appliedThrough(5, lease(incarnation('p2'), 200, 300));
    t.hold(a.proposal.id, leftLog(9), { index: 9, token: tokenOf(own) });
    assert.equal(t.inFlightCount, 1);
    t.hold(b.proposal.id, leftLog(10), { index: 10, token: undefined });
    t.abandonAll(new BasaltError('NODE_UNAVAILABLE', 'stopping'));
    assert.equal(t.inFlightCount, 0);
    assert.equal(t.heldInFlightCount, 0);
  });

  it('proposeCommand answers a proposal whose entry left the log and holds it until the applied index reaches it', async () => {
    const { tracker: t } = tracker();
    const own = lease(incarnation('p1'), 100, 200);
    t.appliedThrough(1, own);
    const result = proposeCommand(
      t,
      (p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id }),
      () => Promise.reject(leftLog(5)),
    );
    await assert.rejects(result, (e: unknown) => e instanceof EntryLeftLogError && isBasaltError(e, 'TIMEOUT'));
    assert.equal(t.heldInFlightCount, 1, 'the caller was answered; the timestamp stays');
    t.appliedThrough(5, own);
    assert.equal(t.inFlightCount, 0);
  });
});
