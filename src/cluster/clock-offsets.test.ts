import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { nodeId, nodeName, term } from '../core/ids.js';
import { hybridTimestamp } from '../hlc/timestamp.js';
import type { Lease } from '../replica/partition/lease.js';
import { checkActing } from '../replica/partition/lease.js';
import { checkPrimary, decideLeaseAction, leaseTiming } from '../replica/partition/primary.js';
import { ClockOffsets } from './clock-offsets.js';
import { Membership } from './membership.js';

const a = nodeName('a');
const b = nodeName('b');
const c = nodeName('c');
const d = nodeName('d');

/** A round trip sent at local physical `sentMs` with `rttMs`, answered by a peer whose clock is `offsetMs` ahead. */
function sample(sentMs: number, rttMs: number, offsetMs: number, answerDelayMs = rttMs / 2) {
  return {
    sentPhysicalMs: sentMs,
    sentMonotonicMs: sentMs,
    remotePhysicalMs: sentMs + answerDelayMs + offsetMs,
    receivedMonotonicMs: sentMs + rttMs,
  };
}

describe('clock offsets from heartbeats', () => {
  it('estimates offset = remote − (sent + rtt/2) from the smallest round trip of the window', () => {
    const offsets = new ClockOffsets(4);
    offsets.record(a, sample(1000, 40, 300, 39)); // asymmetric delay: error up to rtt/2
    offsets.record(a, sample(1200, 2, 300));
    offsets.record(a, sample(1400, 30, 300, 1));
    assert.deepEqual(offsets.estimate(a), { offsetMs: 300, rttMs: 2 });
    offsets.record(a, sample(1600, -1, 5000));
    assert.equal(offsets.estimate(a)?.offsetMs, 300, 'a negative round trip is ignored');
  });

  it('forgets old samples once the window turns over (a clock step is seen)', () => {
    const offsets = new ClockOffsets(3);
    offsets.record(a, sample(0, 1, 1000));
    for (let i = 1; i <= 3; i++) offsets.record(a, sample(i * 200, 10, 0));
    assert.equal(offsets.estimate(a)?.offsetMs, 0);
  });

  it('is beyond only when a strict majority of the measured nodes, itself included, are beyond the bound', () => {
    const offsets = new ClockOffsets();
    // This node is 1000 ms behind b and c, right with d.
    offsets.record(b, sample(0, 2, 1000));
    offsets.record(c, sample(0, 2, -1000));
    assert.equal(offsets.verdict([b, c], 500).kind, 'beyond', '2 of 3 nodes disagree');
    offsets.record(d, sample(0, 2, 10));
    assert.equal(offsets.verdict([b, c, d], 500).kind, 'within', '2 of 4 is no majority');
    assert.equal(offsets.verdict([b], 500).kind, 'within', 'one peer alone cannot tell who is off');
    assert.equal(offsets.verdict([b, c], 1000).kind, 'within', 'exactly the bound is within');
    assert.deepEqual(offsets.verdict([a, b], 500), { kind: 'within', beyondPeers: 1, measuredPeers: 1 });
  });

  it('membership keeps samples of current ids only and drops a superseded peer', () => {
    let now = 0;
    const m = new Membership({ self: { name: a, id: nodeId('a1') }, nowMs: () => now, clockOffsetBoundMs: 500 });
    m.peerUp({ name: b, id: nodeId('b1') });
    m.peerUp({ name: c, id: nodeId('c1') });
    m.clockSample({ name: b, id: nodeId('b0') }, sample(0, 2, 900));
    assert.deepEqual(m.clockOffsetsMs(), {}, 'a stale id is not sampled');
    m.clockSample({ name: b, id: nodeId('b1') }, sample(0, 2, 900));
    m.clockSample({ name: c, id: nodeId('c1') }, sample(0, 2, 900));
    now = 1;
    assert.equal(m.clockWithinBound(), false);
    m.peerUp({ name: c, id: nodeId('c2') });
    now = 2;
    assert.deepEqual(m.clockOffsetsMs(), { b: 900 });
    assert.equal(m.clockWithinBound(), true, 'the superseded peer no longer counts');
  });
});

describe('rule 19: a replica whose clock is beyond the bound does not act', () => {
  const self = { nodeId: nodeId('n1'), incarnation: 'i1' };
  const lease: Lease = {
    holder: self,
    holderName: nodeName('n1'),
    start: hybridTimestamp(1000),
    expiration: hybridTimestamp(10_000),
  };
  const now = hybridTimestamp(2000);

  it('checkActing and checkPrimary answer clock-offset for the holder; others are unaffected', () => {
    assert.equal(checkActing(lease, self, now, 500, true).kind, 'acting');
    assert.equal(checkActing(lease, self, now, 500, false).kind, 'clock-offset');
    const other = { nodeId: nodeId('n2'), incarnation: 'i2' };
    assert.equal(checkActing(lease, other, now, 500, false).kind, 'not-holder');
    const check = checkPrimary(lease, self, now, 500, undefined, false);
    assert.equal(check.kind === 'PRIMARY_MISS' && check.reason, 'clock-offset');
  });

  it('the lease decision proposes nothing (no renewal, no first lease, no takeover)', () => {
    const base = {
      self,
      selfName: nodeName('n1'),
      isLeader: true,
      term: term(3),
      appliedTerm: term(3),
      now: hybridTimestamp(9000),
      timing: leaseTiming(500),
      leaseProposalInFlight: false,
    };
    assert.equal(decideLeaseAction({ ...base, lease }).kind, 'propose', 'renewal is due');
    assert.deepEqual(decideLeaseAction({ ...base, lease, clockWithinBound: false }), {
      kind: 'none',
      reason: 'clock-offset',
    });
    assert.equal(decideLeaseAction({ ...base, lease: null, clockWithinBound: false }).kind, 'none');
  });
});
