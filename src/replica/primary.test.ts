/**
 * The lease-holder decisions: when the leader proposes a lease (rule 3: only after applying an entry of its own
 * term), renewals and takeovers (rule 5), checkPrimary (rules 1, 19), lease confirmation (rule 6), per-lease
 * sequence numbers (rule 4), idle SafeTimeSync, and the timing limits.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { NodeName, Term } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { tokenOf } from './lease.js';
import {
  checkPrimary,
  confirmLease,
  DataSequence,
  decideLeaseAction,
  type LeaseActionInput,
  leaseTiming,
  shouldProposeSafeTimeSync,
} from './primary.js';
import { at, incarnation, lease } from './test-support.js';

const SELF = incarnation('self');
const OTHER = incarnation('other');
const SKEW_MS = 10;
const TIMING = leaseTiming(SKEW_MS, 1_000, 200);

function input(overrides: Partial<LeaseActionInput>): LeaseActionInput {
  return {
    self: SELF,
    selfName: 'n1' as NodeName,
    isLeader: true,
    term: 4 as Term,
    appliedTerm: 4 as Term,
    lease: null,
    now: at(1_000),
    timing: TIMING,
    leaseProposalInFlight: false,
    ...overrides,
  };
}

describe('lease proposals by the leader', () => {
  it('no lease: the leader proposes a first lease from now, naming no lease', () => {
    const action = decideLeaseAction(input({}));
    assert.deepEqual(action, {
      kind: 'propose',
      change: 'first',
      lease: { holder: SELF, holderName: 'n1', start: at(1_000), expiration: at(2_000) },
      replaces: null,
    });
  });

  it('rule 3: only a leader that applied an entry of its own term proposes, and one proposal at a time', () => {
    assert.deepEqual(decideLeaseAction(input({ isLeader: false })), { kind: 'none', reason: 'not-leader' });
    assert.deepEqual(decideLeaseAction(input({ appliedTerm: 3 as Term })), {
      kind: 'none',
      reason: 'own-term-not-applied',
    });
    assert.deepEqual(decideLeaseAction(input({ leaseProposalInFlight: true })), {
      kind: 'none',
      reason: 'proposal-in-flight',
    });
  });

  it('its own lease is renewed (same token, higher expiration) only once less than the margin is left', () => {
    const own = lease(SELF, 1_000, 2_000);
    // Acting window ends at 2_000 − 20 = 1_980; renew from 1_780 on.
    assert.deepEqual(decideLeaseAction(input({ lease: own, now: at(1_779) })), { kind: 'none', reason: 'lease-fresh' });
    const action = decideLeaseAction(input({ lease: own, now: at(1_780) }));
    assert.ok(action.kind === 'propose' && action.change === 'renewal');
    assert.deepEqual(tokenOf(action.lease), tokenOf(own));
    assert.deepEqual(action.replaces, tokenOf(own));
    assert.equal(action.lease.expiration, at(2_780));
  });

  it('rule 5: a holder handing over stops renewing', () => {
    const own = lease(SELF, 1_000, 2_000);
    assert.deepEqual(decideLeaseAction(input({ lease: own, now: at(1_900), handingOver: true })), {
      kind: 'none',
      reason: 'handing-over',
    });
  });

  it("rule 5: someone else's lease is taken over from its expiration, never earlier", () => {
    const theirs = lease(OTHER, 500, 1_500);
    const action = decideLeaseAction(input({ lease: theirs, now: at(1_000) }));
    assert.ok(action.kind === 'propose' && action.change === 'takeover');
    assert.equal(action.lease.start, at(1_500));
    assert.equal(action.lease.expiration, at(2_500));
    assert.deepEqual(action.replaces, tokenOf(theirs));
    // A long-expired lease is replaced from now.
    const late = decideLeaseAction(input({ lease: theirs, now: at(9_000) }));
    assert.ok(late.kind === 'propose' && late.lease.start === at(9_000));
  });

  it('lease timing: a lease must outlast 2·maxClockSkew plus the renewal margin', () => {
    assert.throws(
      () => leaseTiming(500, 1_000, 1),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.throws(
      () => leaseTiming(10, 1_000, 0),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    const defaults = leaseTiming(LIMITS.maxClockSkewMsDefault);
    assert.equal(defaults.leaseDurationMs, LIMITS.leaseDurationMsDefault);
  });
});

describe('checkPrimary (rules 1 and 19)', () => {
  const L = lease(SELF, 100, 1_100);

  it('acting: a request without a token enlists under the current token; a matching token passes', () => {
    const enlist = checkPrimary(L, SELF, at(500), SKEW_MS);
    assert.ok(enlist.kind === 'ok');
    assert.deepEqual(enlist.token, tokenOf(L));
    assert.equal(checkPrimary(L, SELF, at(500), SKEW_MS, tokenOf(L)).kind, 'ok');
  });

  it('PRIMARY_MISS with the holder hint: other token, other holder, before start, in stasis, no lease', () => {
    const hint = { nodeName: L.holderName, nodeId: SELF.nodeId };
    assert.deepEqual(checkPrimary(L, SELF, at(500), SKEW_MS, tokenOf(lease(SELF, 50, 100))), {
      kind: 'PRIMARY_MISS',
      reason: 'token-mismatch',
      hint,
    });
    assert.deepEqual(checkPrimary(L, OTHER, at(500), SKEW_MS), { kind: 'PRIMARY_MISS', reason: 'not-holder', hint });
    assert.deepEqual(checkPrimary(L, SELF, at(99), SKEW_MS), {
      kind: 'PRIMARY_MISS',
      reason: 'not-started',
      hint,
      start: at(100),
    });
    assert.deepEqual(checkPrimary(L, SELF, at(1_080), SKEW_MS), { kind: 'PRIMARY_MISS', reason: 'ended', hint });
    assert.deepEqual(checkPrimary(null, SELF, at(500), SKEW_MS), {
      kind: 'PRIMARY_MISS',
      reason: 'no-lease',
      hint: null,
    });
  });
});

describe('rule 6: lease confirmation {token, commitTs}', () => {
  const L = lease(SELF, 100, 1_100);

  it('yes only while acting under that very token, with commitTs absorbed below now', () => {
    assert.deepEqual(confirmLease(L, SELF, at(600), SKEW_MS, tokenOf(L), at(599)), { confirmed: true, lease: L });
    assert.equal(confirmLease(L, SELF, at(1_085), SKEW_MS, tokenOf(L), at(1_084)).confirmed, false, 'stasis');
    const renewedElsewhere = tokenOf(lease(SELF, 1_100, 2_100));
    assert.equal(confirmLease(L, SELF, at(600), SKEW_MS, renewedElsewhere, at(599)).confirmed, false);
    assert.equal(confirmLease(L, OTHER, at(600), SKEW_MS, tokenOf(L), at(599)).confirmed, false);
    assert.equal(
      confirmLease(L, SELF, at(600), SKEW_MS, tokenOf(L), at(600)).confirmed,
      false,
      'commitTs not absorbed',
    );
  });
});

describe('rule 4: per-lease sequence numbers', () => {
  it('count up under one token (extensions included) and restart under a new token', () => {
    const seq = new DataSequence();
    const L = lease(SELF, 100, 1_100);
    assert.deepEqual([seq.next(tokenOf(L)), seq.next(tokenOf({ ...L, expiration: at(5_000) }))], [1, 2]);
    assert.equal(seq.next(tokenOf(lease(SELF, 1_100, 2_100))), 1);
  });
});

describe('idle SafeTimeSync', () => {
  const base = { isLeader: true, term: 2 as Term, appliedTerm: 2 as Term, lastAdvanceMs: 1_000, inFlight: 0 };

  it('the leader proposes one only when safe time has been idle for idleMs and nothing is in flight', () => {
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_099, idleMs: 100 }), false);
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_100, idleMs: 100 }), true);
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_100, idleMs: 100, inFlight: 1 }), false);
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_100, idleMs: 100, isLeader: false }), false);
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_100, idleMs: 100, appliedTerm: 1 as Term }), false);
    assert.equal(shouldProposeSafeTimeSync({ ...base, nowMs: 1_000 + LIMITS.safeTimeSyncIdleMsDefault }), true);
  });
});
