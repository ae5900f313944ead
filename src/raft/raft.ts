/**
 * Raft consensus for one group as a synchronous state machine with no IO (the model is etcd-io/raft's raft.go and
 * rawnode.go). Inputs: `step(message)`, `tick()`, `propose(data)`, `transferLeader(to)`. Output: `ready()` lists what
 * to persist, send and apply; the driver does so in that order and calls `advance(ready)`. One Ready is outstanding at
 * a time. Roles are swapped step functions, not subclasses.
 *
 * Beyond the paper: pre-vote (a node that cannot win does not bump terms), check-quorum with leader stickiness (a
 * leader without recent contact from a quorum steps down; a follower that heard from its leader within the election
 * timeout ignores (pre)votes, so a node back from a partition cannot depose a healthy leader), pipelined replication
 * under `inflightMax`, and leadership transfer via TimeoutNow.
 *
 * Safety rests on: a vote and a term are durable before any message that depends on them is sent (Ready order);
 * a leader counts its own log only once it is durable (`advance`); a leader commits only an entry of its own term
 * counted on a quorum, earlier entries ride along (it appends a noop on election so that this happens promptly).
 *
 * Membership (etcd-raft's single-step `ConfChange`, no joint consensus). A change is a `conf` entry that adds or
 * removes at most one voter (conf-change.ts). The rule implemented, and why it is safe:
 *   1. A node's configuration is the one as of its *applied* index: the snapshot's, then every `conf` entry up to
 *      `applied`, in order (`advance` switches it when the entry is applied, as etcd's ApplyConfChange does). It only
 *      moves forward, since applied entries are never truncated, and an uncommitted change has no effect anywhere.
 *   2. A leader refuses a change while an earlier one may be unapplied on it (`pendingConfIndex > applied`); on
 *      election `pendingConfIndex` is its last index, so a new leader first commits and applies its own noop, and
 *      with it any change a former leader left in its log. So at most one change is in flight, and every change was
 *      checked against the configuration it will be applied on top of.
 *   3. A node does not campaign while a committed change is not yet applied on it, nor with a snapshot pending.
 * Together: a node that holds change k+1 in its log learnt, from the very Append that carried it (and durably, in
 * the same write), that change k is committed, since the leader applied k before proposing k+1; so by rule 3 it
 * campaigns only under configuration k or later. A node that lacks a committed change j+1 while it uses
 * configuration j cannot gather a majority of j, because a majority of j committed j+1 and holds a longer log.
 * Hence an election can be won, and an entry committed, only under the latest committed configuration or the one
 * just before it, C and C' differing in one voter, and every majority of C meets every majority of C' — the overlap
 * single-server changes rely on (Raft thesis §4.1). Rule 2's wait for a new leader's own noop closes the known hole
 * of single-server changes (a change of an older term left uncommitted in some logs, Ongaro's raft-dev errata of
 * 2015). The simulation loses committed entries when rule 2's wait or rule 3 is left out (raft-sim.test.ts).
 * Learners receive the log and snapshots but count in no quorum and never campaign. A learner, or a node outside
 * the configuration (removed, or not yet added), still answers a vote request, as in etcd: it may have been promoted
 * or added without having applied that yet. A candidate asks only the voters of its configuration and counts only
 * their answers. A leader that applies its own removal steps down; a leader stops replicating to a node once its
 * removal is applied.
 *
 * Quiescence (CockroachDB's quiesced ranges, TiKV's hibernate regions): an idle group stops ticking, so it costs no
 * heartbeats. `quiesce()` on a leader whose log is committed, applied and durable up to its last index, held by every
 * member, with no transfer, snapshot or configuration change pending, sends each member a Heartbeat marked `quiesce`
 * and goes quiet; a follower that then holds exactly that log up to that commit goes quiet too and does not answer.
 * A quiet node's `tick` does nothing. It wakes on `wake()`, on a proposal, a configuration change or a transfer, and
 * on any message of its group except its leader's quiesce Heartbeat and a plain HeartbeatResp (which asks nothing);
 * waking restarts its election and heartbeat counts, and a leader's check-quorum period. Safety does not depend on
 * it: only ticks stop, and every message is handled as before. Liveness does: a quiet follower never campaigns, so
 * whoever drives the core must wake it once the leader's node is gone (the driver asks node liveness), and a
 * follower that misses the quiesce Heartbeat keeps ticking and campaigns, which wakes the others. A quiet follower
 * also keeps leader stickiness (it neither votes nor adopts a higher term from a (pre)vote), since its election count
 * stays where the quiesce Heartbeat reset it. `pokeLeader()` lets a follower's owner ask the leader's node for work
 * (a HeartbeatResp marked `wake`, which wakes a quiet leader).
 */
import { assert, unreachable } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import { type LogIndex, logIndex, type NodeName, type Term, term as toTerm } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Random } from '../env/random.js';
import {
  applyConfChange,
  type ConfChange,
  type ConfState,
  confState,
  encodeConfChange,
  isMember,
  isVoter,
} from './conf-change.js';
import { majorityIndex, Progress, tally } from './progress.js';
import { applyConf, makeEntry, RaftLog } from './raft-log.js';
import type {
  AppendMessage,
  AppendRespMessage,
  ConfChangeResult,
  Entry,
  HardState,
  HeartbeatMessage,
  Message,
  ProposeResult,
  Ready,
  Role,
  Snapshot,
  SnapshotMessage,
  Status,
} from './types.js';

export interface RaftConfig {
  readonly self: NodeName;
  /**
   * The group's initial configuration (the one at log index 0), the same on every replica, including one added
   * later: changes after it come from the log or from a snapshot. This node need not be in it.
   */
  readonly voters: readonly NodeName[];
  readonly learners?: readonly NodeName[];
  readonly random: Random;
  /** A follower campaigns after a random number of ticks in [electionTicks, 2·electionTicks) without a leader. */
  readonly electionTicks?: number;
  /**
   * Ticks added to this node's first election timeout only (default 0). A fresh group's replicas other than its
   * preferred leader wait this much longer, so that the preferred one campaigns first and leadership starts spread.
   */
  readonly firstElectionDelayTicks?: number;
  readonly heartbeatTicks?: number;
  readonly preVote?: boolean;
  readonly checkQuorum?: boolean;
  readonly inflightMax?: number;
  readonly appendEntriesMax?: number;
  readonly appendBytesMax?: number;
  readonly applyEntriesMax?: number;
  readonly uncommittedEntriesMax?: number;
  /** Ticks a leader waits for a snapshot to be acknowledged before probing again. */
  readonly snapshotTicksMax?: number;
  /** Durable state to resume from after a restart. */
  readonly restore?: RaftRestore;
}

export interface RaftRestore {
  readonly hardState: HardState;
  readonly snapshot: Snapshot | null;
  readonly entries: readonly Entry[];
  /** The state machine's applied index (≥ the snapshot index: restore the snapshot into it first). */
  readonly applied: number;
}

const EMPTY = new Uint8Array(0);

type StepFn = (m: Message) => void;

export class Raft {
  readonly self: NodeName;
  /** The configuration as of the applied index (rule 1 above). */
  private conf: ConfState;
  private readonly initialConf: ConfState;
  private readonly random: Random;
  private readonly electionTicks: number;
  private readonly heartbeatTicks: number;
  private readonly preVote: boolean;
  private readonly checkQuorum: boolean;
  private readonly inflightMax: number;
  private readonly appendEntriesMax: number;
  private readonly appendBytesMax: number;
  private readonly applyEntriesMax: number;
  private readonly uncommittedEntriesMax: number;
  private readonly snapshotTicksMax: number;

  private term = 0;
  private vote: NodeName | null = null;
  private lead: NodeName | null = null;
  private role: Role = 'follower';
  private stepRole: StepFn = (m) => this.stepFollower(m);
  readonly log: RaftLog;

  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTicks = 0;
  private readonly votes = new Map<NodeName, boolean>();
  /** Leader only: one Progress per voter, itself included (its match is its durable last index). */
  private readonly progress = new Map<NodeName, Progress>();
  private transferee: NodeName | null = null;
  /** Leader: the commit index advanced and followers have not been told yet (done once per Ready). */
  private commitToBroadcast = false;
  /**
   * Leader: a follower was not told the latest commit index, as no Append with entries went to it; the next tick
   * sends heartbeats, which carry it (instead of an empty Append per advance, which doubled the messages per entry).
   */
  private commitNoticeDue = false;
  /** Leader: the commit index of the last broadcast (`broadcastCommit`). */
  private commitBroadcast = 0;
  /** Leader: no configuration change is proposed while this is above the applied index (rule 2 above). */
  private pendingConfIndex = 0;

  /** Ticks do nothing until a message, proposal or `wake` (Quiescence in the header); false in every new role. */
  private quiet = false;
  private outbox: Message[] = [];
  /** A leader's replication messages, which may leave before the Ready that holds them is durable. */
  private leaderOutbox: Message[] = [];
  private persistedHardState: HardState;
  private outstanding: Ready | null = null;

  constructor(config: RaftConfig) {
    this.self = config.self;
    const initialConf = confState(config.voters, config.learners ?? []);
    this.random = config.random;
    this.electionTicks = config.electionTicks ?? LIMITS.raftElectionTicks;
    this.heartbeatTicks = config.heartbeatTicks ?? LIMITS.raftHeartbeatTicks;
    if (!(this.heartbeatTicks > 0 && this.electionTicks > this.heartbeatTicks)) {
      throw new BasaltError('INVALID_ARGUMENT', 'need 0 < heartbeatTicks < electionTicks');
    }
    this.preVote = config.preVote ?? true;
    this.checkQuorum = config.checkQuorum ?? true;
    this.inflightMax = config.inflightMax ?? LIMITS.raftInflightAppendsMax;
    this.appendEntriesMax = config.appendEntriesMax ?? LIMITS.raftAppendEntriesMax;
    this.appendBytesMax = config.appendBytesMax ?? LIMITS.raftAppendBytesMax;
    this.applyEntriesMax = config.applyEntriesMax ?? LIMITS.raftApplyEntriesMax;
    this.uncommittedEntriesMax = config.uncommittedEntriesMax ?? LIMITS.raftUncommittedEntriesMax;
    this.snapshotTicksMax = config.snapshotTicksMax ?? 2 * this.electionTicks;
    const r = config.restore;
    const snap = r?.snapshot ?? null;
    this.initialConf = initialConf;
    const snapshot = snap === null ? null : this.withConf(snap);
    this.log = new RaftLog(snapshot, r?.entries ?? [], r?.hardState.commit ?? 0, r?.applied ?? 0, initialConf);
    this.conf = this.log.confAt(this.log.applied);
    if (r !== undefined) {
      this.term = r.hardState.term;
      this.vote = r.hardState.vote;
    }
    this.persistedHardState = this.hardState();
    this.becomeFollower(this.term, null);
    const delay = config.firstElectionDelayTicks ?? 0;
    if (!(Number.isInteger(delay) && delay >= 0)) {
      throw new BasaltError('INVALID_ARGUMENT', 'firstElectionDelayTicks must be an integer >= 0');
    }
    this.randomizedElectionTicks += delay;
  }

  // ---------------------------------------------------------------- inputs

  tick(): void {
    if (this.quiet) return;
    if (this.role === 'leader') this.tickLeader();
    else this.tickElection();
  }

  step(m: Message): void {
    assert(m.to === this.self, 'a message is stepped into the node it is for', m.to, this.self);
    if (this.quiet && !this.keepsQuiet(m)) this.wake();
    // Messages from outside this node's configuration count too: nodes switch configurations at different times.
    if (m.term > this.term) {
      if (m.kind === 'PreVote' || m.kind === 'Vote') {
        const force = m.kind === 'Vote' && m.transfer;
        const inLease = this.checkQuorum && this.lead !== null && this.electionElapsed < this.electionTicks;
        // Leader stickiness: while this node hears from a live leader it neither votes nor adopts the higher term.
        if (!force && inLease) return;
      }
      if (m.kind === 'PreVote' || (m.kind === 'PreVoteResp' && !m.reject)) {
        // A pre-vote changes no term: the request carries the term the sender would use, the grant echoes it.
      } else {
        const fromLeader = m.kind === 'Append' || m.kind === 'Heartbeat' || m.kind === 'Snapshot';
        this.becomeFollower(m.term, fromLeader ? m.from : null);
      }
    } else if (m.term < this.term) {
      this.stepStale(m);
      return;
    }
    if (m.kind === 'PreVote' || m.kind === 'Vote') this.handleVoteRequest(m);
    else this.stepRole(m);
  }

  propose(data: Uint8Array): ProposeResult {
    return this.proposeBatch([data]);
  }

  /** Appends `batch` as consecutive entries; the result names the first one's index. */
  proposeBatch(batch: readonly Uint8Array[]): ProposeResult {
    if (batch.length === 0) throw new BasaltError('INVALID_ARGUMENT', 'an empty proposal batch');
    if (this.role !== 'leader' || this.transferee !== null) {
      return { status: 'NOT_LEADER', leader: this.role === 'leader' ? this.transferee : this.lead };
    }
    const uncommitted = this.log.lastIndex() - this.log.committed;
    if (uncommitted + batch.length > this.uncommittedEntriesMax) return { status: 'OVERLOADED', uncommitted };
    this.wake();
    const first = this.log.lastIndex() + 1;
    this.appendEntries(batch.map((data, i) => makeEntry(first + i, this.term, 'data', data)));
    this.broadcastAppend();
    return { status: 'OK', index: logIndex(first), term: toTerm(this.term) };
  }

  /**
   * Proposes one configuration change, checked against this leader's configuration; it takes effect on each node as
   * that node applies it. Refused with CONF_CHANGE_IN_FLIGHT while an earlier change is not applied here.
   */
  proposeConfChange(change: ConfChange): ConfChangeResult {
    if (this.role !== 'leader' || this.transferee !== null) {
      return { status: 'NOT_LEADER', leader: this.role === 'leader' ? this.transferee : this.lead };
    }
    if (this.pendingConfIndex > this.log.applied) {
      const details = { pendingIndex: this.pendingConfIndex, applied: this.log.applied };
      const error = new BasaltError('CONF_CHANGE_IN_FLIGHT', 'an earlier configuration change is not applied', details);
      return { status: 'REFUSED', error };
    }
    const next = applyConfChange(this.conf, change);
    if (next instanceof BasaltError) return { status: 'REFUSED', error: next };
    if (next.voters.length + next.learners.length > LIMITS.raftMembersMax) {
      const error = new BasaltError('INVALID_ARGUMENT', 'the group has as many members as it may', {
        membersMax: LIMITS.raftMembersMax,
      });
      return { status: 'REFUSED', error };
    }
    const uncommitted = this.log.lastIndex() - this.log.committed;
    if (uncommitted + 1 > this.uncommittedEntriesMax) return { status: 'OVERLOADED', uncommitted };
    // Rule 2 read back from the log: no change is in flight above the applied index.
    assert(
      !this.log.hasConfIn(this.log.applied + 1, this.log.lastIndex()),
      'at most one configuration change in flight',
      this.log.applied,
      this.pendingConfIndex,
    );
    this.wake();
    const index = this.log.lastIndex() + 1;
    this.appendEntries([makeEntry(index, this.term, 'conf', encodeConfChange(change))]);
    this.pendingConfIndex = index;
    this.broadcastAppend();
    return { status: 'OK', index: logIndex(index), term: toTerm(this.term) };
  }

  /** Starts handing leadership to `to`; returns false when this node is not the leader or `to` is no other voter. */
  transferLeader(to: NodeName): boolean {
    if (this.role !== 'leader' || to === this.self || !isVoter(this.conf, to)) return false;
    if (this.transferee === to) return true;
    this.wake();
    this.transferee = to;
    // The transfer must finish within one election timeout or it is abandoned (tickLeader).
    this.electionElapsed = 0;
    const pr = this.progress.get(to)!;
    if (pr.match === this.log.lastIndex()) this.send({ kind: 'TimeoutNow', to });
    else this.sendAppend(to, true);
    return true;
  }

  /**
   * A leader with nothing left to replicate goes quiet (Quiescence in the header): every member is told with a quiesce
   * Heartbeat. Returns whether this node is quiet now; false, with nothing done, when anything is in flight.
   */
  quiesce(): boolean {
    if (this.quiet) return true;
    if (!this.mayQuiesce()) return false;
    const commit = logIndex(this.log.committed);
    for (const peer of this.progress.keys()) {
      if (peer !== this.self) this.send({ kind: 'Heartbeat', to: peer, commit, quiesce: true });
    }
    this.commitNoticeDue = false;
    this.quiet = true;
    return true;
  }

  /** Leader: some follower learns the latest commit index only from the heartbeats of the next tick. */
  get commitNoticePending(): boolean {
    return this.commitNoticeDue && this.role === 'leader';
  }

  /** The group is quiet on this node (Quiescence in the header). */
  get isQuiet(): boolean {
    return this.quiet;
  }

  /** The leader this node follows (itself when leader), or null. */
  get leader(): NodeName | null {
    return this.lead;
  }

  get isLeader(): boolean {
    return this.role === 'leader';
  }

  /** Leaves the quiet state (a no-op when awake): ticks count again from zero. */
  wake(): void {
    if (!this.quiet) return;
    this.quiet = false;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    // A new check-quorum period: only what is heard from now on counts (the last answers may be hours old).
    if (this.role === 'leader') for (const [peer, pr] of this.progress) if (peer !== this.self) pr.recentActive = false;
  }

  /** A follower wakes and asks its leader's node for attention (a HeartbeatResp marked `wake`); false without one. */
  pokeLeader(): boolean {
    if (this.role !== 'follower' || this.lead === null || this.lead === this.self) return false;
    this.wake();
    this.send({ kind: 'HeartbeatResp', to: this.lead, wake: true });
    return true;
  }

  /** Drops the log up to `index` (≤ applied), which the state machine captured in `data`. */
  compact(index: number, data: Uint8Array): Snapshot | null {
    return this.log.compact(index, data);
  }

  // ---------------------------------------------------------------- outputs

  hasReady(): boolean {
    if (this.outstanding !== null) return false;
    return (
      this.commitToBroadcast ||
      this.outbox.length > 0 ||
      this.leaderOutbox.length > 0 ||
      !sameHardState(this.hardState(), this.persistedHardState) ||
      this.log.stableIndex() < this.log.lastIndex() ||
      this.log.pendingSnapshot !== null ||
      (this.log.committed > this.log.applied && this.log.pendingSnapshot === null)
    );
  }

  ready(): Ready {
    assert(this.outstanding === null, 'ready() called again before advance()');
    if (this.commitToBroadcast) {
      // One Append per follower however many answers advanced the commit index since the last Ready.
      this.commitToBroadcast = false;
      if (this.role === 'leader') this.broadcastCommit();
      this.commitBroadcast = this.log.committed;
    }
    const hs = this.hardState();
    checkHardState(this.persistedHardState, hs);
    this.log.checkInvariants();
    const rd: Ready = {
      hardState: sameHardState(hs, this.persistedHardState) ? null : hs,
      entries: this.log.unstableEntries(),
      snapshot: this.log.pendingSnapshot,
      leaderMessages: this.leaderOutbox,
      messages: this.outbox,
      committedEntries: this.log.nextCommitted(this.applyEntriesMax, Number.POSITIVE_INFINITY),
    };
    this.outbox = [];
    this.leaderOutbox = [];
    this.outstanding = rd;
    return rd;
  }

  advance(rd: Ready): void {
    assert(rd === this.outstanding, 'advance() with a Ready that is not the outstanding one');
    this.outstanding = null;
    if (rd.hardState !== null) this.persistedHardState = rd.hardState;
    if (rd.snapshot !== null) {
      const before = this.log.applied;
      this.log.snapshotApplied(rd.snapshot);
      if (this.log.applied > before) this.switchConf(rd.snapshot.conf ?? this.initialConf);
    }
    const last = rd.entries[rd.entries.length - 1];
    if (last !== undefined) this.log.stableTo(last.index, last.term);
    const lastApplied = rd.committedEntries[rd.committedEntries.length - 1];
    if (lastApplied !== undefined) this.log.appliedTo(lastApplied.index);
    for (const e of rd.committedEntries) if (e.kind === 'conf') this.switchConf(applyConf(this.conf, e));
    if (this.role === 'leader') {
      // The leader's own copy counts towards a quorum only once it is durable.
      if (this.progress.get(this.self)!.maybeUpdate(this.log.stableIndex()) && this.maybeCommit()) {
        this.commitToBroadcast = true;
      }
    }
  }

  status(): Status {
    return {
      self: this.self,
      role: this.role,
      term: toTerm(this.term),
      vote: this.vote,
      leader: this.lead,
      commit: logIndex(this.log.committed),
      applied: logIndex(this.log.applied),
      lastIndex: logIndex(this.log.lastIndex()),
      snapshotIndex: logIndex(this.log.snapshotIndex()),
      transferee: this.transferee,
      voters: this.conf.voters,
      learners: this.conf.learners,
      pendingConfIndex: logIndex(this.pendingConfIndex),
      quiet: this.quiet,
    };
  }

  /** Nothing is in flight: the log is committed, applied and durable to its end on this leader and every member. */
  private mayQuiesce(): boolean {
    if (this.role !== 'leader' || this.transferee !== null || this.commitToBroadcast) return false;
    const last = this.log.lastIndex();
    if (this.log.committed !== last || this.log.applied !== last || this.log.stableIndex() !== last) return false;
    if (this.log.pendingSnapshot !== null || this.pendingConfIndex > this.log.applied) return false;
    for (const [peer, pr] of this.progress) if (peer !== this.self && pr.match !== last) return false;
    return true;
  }

  /** The messages that leave a quiet node quiet: its leader's quiesce Heartbeat and a plain HeartbeatResp. */
  private keepsQuiet(m: Message): boolean {
    if (m.kind === 'HeartbeatResp') return m.wake !== true && m.term === this.term;
    return m.kind === 'Heartbeat' && m.quiesce === true && m.from === this.lead && m.term === this.term;
  }

  /** Leader only: each member's (match, next, state), for tests and metrics. */
  progressOf(peer: NodeName): Readonly<Progress> | undefined {
    return this.progress.get(peer);
  }

  /** `s`, with its configuration made explicit (see SnapshotMeta.conf) and checked. */
  private withConf(s: Snapshot): Snapshot {
    return { ...s, conf: s.conf === undefined ? this.initialConf : confState(s.conf.voters, s.conf.learners) };
  }

  /**
   * Adopts the configuration just applied. A leader tracks the new members (from its last index, as recently active
   * so that it may ship them a snapshot at once), forgets removed ones, and steps down when it removed itself.
   */
  private switchConf(next: ConfState): void {
    this.conf = next;
    if (this.role !== 'leader') {
      if (this.role !== 'follower' && !isVoter(next, this.self)) this.becomeFollower(this.term, null);
      return;
    }
    if (!isVoter(next, this.self)) {
      this.becomeFollower(this.term, null);
      return;
    }
    for (const peer of [...this.progress.keys()]) if (!isMember(next, peer)) this.progress.delete(peer);
    if (this.transferee !== null && !isVoter(next, this.transferee)) this.transferee = null;
    for (const peer of [...next.voters, ...next.learners]) {
      if (this.progress.has(peer)) continue;
      const pr = new Progress(this.log.lastIndex() + 1, this.inflightMax);
      pr.recentActive = true;
      this.progress.set(peer, pr);
      this.sendAppend(peer, true);
    }
    // A smaller quorum may already hold more.
    if (this.maybeCommit()) this.commitToBroadcast = true;
  }

  /** Whether this node may campaign: a voter with no snapshot or committed configuration change left to apply. */
  private promotable(): boolean {
    return (
      isVoter(this.conf, this.self) &&
      this.log.pendingSnapshot === null &&
      !this.log.hasConfIn(this.log.applied + 1, this.log.committed)
    );
  }

  private hardState(): HardState {
    return { term: toTerm(this.term), vote: this.vote, commit: logIndex(this.log.committed) };
  }

  // ---------------------------------------------------------------- roles

  private reset(term: number): void {
    assert(term >= this.term, 'the term never goes back', this.term, term);
    if (this.term !== term) {
      this.term = term;
      this.vote = null;
    }
    this.lead = null;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTicks = this.electionTicks + this.random.int(this.electionTicks);
    this.votes.clear();
    this.progress.clear();
    this.transferee = null;
    this.commitToBroadcast = false;
    this.commitNoticeDue = false;
    this.pendingConfIndex = 0;
    this.quiet = false;
  }

  private becomeFollower(term: number, lead: NodeName | null): void {
    this.reset(term);
    this.lead = lead;
    this.role = 'follower';
    this.stepRole = (m) => this.stepFollower(m);
  }

  private becomePreCandidate(): void {
    assert(this.role !== 'leader', 'a leader never pre-campaigns');
    // Neither term nor vote change: a failed pre-campaign leaves no trace on anyone's durable state.
    this.votes.clear();
    this.lead = null;
    this.role = 'precandidate';
    this.stepRole = (m) => this.stepCandidate(m);
  }

  private becomeCandidate(): void {
    assert(this.role !== 'leader', 'a leader never campaigns');
    this.reset(this.term + 1);
    this.vote = this.self;
    this.role = 'candidate';
    this.stepRole = (m) => this.stepCandidate(m);
  }

  private becomeLeader(): void {
    assert(this.role === 'candidate', 'only a candidate becomes leader');
    assert(this.vote === this.self, 'a leader voted for itself in its term', this.term, this.vote);
    this.reset(this.term);
    this.lead = this.self;
    this.role = 'leader';
    this.stepRole = (m) => this.stepLeader(m);
    for (const v of [...this.conf.voters, ...this.conf.learners]) {
      this.progress.set(v, new Progress(this.log.lastIndex() + 1, this.inflightMax));
    }
    // Any change in the log may be unapplied: none is proposed before this term's noop is applied (rule 2).
    this.pendingConfIndex = this.log.lastIndex();
    this.commitBroadcast = this.log.committed;
    const own = this.progress.get(this.self)!;
    own.maybeUpdate(this.log.stableIndex());
    own.becomeReplicate();
    own.recentActive = true;
    // Commits of earlier terms' entries happen only through an entry of this term.
    this.appendEntries([makeEntry(this.log.lastIndex() + 1, this.term, 'noop', EMPTY)]);
    this.broadcastAppend();
  }

  private campaign(kind: 'preVote' | 'election' | 'transfer'): void {
    let voteTerm: number;
    if (kind === 'preVote') {
      this.becomePreCandidate();
      voteTerm = this.term + 1;
    } else {
      this.becomeCandidate();
      voteTerm = this.term;
    }
    if (this.poll(this.self, true) === 'won') return;
    for (const to of this.conf.voters) {
      if (to === this.self) continue;
      const lastIndex = logIndex(this.log.lastIndex());
      const lastTerm = toTerm(this.log.lastTerm());
      if (kind === 'preVote') this.send({ kind: 'PreVote', to, term: toTerm(voteTerm), lastIndex, lastTerm });
      else this.send({ kind: 'Vote', to, term: toTerm(voteTerm), lastIndex, lastTerm, transfer: kind === 'transfer' });
    }
  }

  /** Records a (pre)vote answer and acts on a decided election. */
  private poll(from: NodeName, granted: boolean): 'won' | 'lost' | 'pending' {
    if (!this.votes.has(from)) this.votes.set(from, granted);
    let yes = 0;
    let no = 0;
    for (const [voter, g] of this.votes) {
      // Only voters of this node's configuration count (a learner's or a removed node's answer does not).
      if (!isVoter(this.conf, voter)) continue;
      if (g) yes++;
      else no++;
    }
    const result = tally(yes, no, this.conf.voters.length);
    if (result === 'won') {
      if (this.role === 'precandidate') this.campaign('election');
      else this.becomeLeader();
    } else if (result === 'lost') {
      this.becomeFollower(this.term, null);
    }
    return result;
  }

  // ---------------------------------------------------------------- ticks

  private tickElection(): void {
    this.electionElapsed++;
    // Only a node that campaigns starts its count over: a learner's (or a node's waiting to apply a committed change)
    // grows past the election timeout, so that its leader lease ends and it answers (pre-)votes again. A learner that
    // does not know of its promotion may be the vote a candidate needs, once the leader that promoted it is gone.
    if (this.electionElapsed >= this.randomizedElectionTicks && this.promotable()) {
      this.electionElapsed = 0;
      this.campaign(this.preVote ? 'preVote' : 'election');
    }
  }

  private tickLeader(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    for (const [peer, pr] of this.progress) {
      if (pr.state === 'snapshot' && ++pr.snapshotTicks >= this.snapshotTicksMax) {
        // The snapshot (or its answer) was probably lost; probe again, which resends it if still needed.
        pr.becomeProbe();
        this.sendAppend(peer, true);
      }
    }
    if (this.electionElapsed >= this.electionTicks) {
      this.electionElapsed = 0;
      if (this.checkQuorum && !this.quorumActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      this.transferee = null;
    }
    if (this.heartbeatElapsed >= this.heartbeatTicks || this.commitNoticeDue) {
      this.heartbeatElapsed = 0;
      this.broadcastHeartbeat();
    }
  }

  /** True when a quorum (this leader included) was heard from since the last check; starts a new period. */
  private quorumActive(): boolean {
    let active = 0;
    for (const [peer, pr] of this.progress) {
      if (isVoter(this.conf, peer) && (peer === this.self || pr.recentActive)) active++;
      if (peer !== this.self) pr.recentActive = false;
    }
    return tally(active, 0, this.conf.voters.length) === 'won';
  }

  // ---------------------------------------------------------------- steps

  /** A message from an older term: tell a stale leader about the newer term; answer a pre-vote with a rejection. */
  private stepStale(m: Message): void {
    if ((this.checkQuorum || this.preVote) && (m.kind === 'Append' || m.kind === 'Heartbeat')) {
      // Without this a leader cut off by a partition that pre-vote kept from learning the new term never would.
      this.send({
        kind: 'AppendResp',
        to: m.from,
        reject: false,
        index: logIndex(0),
        hintIndex: logIndex(0),
        hintTerm: toTerm(0),
      });
    } else if (m.kind === 'PreVote') {
      this.send({ kind: 'PreVoteResp', to: m.from, reject: true });
    }
  }

  private handleVoteRequest(m: Extract<Message, { kind: 'PreVote' | 'Vote' }>): void {
    const canVote =
      this.vote === m.from ||
      (this.vote === null && this.lead === null) ||
      (m.kind === 'PreVote' && m.term > this.term);
    const upToDate =
      m.lastTerm > this.log.lastTerm() || (m.lastTerm === this.log.lastTerm() && m.lastIndex >= this.log.lastIndex());
    const respKind = m.kind === 'PreVote' ? 'PreVoteResp' : 'VoteResp';
    if (canVote && upToDate) {
      // A pre-vote grant echoes the requested term; a real vote is cast in m.term, which is now this node's term.
      this.send({ kind: respKind, to: m.from, term: toTerm(m.term), reject: false });
      if (m.kind === 'Vote') {
        assert(this.vote === null || this.vote === m.from, 'one vote per term', this.term, this.vote, m.from);
        this.electionElapsed = 0;
        this.vote = m.from;
      }
    } else {
      this.send({ kind: respKind, to: m.from, reject: true });
    }
  }

  private stepFollower(m: Message): void {
    switch (m.kind) {
      case 'Append':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleAppend(m);
        return;
      case 'Heartbeat':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleHeartbeat(m);
        return;
      case 'Snapshot':
        this.electionElapsed = 0;
        this.lead = m.from;
        this.handleSnapshot(m);
        return;
      case 'TimeoutNow':
        if (this.promotable()) this.campaign('transfer');
        return;
      case 'PreVoteResp':
      case 'VoteResp':
      case 'AppendResp':
      case 'HeartbeatResp':
      case 'PreVote':
      case 'Vote':
        return;
      default:
        unreachable(m);
    }
  }

  private stepCandidate(m: Message): void {
    switch (m.kind) {
      case 'Append':
        this.becomeFollower(m.term, m.from);
        this.handleAppend(m);
        return;
      case 'Heartbeat':
        this.becomeFollower(m.term, m.from);
        this.handleHeartbeat(m);
        return;
      case 'Snapshot':
        this.becomeFollower(m.term, m.from);
        this.handleSnapshot(m);
        return;
      case 'PreVoteResp':
        if (this.role === 'precandidate') this.poll(m.from, !m.reject);
        return;
      case 'VoteResp':
        if (this.role === 'candidate') this.poll(m.from, !m.reject);
        return;
      case 'TimeoutNow':
      case 'AppendResp':
      case 'HeartbeatResp':
      case 'PreVote':
      case 'Vote':
        return;
      default:
        unreachable(m);
    }
  }

  private stepLeader(m: Message): void {
    const pr = this.progress.get(m.from);
    if (pr === undefined) return;
    switch (m.kind) {
      case 'AppendResp':
        pr.recentActive = true;
        this.handleAppendResp(m, pr);
        return;
      case 'HeartbeatResp':
        pr.recentActive = true;
        pr.probeSent = false;
        if (pr.state === 'replicate' && pr.inflight.length >= this.inflightMax) pr.inflight.shift();
        if (pr.match < this.log.lastIndex()) this.sendAppend(m.from, true);
        return;
      case 'Append':
      case 'Heartbeat':
      case 'Snapshot':
        assert(false, 'two leaders in one term', this.term, this.self, m.from);
        return;
      case 'PreVoteResp':
      case 'VoteResp':
      case 'TimeoutNow':
      case 'PreVote':
      case 'Vote':
        return;
      default:
        unreachable(m);
    }
  }

  // ---------------------------------------------------------------- follower side of replication

  private handleAppend(m: AppendMessage): void {
    if (m.prevIndex < this.log.committed) {
      this.sendAppendResp(m.from, false, this.log.committed);
      return;
    }
    if (this.log.matchTerm(m.prevIndex, m.prevTerm)) {
      const conflict = this.log.findConflict(m.entries);
      if (conflict !== 0) {
        assert(
          conflict > this.log.committed,
          'an Append conflicts with a committed entry',
          conflict,
          this.log.committed,
        );
        this.log.append(m.entries.slice(conflict - m.prevIndex - 1));
      }
      const lastNew = m.prevIndex + m.entries.length;
      this.log.commitTo(Math.min(m.commit, lastNew));
      this.sendAppendResp(m.from, false, lastNew);
      return;
    }
    const hint = this.log.findConflictByTerm(m.prevIndex, m.prevTerm);
    this.send({
      kind: 'AppendResp',
      to: m.from,
      reject: true,
      index: m.prevIndex,
      hintIndex: logIndex(hint.index),
      hintTerm: toTerm(hint.term),
    });
  }

  private handleHeartbeat(m: HeartbeatMessage): void {
    this.log.commitTo(Math.min(m.commit, this.log.lastIndex()));
    const caughtUp = this.log.lastIndex() === m.commit && this.log.committed === m.commit;
    if (m.quiesce === true && caughtUp && this.log.pendingSnapshot === null) {
      // Quiet, and silent: an answer would only tell the quiet leader what it knows.
      this.quiet = true;
      return;
    }
    this.send({ kind: 'HeartbeatResp', to: m.from });
  }

  private handleSnapshot(m: SnapshotMessage): void {
    const s = m.snapshot;
    if (s.index <= this.log.committed) {
      this.sendAppendResp(m.from, false, this.log.committed);
    } else if (this.log.matchTerm(s.index, s.term)) {
      // The log already holds the snapshot's last entry, hence everything before it: fast-forward the commit only.
      this.log.commitTo(s.index);
      this.sendAppendResp(m.from, false, this.log.lastIndex());
    } else {
      this.log.restore(this.withConf(s));
      this.sendAppendResp(m.from, false, s.index);
    }
  }

  private sendAppendResp(to: NodeName, reject: boolean, index: number): void {
    this.send({ kind: 'AppendResp', to, reject, index: logIndex(index), hintIndex: logIndex(0), hintTerm: toTerm(0) });
  }

  // ---------------------------------------------------------------- leader side of replication

  private appendEntries(entries: readonly Entry[]): void {
    this.log.append(entries);
  }

  private handleAppendResp(m: AppendRespMessage, pr: Progress): void {
    if (m.reject) {
      const matchHint = m.hintTerm > 0 ? this.log.findConflictByTerm(m.hintIndex, m.hintTerm).index : m.hintIndex;
      if (pr.maybeDecrTo(m.index, matchHint)) {
        if (pr.state === 'replicate') pr.becomeProbe();
        this.sendAppend(m.from, true);
      }
      return;
    }
    if (!pr.maybeUpdate(m.index)) {
      // A duplicate or reordered answer still frees the pipeline slots it covers.
      if (pr.state === 'replicate') pr.freeTo(m.index);
      return;
    }
    if (pr.state === 'probe') pr.becomeReplicate();
    else if (pr.state === 'snapshot' && pr.match >= pr.pendingSnapshot) {
      pr.becomeProbe();
      pr.becomeReplicate();
    } else if (pr.state === 'replicate') pr.freeTo(m.index);
    if (this.maybeCommit()) this.commitToBroadcast = true;
    while (this.sendAppend(m.from, false)) {}
    if (m.from === this.transferee && pr.match === this.log.lastIndex()) this.send({ kind: 'TimeoutNow', to: m.from });
  }

  /** Advances the commit index to what a quorum holds, if that entry is of the current term. */
  private maybeCommit(): boolean {
    const own = this.progress.get(this.self);
    assert(
      own !== undefined && own.match <= this.log.stableIndex(),
      'a leader counts only its durable log',
      own?.match,
    );
    const matches: number[] = [];
    for (const [peer, pr] of this.progress) if (isVoter(this.conf, peer)) matches.push(pr.match);
    const index = majorityIndex(matches);
    if (index <= this.log.committed || this.log.term(index) !== this.term) return false;
    this.log.commitTo(index);
    return true;
  }

  private broadcastAppend(): void {
    for (const peer of this.progress.keys()) if (peer !== this.self) this.sendAppend(peer, true);
  }

  /**
   * A new commit index reaches each follower on the Append of its next entries, when there are any now; the others
   * learn it from the heartbeats of the next tick (`commitNoticeDue`). Followers apply up to one tick later than the
   * leader, as in etcd, where the commit index rides only on appends and heartbeats; configuration changes are the
   * exception.
   */
  private broadcastCommit(): void {
    // A committed configuration change is told at once: a removed member learns of its removal before the leader
    // stops sending to it, and a leader that removed itself leaves no follower waiting for a tick it will not send.
    if (this.log.hasConfIn(this.commitBroadcast + 1, this.log.committed)) {
      this.broadcastAppend();
      return;
    }
    for (const peer of this.progress.keys()) {
      if (peer !== this.self && !this.sendAppend(peer, false)) this.commitNoticeDue = true;
    }
  }

  /**
   * A heartbeat to each follower, except one in step (replicate) that received an Append since the last round and
   * knows the commit index its log allows: the Appends of a busy group already reset its election timer and bring
   * answers for check-quorum, so the heartbeats of a busy group cost nothing. A follower whose Appends were lost
   * receives no more once its pipeline is full, and then a heartbeat again, whose answer frees a slot.
   */
  private broadcastHeartbeat(): void {
    this.commitNoticeDue = false;
    for (const [peer, pr] of this.progress) {
      if (peer === this.self) continue;
      const commit = Math.min(pr.match, this.log.committed);
      const appended = pr.appendedSinceHeartbeat;
      pr.appendedSinceHeartbeat = false;
      if (appended && pr.state === 'replicate' && pr.commitSent >= commit) continue;
      pr.commitSent = Math.max(pr.commitSent, commit);
      this.send({ kind: 'Heartbeat', to: peer, commit: logIndex(commit) });
    }
  }

  /** Sends the next batch of entries (or a snapshot) to `to`; returns whether anything was sent. */
  private sendAppend(to: NodeName, sendIfEmpty: boolean): boolean {
    const pr = this.progress.get(to)!;
    if (pr.isPaused()) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.term(prevIndex);
    if (prevTerm === undefined) return this.sendSnapshot(to, pr);
    const entries =
      pr.next <= this.log.lastIndex()
        ? this.log.slice(pr.next, this.log.lastIndex(), this.appendEntriesMax, this.appendBytesMax)
        : [];
    if (entries.length === 0 && !sendIfEmpty) return false;
    this.send({
      kind: 'Append',
      to,
      prevIndex: logIndex(prevIndex),
      prevTerm: toTerm(prevTerm),
      entries,
      commit: logIndex(this.log.committed),
    });
    pr.sentEntries(prevIndex + entries.length, entries.length);
    pr.appendedSinceHeartbeat = true;
    // The follower takes the commit index up to the last entry of this Append (its log may hold more that differs).
    pr.commitSent = Math.max(pr.commitSent, Math.min(this.log.committed, prevIndex + entries.length));
    return true;
  }

  private sendSnapshot(to: NodeName, pr: Progress): boolean {
    // A follower not heard from lately is probably down: do not ship it a large snapshot yet.
    if (!pr.recentActive) return false;
    const snapshot = this.log.snapshot();
    this.send({ kind: 'Snapshot', to, snapshot });
    pr.becomeSnapshot(snapshot.index);
    return true;
  }

  private send(m: DistributiveOmit<Message, 'from' | 'term'> & { term?: Term }): void {
    const message = { ...m, from: this.self, term: m.term ?? toTerm(this.term) } as Message;
    if (LEADER_KINDS.has(message.kind)) this.leaderOutbox.push(message);
    else this.outbox.push(message);
  }
}

/**
 * Only a leader sends these. They may go out before the leader's own entries are durable (Raft thesis §10.2.1):
 * the leader counts itself towards a quorum only once they are, and its term and vote were durable before it won.
 */
const LEADER_KINDS: ReadonlySet<Message['kind']> = new Set(['Append', 'Heartbeat', 'Snapshot', 'TimeoutNow']);

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * What goes to disk never takes back what is there: the term never decreases, a vote cast in a term stays, and the
 * commit index only grows. A violation would let this node vote twice in a term or forget a commit after a restart.
 */
function checkHardState(persisted: HardState, next: HardState): void {
  assert(next.term >= persisted.term, 'the durable term never goes back', persisted.term, next.term);
  assert(
    next.term > persisted.term || persisted.vote === null || next.vote === persisted.vote,
    'a durable vote stays for its term',
    next.term,
    persisted.vote,
    next.vote,
  );
  assert(next.commit >= persisted.commit, 'the durable commit index never goes back', persisted.commit, next.commit);
}

function sameHardState(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

export type { LogIndex };
