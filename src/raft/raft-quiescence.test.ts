/**
 * Quiescence (raft.ts header), scripted on whole clusters of cores (SimCluster with quiescence: a leader with nothing
 * pending tries to go quiet at each tick, a quiet follower wakes once node liveness says its leader is gone). Every
 * step also runs the cluster's invariant checks.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SeededRandom } from '../sim/random.js';
import { SimCluster } from '../testing/raft-sim-cluster.js';
import type { Message } from './types.js';

function quietCluster(size = 3): SimCluster {
  const c = new SimCluster({ size, random: new SeededRandom(`quiescence/${size}`), quiescence: true });
  c.campaign('n1');
  assert.equal(c.leader(), 'n1');
  c.propose('n1', 'a');
  c.stabilize();
  return c;
}

function quiet(c: SimCluster): string[] {
  return c.names.filter((n) => c.raft(n).isQuiet);
}

/** Ticks every node `count` times, delivering everything after each round, and returns what was delivered. */
function tickTraced(c: SimCluster, count: number): Message[] {
  c.trace = [];
  c.tickAll(count);
  const seen = c.trace;
  c.trace = null;
  return seen;
}

test('an idle leader whose followers hold its whole log goes quiet, and so do they; then nobody sends anything', () => {
  const c = quietCluster();
  const sent = tickTraced(c, 1);
  assert.deepEqual(
    sent.map((m) => `${m.kind}${m.kind === 'Heartbeat' && m.quiesce === true ? '/quiesce' : ''}>${m.to}`).sort(),
    ['Heartbeat/quiesce>n2', 'Heartbeat/quiesce>n3'],
  );
  assert.deepEqual(quiet(c), ['n1', 'n2', 'n3']);
  assert.deepEqual(tickTraced(c, 50), [], 'a quiet group sends no heartbeat and answers none');
});

test('a quiet group elects nobody while the leader lives, however long it stays quiet', () => {
  const c = quietCluster();
  c.tickAll(1);
  const term = c.raft('n1').status().term;
  c.tickAll(500);
  assert.equal(c.leader(), 'n1');
  for (const n of c.names) assert.equal(c.raft(n).status().term, term, `${n} moved to another term`);
  assert.deepEqual(quiet(c), ['n1', 'n2', 'n3']);
});

test('a proposal wakes the quiet group: it commits everywhere, then the group goes quiet again', () => {
  const c = quietCluster();
  c.tickAll(1);
  const index = c.propose('n1', 'b');
  assert.notEqual(index, null);
  assert.equal(c.raft('n1').isQuiet, false, 'the proposal woke the leader');
  c.stabilize();
  assert.deepEqual(quiet(c), [], 'the Append woke both followers');
  for (const n of c.names) assert.deepEqual(c.appliedKeys(n).filter(Boolean), ['a', 'b']);
  c.tickAll(1);
  assert.deepEqual(quiet(c), ['n1', 'n2', 'n3']);
});

test("a quiet follower campaigns once its leader's node is gone, and the survivors elect a leader", () => {
  const c = quietCluster();
  c.tickAll(1);
  const term = c.raft('n1').status().term;
  c.crash('n1');
  c.tickAll(60);
  const leader = c.leader();
  assert.ok(leader === 'n2' || leader === 'n3', `leader ${leader}`);
  assert.ok(c.raft(leader!).status().term > term);
  assert.ok(c.stats.leaderGoneWakes >= 2, 'both followers woke for the gone leader');
  c.propose(leader!, 'after');
  c.stabilize();
  for (const n of ['n2', 'n3']) assert.deepEqual(c.appliedKeys(n).filter(Boolean), ['a', 'after']);
});

test('a leader cut off from its quiet followers loses them: they elect anew, and it wakes and steps down by itself', () => {
  const c = quietCluster();
  c.tickAll(1);
  c.isolate('n1');
  c.tickAll(60);
  const leader = c.leader();
  assert.ok(leader === 'n2' || leader === 'n3', `leader ${leader}`);
  // n1 saw its live voters drop below a majority: it woke, and check-quorum deposed it without any proposal.
  assert.ok(c.stats.quorumGoneWakes >= 1, 'the cut-off leader woke');
  assert.notEqual(c.raft('n1').status().role, 'leader', 'check-quorum deposed the woken leader');
  c.propose('n1', 'stale');
  c.heal();
  c.tickAll(5);
  assert.ok(!c.acked.has('stale'));
});

test('a leader does not go quiet without a live majority, and goes quiet once it has one', () => {
  const c = new SimCluster({ size: 3, random: new SeededRandom('quiescence/quorum'), quiescence: true });
  c.campaign('n1');
  c.propose('n1', 'a');
  c.stabilize();
  c.crash('n2');
  c.crash('n3');
  c.tick('n1', 3);
  assert.ok(!c.raft('n1').isQuiet, 'no quiescence while both followers are down');
  c.restart('n2');
  c.tickAll(10);
  assert.equal(c.leader(), 'n1');
  assert.ok(c.raft('n1').isQuiet, 'with n2 back (a majority live) the leader goes quiet');
});

test('a follower that missed the quiesce Heartbeat keeps ticking; its pre-vote wakes the group, which keeps its leader', () => {
  const c = quietCluster();
  c.dropIf = (m) => m.kind === 'Heartbeat' && m.quiesce === true && m.to === 'n3';
  c.tickAll(1);
  c.dropIf = null;
  assert.deepEqual(quiet(c), ['n1', 'n2']);
  const term = c.raft('n1').status().term;
  // n3 hears nothing and pre-campaigns; nobody grants it (n1 leads, n2 follows it), and the group wakes.
  c.tickAll(40);
  assert.equal(c.leader(), 'n1');
  for (const n of c.names) assert.equal(c.raft(n).status().term, term);
  assert.deepEqual(quiet(c), ['n1', 'n2', 'n3'], 'the woken leader quiesced again, this time with n3 too');
});

test('a leader does not go quiet while a follower lags behind its log', () => {
  const c = quietCluster();
  c.isolate('n1', ['n3']);
  c.propose('n1', 'b');
  c.stabilize();
  assert.equal(c.raft('n1').quiesce(), false);
  assert.equal(c.raft('n1').isQuiet, false);
  c.heal();
  c.tickAll(3);
  assert.deepEqual(c.appliedKeys('n3').filter(Boolean), ['a', 'b']);
  assert.deepEqual(quiet(c), ['n1', 'n2', 'n3']);
});

test("a follower's poke wakes the quiet leader; a plain HeartbeatResp does not", () => {
  const c = quietCluster();
  c.tickAll(1);
  const n1 = c.raft('n1');
  const term = n1.status().term;
  n1.step({ kind: 'HeartbeatResp', from: 'n2', to: 'n1', term } as Message);
  assert.equal(n1.isQuiet, true);
  assert.equal(c.raft('n2').pokeLeader(), true);
  assert.equal(c.raft('n2').isQuiet, false);
  c.stabilize();
  assert.equal(n1.isQuiet, false, 'the wake HeartbeatResp woke the leader');
  assert.equal(c.raft('n1').pokeLeader(), false, 'a leader has nobody to poke');
});
