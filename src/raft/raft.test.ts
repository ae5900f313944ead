/**
 * Tests pinning rules of the Raft paper (§5) and of the extensions (pre-vote, check-quorum, transfer), on single
 * cores stepped by hand.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { logIndex, type NodeName, nodeName, term } from '../core/ids.js';
import { SeededRandom } from '../sim/random.js';
import { Raft, type RaftConfig, type RaftRestore } from './raft.js';
import { makeEntry } from './raft-log.js';
import type { Entry, Message, Ready } from './types.js';

const n1 = nodeName('n1');
const n2 = nodeName('n2');
const n3 = nodeName('n3');
const voters = [n1, n2, n3];
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

function node(self: NodeName, extra: Partial<RaftConfig> = {}): Raft {
  return new Raft({ self, voters, random: new SeededRandom(`t/${self}`), electionTicks: 10, ...extra });
}

/** Persists nothing, just acknowledges: returns the Ready's messages. */
function drain(r: Raft): { ready: Ready[]; messages: Message[] } {
  const ready: Ready[] = [];
  while (r.hasReady()) {
    const rd = r.ready();
    ready.push(rd);
    r.advance(rd);
  }
  return { ready, messages: ready.flatMap((rd) => [...rd.leaderMessages, ...rd.messages]) };
}

/** Makes `r` a leader of a 3-node group by electing it with n2's help (pre-vote, then vote). */
function electLeader(r: Raft): void {
  for (let i = 0; i < 20 && r.status().role === 'follower'; i++) r.tick();
  assert.equal(r.status().role, 'precandidate');
  const t = r.status().term + 1;
  r.step({ kind: 'PreVoteResp', from: n2, to: r.self, term: term(t), reject: false });
  assert.equal(r.status().role, 'candidate');
  r.step({ kind: 'VoteResp', from: n2, to: r.self, term: term(t), reject: false });
  assert.equal(r.status().role, 'leader');
}

/** A vote request; `transfer` marks one of a leadership transfer. */
function voteRequest(
  from: NodeName,
  to: NodeName,
  t: number,
  lastIndex: number,
  lastTerm: number,
  transfer = false,
): Message {
  return { kind: 'Vote', from, to, term: term(t), lastIndex: logIndex(lastIndex), lastTerm: term(lastTerm), transfer };
}

/** An Append from the leader `from` of term `t`. */
function append(
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

/** A follower's acknowledgement that it holds the log up to `index` durably. */
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

/** n1 elected leader with n2's help, and n2's acknowledgement of the leader's noop: n2's progress replicates. */
function leaderWithN2Replicating(extra: Partial<RaftConfig> = {}): Raft {
  const r = node(n1, extra);
  electLeader(r);
  drain(r);
  r.step(appendAck(n2, n1, 1, 1));
  drain(r);
  return r;
}

function restoreWith(entryTerms: readonly number[], currentTerm: number, vote: NodeName | null = null): RaftRestore {
  return {
    hardState: { term: term(currentTerm), vote, commit: logIndex(0) },
    snapshot: null,
    entries: entryTerms.map((t, i) => makeEntry(i + 1, t, 'data', bytes(`i${i + 1}t${t}`))),
    applied: 0,
  };
}

describe('raft paper §5.2: leader election', () => {
  test('a follower grants at most one vote per term (election safety)', () => {
    const r = node(n1);
    r.step(voteRequest(n2, n1, 2, 0, 0));
    r.step(voteRequest(n3, n1, 2, 0, 0));
    const resps = drain(r).messages.filter((m) => m.kind === 'VoteResp');
    assert.deepEqual(
      resps.map((m) => [m.to, m.kind === 'VoteResp' && m.reject]),
      [
        [n2, false],
        [n3, true],
      ],
    );
  });

  test('a vote is in the same Ready as the hard state recording it, so it is durable before it is sent', () => {
    const r = node(n1);
    r.step(voteRequest(n2, n1, 3, 0, 0));
    const rd = r.ready();
    assert.deepEqual(rd.hardState, { term: 3, vote: n2, commit: 0 });
    assert.ok(rd.messages.some((m) => m.kind === 'VoteResp' && !m.reject));
  });

  test('the vote survives a restart: the restarted node refuses another candidate in the same term', () => {
    const before = node(n1);
    before.step(voteRequest(n2, n1, 3, 0, 0));
    const hs = before.ready().hardState;
    assert.ok(hs !== null);
    const after = node(n1, { restore: { hardState: hs, snapshot: null, entries: [], applied: 0 } });
    after.step(voteRequest(n3, n1, 3, 0, 0));
    const resp = drain(after).messages.find((m) => m.kind === 'VoteResp');
    assert.ok(resp?.kind === 'VoteResp' && resp.reject);
    assert.equal(after.status().vote, n2);
  });

  test('a voter refuses a candidate whose log is less up to date (leader completeness, §5.4.1)', () => {
    const r = node(n1, { restore: restoreWith([1, 2], 2) });
    // Same last term, shorter log.
    r.step(voteRequest(n2, n1, 3, 1, 2));
    // Longer log but older last term.
    r.step(voteRequest(n3, n1, 4, 9, 1));
    const rejects = drain(r).messages.filter((m) => m.kind === 'VoteResp' && m.reject);
    assert.equal(rejects.length, 2);
    assert.equal(r.status().vote, null);
  });

  test('an election timeout is randomized in [electionTicks, 2·electionTicks)', () => {
    const elapsed: number[] = [];
    for (let i = 0; i < 30; i++) {
      const r = new Raft({ self: n1, voters, random: new SeededRandom(i), electionTicks: 10 });
      let ticks = 0;
      while (r.status().role === 'follower') {
        r.tick();
        ticks++;
      }
      elapsed.push(ticks);
    }
    assert.ok(elapsed.every((t) => t >= 10 && t < 20));
    assert.ok(new Set(elapsed).size > 3, 'timeouts must differ between nodes');
  });

  test('pre-vote: a failed pre-campaign leaves term and vote untouched', () => {
    const r = node(n1);
    for (let i = 0; i < 20 && r.status().role === 'follower'; i++) r.tick();
    assert.equal(r.status().role, 'precandidate');
    const rd = r.ready();
    assert.equal(rd.hardState, null, 'nothing to persist for a pre-vote');
    assert.ok(rd.messages.every((m) => m.kind === 'PreVote' && m.term === 1));
    r.advance(rd);
    r.step({ kind: 'PreVoteResp', from: n2, to: n1, term: term(0), reject: true });
    r.step({ kind: 'PreVoteResp', from: n3, to: n1, term: term(0), reject: true });
    assert.deepEqual([r.status().role, r.status().term, r.status().vote], ['follower', 0, null]);
  });

  test('a single-node group elects itself and commits only once its own log is durable', () => {
    const r = new Raft({ self: n1, voters: [n1], random: new SeededRandom(1), electionTicks: 10 });
    for (let i = 0; i < 20 && r.status().role !== 'leader'; i++) r.tick();
    assert.equal(r.status().role, 'leader');
    const p = r.propose(bytes('x'));
    assert.equal(p.status, 'OK');
    assert.equal(r.status().commit, 0, 'nothing is committed before the Ready is persisted');
    const rd = r.ready();
    assert.equal(rd.entries.length, 2);
    r.advance(rd);
    assert.equal(r.status().commit, 2);
    const applied = drain(r).ready.flatMap((x) => x.committedEntries);
    assert.deepEqual(
      applied.map((e) => e.kind),
      ['noop', 'data'],
    );
  });

  test('a configuration needs a voter, and no node may be both voter and learner', () => {
    assert.throws(
      () => new Raft({ self: n1, voters: [], random: new SeededRandom(1) }),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    assert.throws(
      () => new Raft({ self: n1, voters, learners: [n2], random: new SeededRandom(1) }),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });

  test('a node outside its configuration never campaigns, yet answers a vote request', () => {
    const r = new Raft({ self: nodeName('n9'), voters, random: new SeededRandom(1), electionTicks: 10 });
    for (let i = 0; i < 100; i++) r.tick();
    assert.equal(r.status().role, 'follower');
    assert.equal(r.status().term, 0);
    r.step(voteRequest(n1, r.self, 1, 0, 0));
    const sent = drain(r).messages;
    assert.deepEqual(
      sent.map((m) => [m.kind, m.to, m.kind === 'VoteResp' && m.reject]),
      [['VoteResp', n1, false]],
    );
  });
});

describe('raft paper §5.3: log replication', () => {
  test('a follower rejects an Append whose previous entry does not match (log matching) and hints where to retry', () => {
    const r = node(n2, { restore: restoreWith([1, 1, 1, 1, 1], 1) });
    r.step(append(n1, n2, 3, 5, 2, [], 0));
    const resp = drain(r).messages.find((m) => m.kind === 'AppendResp');
    assert.ok(resp?.kind === 'AppendResp');
    assert.equal(resp.reject, true);
    // Every entry of term 1 ≤ prevTerm 2 may match: the hint is the follower's last one.
    assert.deepEqual([resp.index, resp.hintIndex, resp.hintTerm], [5, 5, 1]);
  });

  test('a follower replaces a conflicting suffix but never commits past what the Append proved', () => {
    const r = node(n2, { restore: restoreWith([1, 1, 1, 1, 1], 1) });
    r.step(append(n1, n2, 2, 2, 1, [makeEntry(3, 2, 'noop', new Uint8Array(0))], 9));
    const s = r.status();
    assert.equal(s.lastIndex, 3, 'entries 4 and 5 of the old term are gone');
    assert.equal(r.log.term(3), 2);
    assert.equal(s.commit, 3, 'commit is capped at the last entry this Append covered');
  });

  test('a follower does not commit a stale suffix that this Append did not cover', () => {
    // Entries 3..5 of term 1 match the leader only as far as the Append says (up to 3).
    const r = node(n2, { restore: restoreWith([1, 1, 1, 1, 1], 1) });
    r.step(append(n1, n2, 2, 2, 1, [makeEntry(3, 1, 'data', bytes('i3t1'))], 5));
    assert.equal(r.status().lastIndex, 5);
    assert.equal(r.status().commit, 3);
  });

  test('a leader commits an entry of its term once a quorum holds it durably', () => {
    const r = node(n1);
    electLeader(r);
    drain(r);
    r.propose(bytes('a'));
    drain(r);
    assert.equal(r.status().commit, 0);
    r.step(appendAck(n2, n1, 1, 2));
    assert.equal(r.status().commit, 2);
  });

  test('a leader does not commit an entry of an earlier term by counting replicas (§5.4.2)', () => {
    // n1 holds [t1, t2] and becomes leader of term 3; its noop sits at 3.
    const r = node(n1, { restore: restoreWith([1, 2], 2) });
    electLeader(r);
    drain(r);
    assert.equal(r.status().lastIndex, 3);
    // n2 acknowledges index 2 only: a quorum (n1, n2) holds the term-2 entry.
    r.step(appendAck(n2, n1, 3, 2));
    assert.equal(r.status().commit, 0, 'the term-2 entry must wait for an entry of term 3');
    r.step(appendAck(n2, n1, 3, 3));
    assert.equal(r.status().commit, 3, 'the noop of term 3 commits, and the term-2 entry with it');
  });

  test('pipelining stops at inflightMax unanswered Appends per follower', () => {
    const r = leaderWithN2Replicating({ inflightMax: 2, appendEntriesMax: 1 });
    for (let i = 0; i < 5; i++) r.propose(bytes(`p${i}`));
    const toN2 = drain(r).messages.filter((m) => m.kind === 'Append' && m.to === n2);
    assert.equal(toN2.length, 2);
    assert.equal(r.progressOf(n2)?.state, 'replicate');
  });

  test('a follower refuses proposals and names the leader', () => {
    const r = node(n2);
    r.step({ kind: 'Heartbeat', from: n1, to: n2, term: term(1), commit: logIndex(0) });
    assert.deepEqual(r.propose(bytes('x')), { status: 'NOT_LEADER', leader: n1 });
  });

  test('a leader refuses proposals beyond uncommittedEntriesMax', () => {
    const r = node(n1, { uncommittedEntriesMax: 3 });
    electLeader(r);
    assert.equal(r.propose(bytes('a')).status, 'OK');
    assert.equal(r.propose(bytes('b')).status, 'OK');
    assert.deepEqual(r.propose(bytes('c')), { status: 'OVERLOADED', uncommitted: 3 });
  });

  test('ready() twice without advance() is a bug', () => {
    const r = node(n1);
    r.step({ kind: 'Heartbeat', from: n2, to: n1, term: term(1), commit: logIndex(0) });
    r.ready();
    assert.throws(() => r.ready());
  });
});

describe('check-quorum and leader stickiness', () => {
  test('a follower that hears from its leader ignores a higher-term vote request and keeps its term', () => {
    const r = node(n2);
    r.step({ kind: 'Heartbeat', from: n1, to: n2, term: term(1), commit: logIndex(0) });
    r.step(voteRequest(n3, n2, 5, 9, 4));
    r.step({ kind: 'PreVote', from: n3, to: n2, term: term(5), lastIndex: logIndex(9), lastTerm: term(4) });
    assert.equal(r.status().term, 1);
    assert.equal(r.status().leader, n1);
    assert.ok(drain(r).messages.every((m) => m.kind === 'HeartbeatResp'));
  });

  test('a learner whose leader went silent answers pre-votes once its lease ran out (raft-sim seed 2539)', () => {
    // It may be a voter that has not applied its promotion yet, and the vote a candidate needs once the leader that
    // promoted it is gone; its election count must not start over at every timeout as a voter's does.
    const n4 = nodeName('n4');
    // Every count of silent ticks past two randomized timeouts (at most 2 × 20 here), wherever a count would restart.
    for (let silent = 40; silent <= 60; silent++) {
      const r = new Raft({ self: n4, voters, learners: [n4], random: new SeededRandom('t/n4'), electionTicks: 10 });
      r.step({ kind: 'Heartbeat', from: n1, to: n4, term: term(1), commit: logIndex(0) });
      drain(r);
      for (let i = 0; i < silent; i++) r.tick();
      assert.equal(r.status().role, 'follower', 'a learner never campaigns');
      r.step({ kind: 'PreVote', from: n2, to: n4, term: term(2), lastIndex: logIndex(0), lastTerm: term(0) });
      const answer = drain(r).messages.find((m) => m.to === n2);
      assert.ok(answer?.kind === 'PreVoteResp' && !answer.reject, `the pre-vote after ${silent} ticks is granted`);
    }
  });

  test('a vote request from a leadership transfer overrides the lease', () => {
    const r = node(n2);
    r.step({ kind: 'Heartbeat', from: n1, to: n2, term: term(1), commit: logIndex(0) });
    r.step(voteRequest(n3, n2, 2, 0, 0, true));
    assert.equal(r.status().term, 2);
    assert.equal(r.status().vote, n3);
  });

  test('a leader that hears from no quorum for an election timeout steps down', () => {
    const r = node(n1);
    electLeader(r);
    for (let i = 0; i < 9; i++) r.tick();
    assert.equal(r.status().role, 'leader');
    // n2 answers within the first period, so the leader survives the first check ...
    r.step({ kind: 'HeartbeatResp', from: n2, to: n1, term: term(1) });
    r.tick();
    assert.equal(r.status().role, 'leader');
    // ... but nobody answers during the second.
    for (let i = 0; i < 10; i++) r.tick();
    assert.equal(r.status().role, 'follower');
    assert.equal(r.status().term, 1);
  });

  test('a stale leader learns the new term from the answer to its Append', () => {
    const r = node(n2);
    r.step({ kind: 'Heartbeat', from: n1, to: n2, term: term(4), commit: logIndex(0) });
    drain(r);
    r.step(append(n3, n2, 2, 0, 0, [], 0));
    const resp = drain(r).messages.find((m) => m.to === n3);
    assert.ok(resp?.kind === 'AppendResp');
    assert.equal(resp.term, 4);
  });
});

describe('leadership transfer', () => {
  test('the leader sends TimeoutNow at once to an up-to-date transferee and refuses proposals meanwhile', () => {
    const r = leaderWithN2Replicating();
    assert.equal(r.transferLeader(n2), true);
    assert.ok(drain(r).messages.some((m) => m.kind === 'TimeoutNow' && m.to === n2));
    assert.deepEqual(r.propose(bytes('x')), { status: 'NOT_LEADER', leader: n2 });
  });

  test('a transfer that does not finish within an election timeout is abandoned', () => {
    const r = node(n1);
    electLeader(r);
    r.transferLeader(n3);
    r.step({ kind: 'HeartbeatResp', from: n2, to: n1, term: term(1) });
    for (let i = 0; i < 10; i++) r.tick();
    assert.equal(r.status().transferee, null);
    assert.equal(r.propose(bytes('x')).status, 'OK');
  });

  test('TimeoutNow makes a follower campaign at once, skipping pre-vote', () => {
    const r = node(n2);
    r.step({ kind: 'Heartbeat', from: n1, to: n2, term: term(1), commit: logIndex(0) });
    r.step({ kind: 'TimeoutNow', from: n1, to: n2, term: term(1) });
    assert.equal(r.status().role, 'candidate');
    assert.equal(r.status().term, 2);
    const votes = drain(r).messages.filter((m) => m.kind === 'Vote');
    assert.ok(votes.length === 2 && votes.every((m) => m.kind === 'Vote' && m.transfer));
  });

  test('transferLeader on a follower or to itself is refused', () => {
    const r = node(n1);
    assert.equal(r.transferLeader(n2), false);
    electLeader(r);
    assert.equal(r.transferLeader(n1), false);
  });
});
