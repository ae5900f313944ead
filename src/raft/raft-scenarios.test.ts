/**
 * Scripted interaction tests for the tricky cases, on whole clusters of cores (SimCluster with no random faults:
 * messages are delivered by `stabilize()`, links are cut by hand). Every step also runs the cluster's invariant
 * checks (one leader per term, identical applied entries, leader completeness).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../sim/random.js';
import { SimCluster, type SimClusterOptions } from '../testing/raft-sim-cluster.js';

function cluster(size: number, options: Partial<SimClusterOptions> = {}): SimCluster {
  return new SimCluster({ size, random: new SeededRandom(`scenario/${size}`), ...options });
}

/**
 * Lets the leader leases of `names` run out: each ticks for a full election timeout and whatever it sends meanwhile is
 * lost, as if the leader had gone silent.
 */
function expireLeases(c: SimCluster, names: readonly string[]): void {
  for (const n of names) c.tick(n, 10);
  c.discardInFlight();
}

function electN1(c: SimCluster): void {
  c.campaign('n1');
  assert.equal(c.leader(), 'n1');
}

test('partitioned leader: it steps down by check-quorum, the majority elects anew, its uncommitted entry is dropped', () => {
  const c = cluster(3);
  electN1(c);
  c.propose('n1', 'before');
  c.stabilize();
  const term1 = c.raft('n1').status().term;
  c.isolate('n1');
  const stale = c.propose('n1', 'stale');
  assert.notEqual(stale, null, 'the isolated leader still accepts a proposal it cannot commit');
  c.stabilize();
  expireLeases(c, ['n3']);
  c.campaign('n2');
  assert.equal(c.raft('n2').status().role, 'leader');
  c.propose('n2', 'after');
  c.stabilize();
  // n1 has heard from nobody for a whole check-quorum period (at most two election timeouts): it steps down.
  c.tick('n1', 20);
  assert.equal(c.raft('n1').status().role, 'follower');
  c.heal();
  c.tickAll(3);
  assert.equal(c.leader(), 'n2');
  assert.ok(c.raft('n2').status().term > term1);
  for (const n of c.names) {
    assert.deepEqual(c.appliedKeys(n).filter(Boolean), ['before', 'after'], `${n} applied the stale entry`);
  }
  assert.ok(!c.acked.has('stale'));
});

test('stale leader with uncommitted entries: a newer leader overwrites them, and they are never acknowledged', () => {
  const c = cluster(5);
  electN1(c);
  c.stabilize();
  // n1 reaches only n2: its entries sit on two of five nodes, uncommitted.
  c.isolate('n1', ['n3', 'n4', 'n5']);
  for (let i = 0; i < 3; i++) c.propose('n1', `old${i}`);
  c.stabilize();
  assert.equal(c.raft('n2').status().lastIndex, 4);
  assert.equal(c.raft('n1').status().commit, 1);
  expireLeases(c, ['n2', 'n4', 'n5']);
  c.campaign('n3');
  assert.equal(c.raft('n3').status().role, 'leader');
  c.propose('n3', 'new');
  c.stabilize();
  c.heal();
  c.tickAll(3);
  for (const n of c.names) assert.deepEqual(c.appliedKeys(n).filter(Boolean), ['new']);
  assert.equal(c.acked.size, 1);
});

test('follower with a long conflicting suffix is repaired in few round trips thanks to the term hint', () => {
  const c = cluster(3);
  c.preload('n1', [1, 1, 2, 2, 2], 2, 2);
  c.preload('n2', [1, 1, 2, 2, 2], 2, 2);
  c.preload('n3', [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 1, 2);
  c.trace = [];
  electN1(c);
  c.stabilize();
  const rejects = c.trace.filter((m) => m.kind === 'AppendResp' && m.reject && m.from === 'n3');
  assert.ok(rejects.length <= 2, `${rejects.length} rejected appends`);
  const log = (n: string): string[] => c.appliedKeys(n) as string[];
  assert.equal(c.raft('n3').status().lastIndex, 6);
  assert.deepEqual(log('n3'), log('n1'));
  assert.deepEqual(log('n3').slice(0, 5), ['i1t1', 'i2t1', 'i3t2', 'i4t2', 'i5t2']);
});

test('figure 8: an entry of an earlier term replicated on a majority is not committed, and may indeed be overwritten', () => {
  const c = cluster(5, { raft: { appendEntriesMax: 1 } });
  c.preload('n1', [1, 2], 3, 1);
  c.preload('n2', [1, 2], 3, 1);
  c.preload('n3', [1], 3, 1);
  c.preload('n4', [1], 3, 1);
  c.preload('n5', [1, 3], 3, 1);
  // n1's noop (index 3) reaches only n2; n3 sees it once, rejects it for lacking index 2, then gets index 2 alone.
  const allowOnce = new Set(['n2', 'n3']);
  c.dropIf = (m) => m.kind === 'Append' && m.entries.some((e) => e.index === 3) && !allowOnce.delete(m.to);
  electN1(c);
  c.stabilize();
  assert.equal(c.raft('n3').status().lastIndex, 2, 'the term-2 entry reached n3: n1, n2, n3 hold it');
  assert.equal(c.raft('n2').status().lastIndex, 3);
  assert.equal(c.raft('n1').status().commit, 1, 'yet it is not committed');
  // n1 dies; n5 (last term 3) wins with n2, n3, n4 and overwrites index 2. Had n1 committed it, this would lose it.
  c.crash('n1');
  c.dropIf = null;
  expireLeases(c, ['n2', 'n3', 'n4']);
  c.campaign('n5');
  assert.equal(c.leader(), 'n5');
  c.restart('n1');
  c.tickAll(2);
  for (const n of c.names) assert.equal(c.appliedKeys(n)[1], 'i2t3', `${n} at index 2`);
});

test('snapshot install: a follower behind the compacted log receives a snapshot and catches up', () => {
  const c = cluster(3, { compactEvery: 5 });
  electN1(c);
  c.isolate('n3');
  for (let i = 0; i < 30; i++) {
    c.propose('n1', `v${i}`);
    c.stabilize();
  }
  assert.ok(c.raft('n1').status().snapshotIndex > 20, 'the leader compacted its log');
  c.heal();
  c.trace = [];
  c.tickAll(2);
  assert.ok(
    c.trace.some((m) => m.kind === 'Snapshot' && m.to === 'n3'),
    'n3 received a snapshot',
  );
  assert.deepEqual(c.appliedKeys('n3'), c.appliedKeys('n1'));
  // n3 keeps working from the snapshot: new entries reach it as ordinary appends.
  c.propose('n1', 'later');
  c.stabilize();
  assert.equal(c.appliedKeys('n3').at(-1), 'later');
  // And a restart of n3 from its disk (snapshot + suffix) recovers the same state.
  c.crash('n3');
  c.restart('n3');
  c.tickAll(2);
  assert.deepEqual(c.appliedKeys('n3'), c.appliedKeys('n1'));
});

test('leadership transfer under load: the transferee catches up, takes over, and no acknowledged entry is lost', () => {
  const c = cluster(3, { raft: { appendEntriesMax: 2 } });
  electN1(c);
  // n2 lags behind: it misses a burst of proposals.
  c.isolate('n2');
  for (let i = 0; i < 10; i++) c.propose('n1', `a${i}`);
  c.stabilize();
  c.heal();
  const termBefore = c.raft('n1').status().term;
  assert.equal(c.raft('n1').transferLeader(c.names[1]!), true);
  // Proposals during the transfer are refused, with the transferee as the hint.
  assert.equal(c.propose('n1', 'during'), null);
  assert.deepEqual(c.raft('n1').propose(new Uint8Array([1])), { status: 'NOT_LEADER', leader: 'n2' });
  c.stabilize();
  assert.equal(c.leader(), 'n2');
  assert.equal(c.raft('n2').status().term, termBefore + 1);
  c.propose('n2', 'b0');
  c.stabilize();
  for (const n of c.names) {
    assert.deepEqual(c.appliedKeys(n).filter(Boolean), [...Array.from({ length: 10 }, (_, i) => `a${i}`), 'b0']);
  }
});

test('a node back from a partition does not depose a healthy leader (pre-vote, leader stickiness)', () => {
  const c = cluster(3);
  electN1(c);
  c.isolate('n3');
  // n3 times out again and again; pre-vote keeps its term from rising.
  for (let i = 0; i < 5; i++) c.tick('n3', 30);
  assert.equal(c.raft('n3').status().term, c.raft('n1').status().term);
  c.heal();
  // Its next pre-campaign reaches followers that hear from n1: they ignore it.
  c.campaign('n3');
  c.tickAll(2);
  assert.equal(c.leader(), 'n1');
  assert.equal(c.raft('n3').status().leader, 'n1');
});

test('a full-cluster restart keeps every committed entry and the terms', () => {
  const c = cluster(3);
  electN1(c);
  for (let i = 0; i < 5; i++) c.propose('n1', `x${i}`);
  c.stabilize();
  const term = c.raft('n1').status().term;
  for (const n of c.names) c.crash(n);
  for (const n of c.names) c.restart(n);
  assert.ok(c.names.every((n) => c.raft(n).status().term === term));
  c.campaign('n2');
  c.stabilize();
  for (const n of c.names) {
    assert.deepEqual(c.appliedKeys(n).filter(Boolean), ['x0', 'x1', 'x2', 'x3', 'x4']);
  }
});
