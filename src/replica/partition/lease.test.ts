/**
 * Leases as pure decisions: rule 3 (compare-and-set at apply), rule 5 (never shortened, never overlapping), rules 1
 * and 19 (the acting window) and rule 2 (holder = replica incarnation), with design-review scenarios #1–#4, and the
 * one view of "who holds the lease as of now" every caller reads.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { NodeId } from '../../core/ids.js';
import { SeededRandom } from '../../sim/random.js';
import { at, incarnation, lease } from '../../testing/replica-support.js';
import {
  actingEnd,
  checkActing,
  decideLease,
  holdsUnexpired,
  type Lease,
  leaseView,
  newReplicaIncarnation,
  routingHolder,
  sameHolder,
  startedHolder,
  tokenNames,
  tokenOf,
} from './lease.js';
import { decideLeaseAction, leaseTiming } from './primary.js';

const P1 = incarnation('p1');
const P2 = incarnation('p2');
const SKEW_MS = 5;

describe('rule 3: a Lease command is a compare-and-set on the current lease', () => {
  const L1 = lease(P1, 10, 100);

  it('the first lease applies only when it names no lease', () => {
    assert.deepEqual(decideLease(null, L1, null), { kind: 'apply', change: 'first', lease: L1 });
    assert.deepEqual(decideLease(null, L1, tokenOf(L1)), { kind: 'reject', reason: 'replaces-not-current' });
  });

  it('an extension keeps the token and only raises the expiration', () => {
    assert.equal(decideLease(L1, { ...L1, expiration: at(150) }, tokenOf(L1)).kind, 'apply');
    assert.deepEqual(decideLease(L1, { ...L1, expiration: at(100) }, tokenOf(L1)), {
      kind: 'reject',
      reason: 'not-an-extension',
    });
    assert.deepEqual(decideLease(L1, { ...L1, expiration: at(90) }, tokenOf(L1)), {
      kind: 'reject',
      reason: 'not-an-extension',
    });
  });

  it('a new lease (any holder) starts at or after the current expiration', () => {
    assert.equal(decideLease(L1, lease(P2, 100, 200), tokenOf(L1)).kind, 'apply');
    assert.equal(decideLease(L1, lease(P1, 100, 200), tokenOf(L1)).kind, 'apply');
    assert.deepEqual(decideLease(L1, lease(P2, 99, 200), tokenOf(L1)), { kind: 'reject', reason: 'overlaps-current' });
    assert.deepEqual(decideLease(L1, lease(P1, 20, 200), tokenOf(L1)), { kind: 'reject', reason: 'overlaps-current' });
  });

  it('a lease naming anything but the current lease is a no-op', () => {
    assert.deepEqual(decideLease(L1, lease(P2, 100, 200), null), { kind: 'reject', reason: 'replaces-not-current' });
    const stale = tokenOf(lease(P1, 5, 100));
    assert.deepEqual(decideLease(L1, lease(P2, 100, 200), stale), { kind: 'reject', reason: 'replaces-not-current' });
    const otherIncarnation = tokenOf(lease(incarnation('p1', 'i2'), 10, 100));
    assert.deepEqual(decideLease(L1, lease(P2, 100, 200), otherIncarnation), {
      kind: 'reject',
      reason: 'replaces-not-current',
    });
  });

  it('rule 5 (property): applied leases never shrink and distinct leases never overlap, whatever is proposed', () => {
    const holders = [P1, P2, incarnation('p3')];
    const proposal = fc.record({
      holder: fc.integer({ min: 0, max: 2 }),
      start: fc.integer({ min: 1, max: 400 }),
      length: fc.integer({ min: 1, max: 150 }),
      names: fc.oneof(fc.constant('current'), fc.constant('none'), fc.constant('stale')),
      extend: fc.boolean(),
    });
    fc.assert(
      fc.property(fc.array(proposal, { maxLength: 40 }), (proposals) => {
        let current: Lease | null = null;
        const history: Lease[] = [];
        for (const p of proposals) {
          const proposed: Lease =
            p.extend && current !== null
              ? { ...current, expiration: at(Math.max(1, Number(current.expiration >> 16n) + p.length - 75)) }
              : lease(holders[p.holder]!, p.start, p.start + p.length);
          const names =
            p.names === 'current' && current !== null
              ? tokenOf(current)
              : p.names === 'stale'
                ? tokenOf(lease(P1, 3, 4))
                : null;
          const d = decideLease(current, proposed, names);
          if (d.kind === 'reject') continue;
          if (current !== null) {
            if (d.change === 'extension') {
              assert.ok(tokenNames(tokenOf(d.lease), current) && d.lease.expiration > current.expiration);
            } else {
              assert.ok(d.lease.start >= current.expiration, 'a new lease starts at or after the current expiration');
            }
          }
          current = d.lease;
          history.push(d.lease);
        }
        // Distinct tokens cover disjoint intervals, in log order.
        for (let i = 1; i < history.length; i++) {
          const prev = history[i - 1]!;
          const next = history[i]!;
          if (!tokenNames(tokenOf(next), prev)) assert.ok(next.start >= prev.expiration);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('rules 1 and 19: the acting window is [start, expiration − 2·maxClockSkew)', () => {
  const L = lease(P1, 100, 300);

  it('the holder acts from start (inclusive) until 2·maxClockSkew before expiration', () => {
    assert.equal(checkActing(L, P1, at(99), SKEW_MS).kind, 'not-started');
    assert.equal(checkActing(L, P1, at(100), SKEW_MS).kind, 'acting');
    assert.equal(checkActing(L, P1, at(289, 65_535), SKEW_MS).kind, 'acting');
    assert.equal(actingEnd(L, SKEW_MS), at(290));
    assert.equal(checkActing(L, P1, at(290), SKEW_MS).kind, 'ended');
    assert.equal(checkActing(L, P1, at(301), SKEW_MS).kind, 'ended');
  });

  it('nobody else acts under it, and without a lease nobody acts', () => {
    assert.equal(checkActing(L, P2, at(150), SKEW_MS).kind, 'not-holder');
    assert.equal(checkActing(null, P1, at(150), SKEW_MS).kind, 'no-lease');
  });

  it('design-review #1: a new holder whose lease starts in its future does not serve before the start', () => {
    // L1 = {P1, [10, 100)}; P2 applies L2 = {P2, [100, 300)} at HLC 62 and must not serve (T2 w(k) at 70 refused).
    const L1 = lease(P1, 10, 100);
    const L2 = lease(P2, 100, 300);
    assert.equal(decideLease(L1, L2, tokenOf(L1)).kind, 'apply');
    for (const now of [62, 70, 99]) assert.equal(checkActing(L2, P2, at(now), SKEW_MS).kind, 'not-started');
    // So every write under L2 is at HLC ≥ 100 = L1's expiration, and P1's reads under L1 are below it.
    assert.equal(checkActing(L2, P2, at(100), SKEW_MS).kind, 'acting');
    assert.equal(checkActing(L1, P1, at(80), SKEW_MS).kind, 'acting');
    assert.equal(checkActing(L1, P1, at(95), SKEW_MS).kind, 'ended', 'stasis: P1 stops 2·skew early');
  });
});

describe('rule 2: the holder is a replica incarnation', () => {
  it('incarnations are drawn per replica object, so two replica objects of one node are different holders', () => {
    const random = new SeededRandom(7);
    const node = 'n1-ephemeral' as NodeId;
    const a = newReplicaIncarnation(node, random);
    const b = newReplicaIncarnation(node, random);
    assert.equal(a.nodeId, b.nodeId);
    assert.notEqual(a.incarnation, b.incarnation);
    assert.ok(!sameHolder(a, b));
  });

  it('design-review #2: a re-created replica finds the lease naming its node but never acts under it', () => {
    // L = {n1 (incarnation i1), [100, 5100)}; the replica object is stopped and created again on the same node.
    const before = incarnation('n1', 'i1');
    const after = incarnation('n1', 'i2');
    const L = lease(before, 100, 5_100);
    assert.equal(checkActing(L, before, at(200), SKEW_MS).kind, 'acting');
    assert.equal(checkActing(L, after, at(200), SKEW_MS).kind, 'not-holder');
    assert.equal(tokenNames(tokenOf({ ...L, holder: after }), L), false, 'its token is not the lease token');
    // As Raft leader it takes a new lease, which starts at the old expiration: the old locks' lease never overlaps.
    const action = decideLeaseAction({
      self: after,
      selfName: L.holderName,
      isLeader: true,
      term: 3 as never,
      appliedTerm: 3 as never,
      lease: L,
      now: at(300),
      timing: leaseTiming(SKEW_MS, 1_000, 100),
      leaseProposalInFlight: false,
    });
    assert.ok(action.kind === 'propose' && action.change === 'takeover');
    assert.equal(action.lease.start, at(5_100));
    assert.ok(sameHolder(action.lease.holder, after));
  });
});

describe('design-review #4: lease commands are compare-and-set, so a deposed renewal cannot overlap the next lease', () => {
  it('X (renewal to 200) then L2 (named L1, [100, 300)): X applies, L2 is a no-op; no overlap', () => {
    const L1 = lease(P1, 10, 100);
    const X = { ...L1, expiration: at(200) };
    const L2 = lease(P2, 100, 300);
    const afterX = decideLease(L1, X, tokenOf(L1));
    assert.ok(afterX.kind === 'apply' && afterX.change === 'extension');
    const afterL2 = decideLease(afterX.lease, L2, tokenOf(L1));
    assert.deepEqual(afterL2, { kind: 'reject', reason: 'overlaps-current' });
    // Both orders are safe: with L2 first, X names a lease that is no longer current.
    const l2First = decideLease(L1, L2, tokenOf(L1));
    assert.equal(l2First.kind, 'apply');
    assert.deepEqual(decideLease(L2, X, tokenOf(L1)), { kind: 'reject', reason: 'replaces-not-current' });
  });
});

describe('leaseView: who holds the lease as of now', () => {
  const L = lease(P1, 100, 300);
  const name = L.holderName;

  it('phases: not started, acting, stasis (the last 2·maxClockSkew), expired', () => {
    const table: [number, string][] = [
      [99, 'not-started'],
      [100, 'acting'],
      [289, 'acting'],
      [290, 'stasis'],
      [299, 'stasis'],
      [300, 'expired'],
    ];
    for (const [nowMs, phase] of table) assert.equal(leaseView(L, P1, at(nowMs), SKEW_MS).phase, phase, `at ${nowMs}`);
    assert.deepEqual(leaseView(null, P1, at(150), SKEW_MS), { lease: null, phase: 'none', mine: false });
    assert.equal(leaseView(L, P2, at(150), SKEW_MS).mine, false);
  });

  it('routing asks for an unexpired holder, started or not; the operator view only for a started one', () => {
    assert.equal(routingHolder(leaseView(L, P2, at(50), SKEW_MS)), name);
    assert.equal(startedHolder(leaseView(L, P2, at(50), SKEW_MS)), undefined);
    assert.equal(startedHolder(leaseView(L, P2, at(295), SKEW_MS)), name, 'stasis still names the holder');
    assert.equal(routingHolder(leaseView(L, P2, at(300), SKEW_MS)), undefined);
    assert.equal(holdsUnexpired(leaseView(L, P1, at(50), SKEW_MS)), true);
    assert.equal(holdsUnexpired(leaseView(L, P2, at(150), SKEW_MS)), false);
    assert.equal(holdsUnexpired(leaseView(L, P1, at(300), SKEW_MS)), false);
  });

  it('answers exactly what the separate derivations answered (started and unexpired, unexpired, acting)', () => {
    const ms = fc.integer({ min: 1, max: 1_000 });
    fc.assert(
      fc.property(ms, ms, ms, fc.boolean(), fc.boolean(), (startMs, lengthMs, nowMs, mine, within) => {
        const l = lease(P1, startMs, startMs + lengthMs);
        const self = mine ? P1 : P2;
        const now = at(nowMs);
        const view = leaseView(l, self, now, SKEW_MS);
        const unexpired = now < l.expiration;
        assert.equal(startedHolder(view), l.start <= now && unexpired ? l.holderName : undefined);
        assert.equal(routingHolder(view), unexpired ? l.holderName : undefined);
        assert.equal(holdsUnexpired(view), sameHolder(l.holder, self) && unexpired);
        const acting = mine && within && l.start <= now && now < actingEnd(l, SKEW_MS);
        assert.equal(checkActing(l, self, now, SKEW_MS, within).kind === 'acting', acting);
      }),
      { numRuns: 500 },
    );
  });
});
