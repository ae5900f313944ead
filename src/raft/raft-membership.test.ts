/**
 * Configuration changes (learners, add, promote, remove; one at a time, effective when applied): scripted on a
 * simulated cluster of cores, and on single cores stepped by hand where the order of inputs matters.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { ErrorCode } from '../core/errors.js';
import { logIndex, type NodeName, nodeName, term } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { SeededRandom } from '../sim/random.js';
import { SimCluster } from '../testing/raft-sim-cluster.js';
import { type ConfChange, confState, encodeConfChange } from './conf-change.js';
import { Raft, type RaftConfig } from './raft.js';
import { makeEntry } from './raft-log.js';
import type { ConfChangeResult, Entry, Message, Ready } from './types.js';

const [n1, n2, n3, n4] = ['n1', 'n2', 'n3', 'n4'].map(nodeName) as [NodeName, NodeName, NodeName, NodeName];
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

function cluster(options: { compactEvery?: number; size?: number } = {}): SimCluster {
  const c = new SimCluster({
    size: options.size ?? 3,
    spares: 1,
    random: new SeededRandom('membership'),
    ...(options.compactEvery === undefined ? {} : { compactEvery: options.compactEvery }),
    raft: { electionTicks: 10, heartbeatTicks: 1 },
  });
  c.campaign(n1);
  assert.equal(c.leader(), n1);
  return c;
}

function ok(r: ConfChangeResult): number {
  assert.equal(r.status, 'OK', `refused: ${JSON.stringify(r)}`);
  return r.status === 'OK' ? r.index : 0;
}

function refused(r: ConfChangeResult, code: ErrorCode): void {
  assert.equal(r.status, 'REFUSED');
  if (r.status === 'REFUSED') assert.equal(r.error.code, code, r.error.message);
}

function change(c: SimCluster, leader: NodeName, type: ConfChange['type'], node: NodeName): void {
  ok(c.proposeConf(leader, { type, node }));
  c.stabilize();
}

function conf(c: SimCluster, n: NodeName): { voters: readonly string[]; learners: readonly string[] } {
  const s = c.raft(n).status();
  return { voters: s.voters, learners: s.learners };
}

describe('learners', () => {
  test('a learner added to the group catches up through the log, and its copy counts in no quorum', () => {
    const c = cluster();
    for (const k of ['a', 'b', 'c']) c.propose(n1, k);
    c.stabilize();
    change(c, n1, 'add-learner', n4);
    for (const n of [n1, n2, n3, n4]) assert.deepEqual(conf(c, n), { voters: [n1, n2, n3], learners: [n4] });
    assert.deepEqual(c.appliedKeys(n4), c.appliedKeys(n1));
    assert.equal(c.raft(n4).log.snapshotIndex(), 0, 'it caught up from the log, not from a snapshot');

    // The leader and the learner alone are no quorum of three voters.
    c.isolate(n1, [n2, n3]);
    const index = c.propose(n1, 'd')!;
    c.stabilize();
    assert.equal(c.raft(n1).progressOf(n4)?.match, index, 'the learner holds the entry');
    assert.ok(c.raft(n1).status().commit < index, 'yet it is not committed');
    c.heal();
    c.tickAll(2);
    assert.ok(c.raft(n1).status().commit >= index);
  });

  test('a learner added after the leader compacted its log catches up from a snapshot carrying the configuration', () => {
    const c = cluster({ compactEvery: 3 });
    for (const k of ['a', 'b', 'c', 'd', 'e']) c.propose(n1, k);
    c.stabilize();
    assert.ok(c.raft(n1).log.snapshotIndex() > 0);
    change(c, n1, 'add-learner', n4);
    c.tickAll(3);
    assert.ok(c.stats.snapshotsSent > 0);
    assert.ok(c.raft(n4).log.snapshotIndex() > 0, 'it caught up from a snapshot');
    assert.deepEqual(c.appliedKeys(n4), c.appliedKeys(n1));
    assert.deepEqual(conf(c, n4), { voters: [n1, n2, n3], learners: [n4] });
  });

  test('a learner never campaigns, and a candidate neither asks it for a vote nor waits for it', () => {
    const c = cluster();
    change(c, n1, 'add-learner', n4);
    c.isolate(n4);
    c.tick(n4, 200);
    assert.equal(c.raft(n4).status().role, 'follower');
    assert.equal(c.raft(n4).status().term, 1, 'a learner never bumps its term');
    c.heal();
    c.crash(n1);
    c.trace = [];
    for (let i = 0; i < 100 && c.leader() === null; i++) c.tickAll();
    const leader = c.leader();
    assert.ok(leader === n2 || leader === n3, `leader ${leader}`);
    assert.ok(c.trace.some((m) => m.kind === 'Vote'));
    const asked = c.trace.filter((m) => (m.kind === 'Vote' || m.kind === 'PreVote') && m.to === n4);
    assert.deepEqual(asked, []);
  });

  test("a learner's vote is not counted", () => {
    const r = new Raft({ ...base(n1), learners: [n4] });
    campaignUntil(r, 'precandidate');
    const t = r.status().term + 1;
    r.step({ kind: 'PreVoteResp', from: n4, to: n1, term: term(t), reject: false });
    assert.equal(r.status().role, 'precandidate');
    r.step({ kind: 'PreVoteResp', from: n2, to: n1, term: term(t), reject: false });
    r.step({ kind: 'VoteResp', from: n4, to: n1, term: term(t), reject: false });
    assert.equal(r.status().role, 'candidate');
    r.step({ kind: 'VoteResp', from: n3, to: n1, term: term(t), reject: false });
    assert.equal(r.status().role, 'leader');
  });
});

describe('voters', () => {
  test('a promoted learner counts in the quorum: four voters need three copies', () => {
    const c = cluster();
    change(c, n1, 'add-learner', n4);
    change(c, n1, 'promote', n4);
    for (const n of [n1, n2, n3, n4]) assert.deepEqual(conf(c, n), { voters: [n1, n2, n3, n4], learners: [] });
    c.isolate(n1, [n3, n4]);
    const blocked = c.propose(n1, 'x')!;
    c.stabilize();
    assert.ok(c.raft(n1).status().commit < blocked, 'two copies of four do not commit');
    c.heal();
    c.isolate(n1, [n3]);
    c.tickAll(2);
    assert.ok(c.raft(n1).status().commit >= blocked, 'three copies of four do');
  });

  test('a voter added at once counts in the quorum as soon as the change is applied', () => {
    const c = cluster();
    change(c, n1, 'add-voter', n4);
    assert.deepEqual(conf(c, n1), { voters: [n1, n2, n3, n4], learners: [] });
    assert.deepEqual(c.appliedKeys(n4), c.appliedKeys(n1));
  });

  test('removing a voter shrinks the quorum, the leader stops sending to it, and it never campaigns again', () => {
    const c = cluster();
    change(c, n1, 'remove', n3);
    assert.deepEqual(conf(c, n1), { voters: [n1, n2], learners: [] });
    assert.deepEqual(conf(c, n3), { voters: [n1, n2], learners: [] }, 'the removed node applied its removal');
    assert.equal(c.raft(n1).progressOf(n3), undefined);
    c.trace = [];
    const index = c.propose(n1, 'after')!;
    c.tickAll(3);
    assert.ok(c.raft(n1).status().commit >= index);
    assert.deepEqual(
      c.trace.filter((m) => m.to === n3),
      [],
    );
    const before = c.raft(n3).status().term;
    c.tick(n3, 200);
    assert.equal(c.raft(n3).status().role, 'follower');
    assert.equal(c.raft(n3).status().term, before);
    // Two voters: one copy besides the leader's is needed.
    c.isolate(n2);
    const blocked = c.propose(n1, 'blocked')!;
    c.stabilize();
    assert.ok(c.raft(n1).status().commit < blocked);
  });

  test('a leader that removes itself steps down once the change is applied, and the others elect a leader', () => {
    const c = cluster();
    const index = ok(c.proposeConf(n1, { type: 'remove', node: n1 }));
    c.stabilize();
    assert.equal(c.raft(n1).status().role, 'follower');
    assert.ok(c.raft(n1).status().applied >= index);
    assert.deepEqual(conf(c, n2), { voters: [n2, n3], learners: [] });
    for (let i = 0; i < 100 && c.leader() === null; i++) c.tickAll();
    const leader = c.leader();
    assert.ok(leader === n2 || leader === n3, `leader ${leader}`);
    const next = c.propose(leader, 'after')!;
    c.tickAll(3);
    assert.ok(c.raft(leader).status().commit >= next);
    c.tick(n1, 200);
    assert.notEqual(c.raft(n1).status().role, 'leader');
    assert.notEqual(c.leader(), n1);
  });
});

describe('one change at a time', () => {
  test('a second change is refused while the first is not applied on the leader', () => {
    const c = cluster();
    ok(c.proposeConf(n1, { type: 'add-learner', node: n4 }));
    refused(c.proposeConf(n1, { type: 'remove', node: n3 }), 'CONF_CHANGE_IN_FLIGHT');
    c.stabilize();
    ok(c.proposeConf(n1, { type: 'promote', node: n4 }));
  });

  test('a new leader refuses a change until it applied the noop of its term', () => {
    const r = new Raft({ ...base(n1), restore: restored([makeEntry(1, 1, 'data', bytes('x'))], 1) });
    campaignUntil(r, 'precandidate');
    const t = r.status().term + 1;
    r.step({ kind: 'PreVoteResp', from: n2, to: n1, term: term(t), reject: false });
    r.step({ kind: 'VoteResp', from: n2, to: n1, term: term(t), reject: false });
    assert.equal(r.status().role, 'leader');
    refused(r.proposeConfChange({ type: 'add-learner', node: n4 }), 'CONF_CHANGE_IN_FLIGHT');
    drain(r);
    r.step(appendAck(n2, n1, t, 2));
    drain(r);
    assert.equal(r.status().applied, 2);
    ok(r.proposeConfChange({ type: 'add-learner', node: n4 }));
  });

  test('a change that does not apply is refused with a coded error, and a follower answers NOT_LEADER', () => {
    const c = cluster();
    refused(c.proposeConf(n1, { type: 'add-learner', node: n2 }), 'ALREADY_EXISTS');
    refused(c.proposeConf(n1, { type: 'add-voter', node: n3 }), 'ALREADY_EXISTS');
    refused(c.proposeConf(n1, { type: 'promote', node: n2 }), 'ALREADY_EXISTS');
    refused(c.proposeConf(n1, { type: 'promote', node: n4 }), 'NOT_FOUND');
    refused(c.proposeConf(n1, { type: 'remove', node: nodeName('n9') }), 'NOT_FOUND');
    assert.deepEqual(c.proposeConf(n2, { type: 'add-learner', node: n4 }), { status: 'NOT_LEADER', leader: n1 });
    const single = new Raft({ ...base(n1), voters: [n1] });
    for (let i = 0; i < 30 && single.status().role !== 'leader'; i++) single.tick();
    drain(single);
    refused(single.proposeConfChange({ type: 'remove', node: n1 }), 'INVALID_ARGUMENT');
  });

  test('a change that would take the group past raftMembersMax members is refused', () => {
    const voters = Array.from({ length: LIMITS.raftMembersMax }, (_, i) => nodeName(`v${i + 1}`));
    const r = new Raft({ ...base(voters[0]!), voters });
    assert.equal(r.status().voters.length, LIMITS.raftMembersMax);
    // A single-voter view is enough to lead: the others are stepped by hand.
    for (let i = 0; i < 30 && r.status().role === 'follower'; i++) r.tick();
    const t = r.status().term + 1;
    for (const v of voters.slice(1)) r.step({ kind: 'PreVoteResp', from: v, to: r.self, term: term(t), reject: false });
    for (const v of voters.slice(1)) r.step({ kind: 'VoteResp', from: v, to: r.self, term: term(t), reject: false });
    assert.equal(r.status().role, 'leader');
    drain(r);
    for (const v of voters.slice(1)) r.step(appendAck(v, r.self, t, 1));
    drain(r);
    assert.equal(r.status().applied, 1);
    refused(r.proposeConfChange({ type: 'add-learner', node: nodeName('extra') }), 'INVALID_ARGUMENT');
    ok(r.proposeConfChange({ type: 'remove', node: voters[1]! }));
  });

  test('a change overwritten by a new leader before it committed never takes effect', () => {
    const c = cluster();
    c.isolate(n1);
    ok(c.proposeConf(n1, { type: 'add-learner', node: n4 }));
    c.stabilize();
    assert.deepEqual(conf(c, n1).learners, [], 'an unapplied change has no effect, even on its leader');
    for (let i = 0; i < 100 && c.leader() === n1; i++) c.tickAll();
    assert.notEqual(c.leader(), n1);
    c.heal();
    c.tickAll(3);
    assert.equal(c.raft(n1).status().role, 'follower');
    for (const n of [n1, n2, n3]) assert.deepEqual(conf(c, n), { voters: [n1, n2, n3], learners: [] });
    assert.ok(!c.appliedKeys(n1).some((k) => k.includes('add-learner')));
  });

  test('a node does not campaign while a committed change is not applied on it', () => {
    const r = new Raft(base(n2));
    const entries = [makeEntry(1, 1, 'noop', bytes('')), confEntry(2, 1, { type: 'add-learner', node: n4 })];
    r.step(appendFrom(n1, n2, 1, 0, 0, entries, 2));
    const rd = r.ready();
    assert.equal(rd.committedEntries.length, 2);
    // The Ready is being handled: the change is committed but not applied yet.
    for (let i = 0; i < 100; i++) r.tick();
    assert.equal(r.status().role, 'follower');
    r.advance(rd);
    assert.deepEqual(r.status().learners, [n4]);
    for (let i = 0; i < 100 && r.status().role === 'follower'; i++) r.tick();
    assert.equal(r.status().role, 'precandidate', 'once applied, it campaigns again');
  });
});

describe('restart', () => {
  test('a restarted node restores its configuration from its log', () => {
    const c = cluster();
    change(c, n1, 'add-learner', n4);
    change(c, n1, 'promote', n4);
    change(c, n1, 'remove', n3);
    assert.ok(c.disks.get(n2)!.snapshot === null);
    c.crash(n2);
    c.restart(n2);
    // This state machine keeps nothing across a crash: the node re-applies its committed log, changes included.
    c.stabilize();
    assert.deepEqual(conf(c, n2), { voters: [n1, n2, n4], learners: [] });
  });

  test('a core restored with changes at or below its applied index starts in the configuration they imply', () => {
    const entries = [
      makeEntry(1, 1, 'noop', bytes('')),
      confEntry(2, 1, { type: 'add-learner', node: n4 }),
      confEntry(3, 1, { type: 'promote', node: n4 }),
      confEntry(4, 1, { type: 'remove', node: n1 }),
    ];
    const r = new Raft({ ...base(n2), restore: { hardState: hs(1, 4), snapshot: null, entries, applied: 4 } });
    assert.deepEqual([r.status().voters, r.status().learners], [[n2, n3, n4], []]);
  });

  test('a restarted node restores its configuration from its snapshot', () => {
    const c = cluster({ compactEvery: 2 });
    change(c, n1, 'add-learner', n4);
    for (const k of ['a', 'b', 'c']) c.propose(n1, k);
    c.stabilize();
    const disk = c.disks.get(n2)!;
    assert.deepEqual(disk.snapshot?.conf, confState([n1, n2, n3], [n4]));
    assert.ok(!disk.entries.some((e) => e.kind === 'conf'), 'the change is only in the snapshot');
    c.crash(n2);
    c.restart(n2);
    assert.deepEqual(conf(c, n2), { voters: [n1, n2, n3], learners: [n4] });
  });

  test('committed changes not yet applied take effect as the restarted node applies them', () => {
    const entries = [makeEntry(1, 1, 'noop', bytes('')), confEntry(2, 1, { type: 'add-learner', node: n4 })];
    const r = new Raft({ ...base(n2), restore: { ...restored(entries, 1), hardState: hs(1, 2) } });
    assert.deepEqual(r.status().learners, [], 'applied 0: the change is not in effect yet');
    drain(r);
    assert.deepEqual(r.status().learners, [n4]);
  });

  test('a snapshot stored without a configuration stands for the initial one', () => {
    const snapshot = { index: logIndex(5), term: term(1), data: bytes('state') };
    const r = new Raft({
      ...base(n2),
      restore: { hardState: hs(1, 5), snapshot, entries: [confEntry(6, 1, { type: 'remove', node: n3 })], applied: 6 },
    });
    assert.deepEqual(r.status().voters, [n1, n2]);
    assert.deepEqual(r.log.snapshot().conf, confState([n1, n2, n3]));
  });
});

// ---------------------------------------------------------------- single cores

function base(self: NodeName): RaftConfig {
  return { self, voters: [n1, n2, n3], random: new SeededRandom(`m/${self}`), electionTicks: 10 };
}

function hs(
  t: number,
  commit: number,
): { term: ReturnType<typeof term>; vote: null; commit: ReturnType<typeof logIndex> } {
  return { term: term(t), vote: null, commit: logIndex(commit) };
}

function restored(entries: readonly Entry[], t: number): NonNullable<RaftConfig['restore']> {
  return { hardState: hs(t, 0), snapshot: null, entries, applied: 0 };
}

function confEntry(index: number, t: number, c: ConfChange): Entry {
  return makeEntry(index, t, 'conf', encodeConfChange(c));
}

function campaignUntil(r: Raft, role: 'precandidate'): void {
  for (let i = 0; i < 30 && r.status().role === 'follower'; i++) r.tick();
  assert.equal(r.status().role, role);
}

function drain(r: Raft): Message[] {
  const out: Ready[] = [];
  while (r.hasReady()) {
    const rd = r.ready();
    out.push(rd);
    r.advance(rd);
  }
  return out.flatMap((rd) => [...rd.leaderMessages, ...rd.messages]);
}

function appendAck(from: NodeName, to: NodeName, t: number, index: number): Message {
  return {
    kind: 'AppendResp',
    from,
    to,
    term: term(t),
    reject: false,
    index: logIndex(index),
    hintIndex: logIndex(0),
    hintTerm: term(0),
  };
}

function appendFrom(
  from: NodeName,
  to: NodeName,
  t: number,
  prevIndex: number,
  prevTerm: number,
  entries: readonly Entry[],
  commit: number,
): Message {
  return {
    kind: 'Append',
    from,
    to,
    term: term(t),
    prevIndex: logIndex(prevIndex),
    prevTerm: term(prevTerm),
    entries,
    commit: logIndex(commit),
  };
}
