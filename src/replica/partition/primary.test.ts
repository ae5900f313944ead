/**
 * The lease-holder decisions: when the leader proposes a lease (rule 3: only after applying an entry of its own
 * term), renewals and takeovers (rule 5), checkPrimary (rules 1, 19), lease confirmation (rule 6), per-lease
 * sequence numbers (rule 4), idle SafeTimeSync, the timing limits, and the whole upkeep decision as one table (lease
 * proposals, idle safe time, rule 19's leadership hand-off, gained primacy, and rule 5's hand-over timing on a drain).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { NodeName, Term } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { at, incarnation, lease } from '../../testing/replica-support.js';
import { tokenOf } from './lease.js';
import {
  checkPrimary,
  confirmLease,
  DataSequence,
  decideLeaseAction,
  decideUpkeep,
  HAND_OVER_MARGIN_MS,
  type LeaseActionInput,
  leaseTiming,
  shouldProposeSafeTimeSync,
  type UpkeepDecision,
  type UpkeepInput,
} from './primary.js';

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

  it('a planned hand-off pauses renewals only: the first lease and a takeover are still proposed', () => {
    const own = lease(SELF, 1_000, 2_000);
    assert.deepEqual(decideLeaseAction(input({ lease: own, now: at(1_900), renewalsPaused: true })), {
      kind: 'none',
      reason: 'renewals-paused',
    });
    assert.equal(decideLeaseAction(input({ lease: null, renewalsPaused: true })).kind, 'propose');
    const theirs = lease(OTHER, 500, 1_500);
    assert.equal(decideLeaseAction(input({ lease: theirs, now: at(1_000), renewalsPaused: true })).kind, 'propose');
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

describe('decideUpkeep: one table of what a replica does on an upkeep occasion', () => {
  const N2 = 'n2' as NodeName;
  const own = lease(SELF, 1_000, 2_000); // acts in [1_000, 1_980); renews from 1_780
  const theirs = lease(OTHER, 1_000, 2_000);
  const leader = { isLeader: true, term: 4 as Term };
  const follower = { isLeader: false, term: 4 as Term };

  function upkeep(overrides: Partial<UpkeepInput>): UpkeepInput {
    return {
      occasion: { kind: 'tick' },
      self: SELF,
      selfName: 'n1' as NodeName,
      timing: TIMING,
      raft: leader,
      appliedTerm: 4 as Term,
      lease: own,
      now: at(1_500),
      leaseProposalInFlight: false,
      handingOver: false,
      clockWithinBound: true,
      stopped: false,
      lastSafeTimeAdvanceMs: 1_000,
      nowMs: 1_010,
      proposalsInFlight: 0,
      safeTimeSyncIdleMs: 50,
      successor: N2,
      wasActing: true,
      ...overrides,
    };
  }

  /** The decision in short: action kinds (with their detail), then the flags. */
  function brief(d: UpkeepDecision): string {
    const actions = d.actions.map((a) => {
      switch (a.kind) {
        case 'propose-lease':
          return `lease:${a.proposal.change}`;
        case 'transfer-leadership':
          return `transfer:${a.to}:${a.why}`;
        default:
          return a.kind;
      }
    });
    const why = d.lease.kind === 'none' ? d.lease.reason : 'propose';
    return `[${actions.join(' ')}] lease=${why} acting=${d.acting} handedOver=${d.handedOver}`;
  }

  const idle = { nowMs: 1_100 };
  const table: [string, Partial<UpkeepInput>, string][] = [
    // ticks: lease proposals (rule 3), idle safe time, rule 19 hand-off, gained primacy
    [
      'no Raft group here: nothing, acting unchanged',
      { raft: undefined },
      '[] lease=no-raft-group acting=true handedOver=false',
    ],
    [
      'follower without a lease',
      { raft: follower, lease: null, wasActing: false, ...idle },
      '[] lease=not-leader acting=false handedOver=false',
    ],
    [
      'leader before applying its own term: no lease, no sync',
      { lease: null, appliedTerm: 3 as Term, wasActing: false, ...idle },
      '[] lease=own-term-not-applied acting=false handedOver=false',
    ],
    [
      'leader without a lease: a first lease, and no sync beside it',
      { lease: null, wasActing: false, ...idle },
      '[lease:first] lease=propose acting=false handedOver=false',
    ],
    [
      'leader with its lease proposal in flight',
      { lease: null, leaseProposalInFlight: true, proposalsInFlight: 1, wasActing: false, ...idle },
      '[] lease=proposal-in-flight acting=false handedOver=false',
    ],
    ['holder with a fresh lease, acting since the last tick', {}, '[] lease=lease-fresh acting=true handedOver=false'],
    [
      'holder that just gained primacy re-runs the cleanups it owes',
      { wasActing: false },
      '[recover-cleanups] lease=lease-fresh acting=true handedOver=false',
    ],
    [
      'holder near the end of its window renews',
      { now: at(1_780) },
      '[lease:renewal] lease=propose acting=true handedOver=false',
    ],
    [
      'holder handing over does not renew (rule 5)',
      { now: at(1_900), handingOver: true },
      '[] lease=handing-over acting=true handedOver=false',
    ],
    [
      "leader under another's lease takes it over",
      { lease: theirs, wasActing: false },
      '[lease:takeover] lease=propose acting=false handedOver=false',
    ],
    [
      'idle leader proposes a SafeTimeSync',
      idle,
      '[propose-safe-time-sync] lease=lease-fresh acting=true handedOver=false',
    ],
    [
      'no SafeTimeSync while a proposal is in flight',
      { ...idle, proposalsInFlight: 1 },
      '[] lease=lease-fresh acting=true handedOver=false',
    ],
    ['no SafeTimeSync before idleMs', { nowMs: 1_049 }, '[] lease=lease-fresh acting=true handedOver=false'],
    [
      'follower proposes no SafeTimeSync',
      { raft: follower, lease: theirs, wasActing: false, ...idle },
      '[] lease=not-leader acting=false handedOver=false',
    ],
    [
      'rule 19: leader beyond the clock bound proposes nothing, stops acting and hands the group over',
      { clockWithinBound: false },
      '[transfer:n2:clock-offset] lease=clock-offset acting=false handedOver=false',
    ],
    [
      'rule 19 without a live successor: nothing to hand to',
      { clockWithinBound: false, successor: undefined },
      '[] lease=clock-offset acting=false handedOver=false',
    ],
    [
      'rule 19 on a follower: it has no leadership to hand over',
      { raft: follower, clockWithinBound: false },
      '[] lease=not-leader acting=false handedOver=false',
    ],
    [
      'stopped replica proposes nothing',
      { stopped: true, lease: null, wasActing: false, ...idle },
      '[] lease=stopped acting=false handedOver=false',
    ],
    [
      'follower still acting under its lease gains primacy too',
      { raft: follower, wasActing: false },
      '[recover-cleanups] lease=not-leader acting=true handedOver=false',
    ],
    [
      'own lease not started yet: not acting',
      { lease: lease(SELF, 1_600, 2_600), wasActing: false },
      '[] lease=lease-fresh acting=false handedOver=false',
    ],
    [
      'own lease in stasis: not acting',
      { now: at(1_985), handingOver: true },
      '[] lease=handing-over acting=false handedOver=false',
    ],
    // drain polls: rule 5's hand-over timing, bounded by the drain
    [
      'drain: no Raft group here, nothing to hand over',
      { occasion: { kind: 'drain', remainingMs: 1_000 }, raft: undefined },
      '[] lease=drain-poll acting=true handedOver=true',
    ],
    [
      'drain: no live successor, nothing to hand over',
      { occasion: { kind: 'drain', remainingMs: 1_000 }, successor: undefined },
      '[] lease=drain-poll acting=true handedOver=true',
    ],
    [
      'drain: follower still holding its unexpired lease waits',
      { occasion: { kind: 'drain', remainingMs: 1_000 }, raft: follower, now: at(1_990) },
      '[] lease=drain-poll acting=true handedOver=false',
    ],
    [
      'drain: follower once its lease expired is done',
      { occasion: { kind: 'drain', remainingMs: 1_000 }, raft: follower, now: at(2_000) },
      '[] lease=drain-poll acting=true handedOver=true',
    ],
    [
      "drain: follower under another's lease is done",
      { occasion: { kind: 'drain', remainingMs: 1_000 }, raft: follower, lease: theirs },
      '[] lease=drain-poll acting=true handedOver=true',
    ],
    [
      'drain: leader keeps serving while its window ends within the bound',
      { occasion: { kind: 'drain', remainingMs: 480 + HAND_OVER_MARGIN_MS } },
      '[] lease=drain-poll acting=true handedOver=false',
    ],
    [
      'drain: leader hands over now when its window would outlast the bound',
      { occasion: { kind: 'drain', remainingMs: 479 + HAND_OVER_MARGIN_MS } },
      '[transfer:n2:hand-over] lease=drain-poll acting=true handedOver=false',
    ],
    [
      'drain: leader in stasis hands over',
      { occasion: { kind: 'drain', remainingMs: 5_000 }, now: at(1_980) },
      '[transfer:n2:hand-over] lease=drain-poll acting=true handedOver=false',
    ],
    [
      "drain: leader under another's lease hands over",
      { occasion: { kind: 'drain', remainingMs: 5_000 }, lease: theirs },
      '[transfer:n2:hand-over] lease=drain-poll acting=true handedOver=false',
    ],
  ];

  for (const [name, overrides, expected] of table) {
    it(name, () => assert.equal(brief(decideUpkeep(upkeep(overrides))), expected));
  }

  it('the proposals carry what decideLeaseAction decided', () => {
    const decision = decideUpkeep(upkeep({ lease: null }));
    const [first] = decision.actions;
    assert.ok(first?.kind === 'propose-lease');
    assert.deepEqual(first.proposal, decision.lease);
    assert.deepEqual(first.proposal.lease, { holder: SELF, holderName: 'n1', start: at(1_500), expiration: at(2_500) });
  });

  it('several actions come in the order the host performs them: proposals, then leadership, then cleanups', () => {
    const cases: [Partial<UpkeepInput>, string][] = [
      // Rule 19 stops lease proposals, not idle safe time.
      [{ clockWithinBound: false, ...idle }, '[propose-safe-time-sync transfer:n2:clock-offset]'],
      [{ now: at(1_780), wasActing: false }, '[lease:renewal recover-cleanups]'],
      [{ wasActing: false, ...idle }, '[propose-safe-time-sync recover-cleanups]'],
    ];
    for (const [overrides, actions] of cases) {
      assert.ok(brief(decideUpkeep(upkeep(overrides))).startsWith(`${actions} `), actions);
    }
  });
});
