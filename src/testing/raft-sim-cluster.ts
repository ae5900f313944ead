/**
 * A cluster of Raft cores stepped directly, with no driver, no IO and no real time (etcd's `network` in its tests, made
 * into a fault-injecting simulator). One `Random` drives everything, so one seed replays one run exactly.
 *
 * Model: virtual time advances in units; a node ticks every `unitsPerTick` units (each node may run a little fast or
 * slow, as real clocks do: `tickDriftUnitsMax`); each unit a node handles at most one
 * Ready (persist to its simulated disk, then send, then apply), which plays the role of disk latency. Messages
 * travel with a delay drawn per message and may be dropped, duplicated or cut by a partition when they arrive.
 * A crash throws away everything but the disk; a restart rebuilds the core and the state machine from it.
 *
 * Checked on every unit (a violation throws with the seed): at most one leader per term; no two nodes apply different
 * entries at one index; a node that becomes leader holds every entry any node applied (leader completeness), which
 * together with the former means an acknowledged proposal is never lost. `runRaftSimulation` also checks log
 * matching across all live logs every 100 units and at the end.
 *
 * Membership: `spares` nodes start outside the initial configuration, and with `confChangeRate` the leader proposes
 * random configuration changes (add a learner or a voter, promote, remove, itself included). Also checked after every
 * input: a leader's log never holds more than one configuration change above its applied index (one in flight), and
 * every node's configuration is the one its log implies at its applied index, which is the one the applied history
 * implies there (so no node acts on a configuration other nodes did not commit).
 *
 * Quiescence (`quiescence`): at each of its ticks a leader with no proposal of its own pending tries to go quiet
 * instead of ticking, if a majority of its voters is live; a quiet follower asks the simulated node liveness about its
 * leader (up, and linked both ways) and wakes once it is gone, a quiet leader once its live voters are no majority; a
 * quiet node does not tick. `runRaftSimulation` then alternates busy and idle stretches,
 * so that groups go quiet and wake under every fault.
 */
import { assert } from '../core/assert.js';
import { logIndex, type NodeName, nodeName, term as toTerm } from '../core/ids.js';
import type { Random } from '../env/random.js';
import {
  applyConfChange,
  type ConfChange,
  type ConfState,
  confState,
  decodeConfChange,
  isMember,
  sameConf,
} from '../raft/conf-change.js';
import { liveQuorum } from '../raft/progress.js';
import { Raft, type RaftConfig } from '../raft/raft.js';
import { makeEntry } from '../raft/raft-log.js';
import type { ConfChangeResult, Entry, HardState, Message, Ready, Snapshot } from '../raft/types.js';

export interface SimFaults {
  dropRate: number;
  duplicateRate: number;
  delayUnitsMax: number;
  /** Chance per unit that a partition starts (when none is active). */
  partitionRate: number;
  partitionUnitsMax: number;
  /** Chance per unit that a live node crashes (at most a minority is down at once). */
  crashRate: number;
  downUnitsMax: number;
  /** A Ready's disk write takes up to this many units; the node keeps working meanwhile. */
  diskUnitsMax: number;
}

export const NO_FAULTS: SimFaults = {
  dropRate: 0,
  duplicateRate: 0,
  delayUnitsMax: 0,
  partitionRate: 0,
  partitionUnitsMax: 0,
  crashRate: 0,
  downUnitsMax: 0,
  diskUnitsMax: 0,
};

export interface SimClusterOptions {
  /** Voters of the initial configuration, n1..n<size>. */
  readonly size: number;
  /** Further nodes, n<size+1>..., that start outside the configuration (to be added by configuration changes). */
  readonly spares?: number;
  readonly random: Random;
  readonly faults?: SimFaults;
  readonly unitsPerTick?: number;
  /** Each node's tick period is unitsPerTick ± up to this many units. */
  readonly tickDriftUnitsMax?: number;
  /** Applied entries kept before a node compacts its log into a snapshot. */
  readonly compactEvery?: number;
  readonly raft?: Partial<Omit<RaftConfig, 'self' | 'voters' | 'learners' | 'random' | 'restore'>>;
  /** Idle leaders go quiet, and quiet followers wake once their leader's node is gone (see the header). */
  readonly quiescence?: boolean;
}

/** What survives a crash. */
interface Disk {
  hardState: HardState | null;
  snapshot: Snapshot | null;
  entries: Entry[];
}

/** The replicated state machine of the test: the key applied at each index ('' for a noop). */
interface StateMachine {
  keys: string[];
}

interface Live {
  raft: Raft;
  sm: StateMachine;
  /** The Ready whose disk write is under way, and the unit it completes in. */
  writing: { rd: Ready; doneAt: number } | null;
  /** Proposals this node made as leader, awaiting their apply: index → (term, key). */
  pending: Map<number, { term: number; key: string }>;
}

interface InFlight {
  readonly at: number;
  readonly seq: number;
  readonly msg: Message;
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

export class SimCluster {
  readonly names: readonly NodeName[];
  readonly initialConf: ConfState;
  readonly disks = new Map<NodeName, Disk>();
  readonly live = new Map<NodeName, Live>();
  private readonly downUntil = new Map<NodeName, number>();
  private readonly random: Random;
  faults: SimFaults;
  private readonly unitsPerTick: number;
  /** Tick period of each node, in units. */
  private readonly tickPeriods: ReadonlyMap<NodeName, number>;
  private readonly compactEvery: number;
  private readonly raftOptions: SimClusterOptions['raft'];
  readonly quiescence: boolean;
  private queue: InFlight[] = [];
  private seq = 0;
  now = 0;
  /** Partition: node → side; messages between sides are lost. Null when the network is whole. */
  private sides: Map<NodeName, number> | null = null;
  private partitionUntil = 0;
  /** Links cut by scripted tests, as "from>to". */
  private readonly cut = new Set<string>();
  /** Scripted tests: messages for which this returns true are lost. */
  dropIf: ((m: Message) => boolean) | null = null;
  /** Scripted tests: every delivered message, when not null. */
  trace: Message[] | null = null;

  /** The key applied at each index by whoever applied it first. */
  readonly canonical: string[] = [];
  /** confAfter[i]: the configuration the applied history implies after index i (confAfter[0] the initial one). */
  private readonly confAfter: ConfState[];
  readonly leaders = new Map<number, NodeName>();
  /** Proposals whose apply the proposing leader saw: acknowledged to a client. key → index. */
  readonly acked = new Map<string, number>();
  private nextKey = 1;
  readonly stats = {
    proposals: 0,
    crashes: 0,
    partitions: 0,
    snapshotsSent: 0,
    transfers: 0,
    elections: 0,
    confProposals: 0,
    /** Configuration changes applied, counted on every node that applied one. */
    confApplied: 0,
    /** Configuration changes committed, by type, and removals a leader proposed of itself. */
    committedAddLearner: 0,
    committedAddVoter: 0,
    committedPromote: 0,
    committedRemove: 0,
    selfRemovals: 0,
    /**
     * Leaders that went quiet, quiet followers woken because their leader's node was gone, and quiet leaders woken
     * because their live voters were no majority.
     */
    quiesced: 0,
    leaderGoneWakes: 0,
    quorumGoneWakes: 0,
  };

  constructor(options: SimClusterOptions) {
    this.random = options.random;
    this.faults = options.faults ?? NO_FAULTS;
    this.unitsPerTick = options.unitsPerTick ?? 10;
    this.compactEvery = options.compactEvery ?? Number.POSITIVE_INFINITY;
    this.raftOptions = options.raft;
    this.quiescence = options.quiescence ?? false;
    this.names = Array.from({ length: options.size + (options.spares ?? 0) }, (_, i) => nodeName(`n${i + 1}`));
    this.initialConf = confState(this.names.slice(0, options.size));
    this.confAfter = [this.initialConf];
    const drift = options.tickDriftUnitsMax ?? 0;
    this.tickPeriods = new Map(
      this.names.map((n) => [n, Math.max(1, this.unitsPerTick - drift + this.random.int(2 * drift + 1))]),
    );
    for (const n of this.names) {
      this.disks.set(n, { hardState: null, snapshot: null, entries: [] });
      this.start(n);
    }
  }

  raft(name: NodeName | string): Raft {
    const l = this.live.get(name as NodeName);
    assert(l !== undefined, `${name} is down`);
    return l.raft;
  }

  appliedKeys(name: NodeName | string): readonly string[] {
    return this.live.get(name as NodeName)?.sm.keys ?? [];
  }

  leader(): NodeName | null {
    let best: Raft | null = null;
    for (const l of this.live.values()) {
      const s = l.raft.status();
      if (s.role === 'leader' && (best === null || s.term > best.status().term)) best = l.raft;
    }
    return best?.self ?? null;
  }

  /** The configuration the applied history implies at `index` (known up to the highest index applied anywhere). */
  confAt(index: number): ConfState {
    const c = this.confAfter[index];
    assert(c !== undefined, `no configuration known at ${index}`);
    return c;
  }

  /** The configuration of the latest commit anyone applied. */
  latestConf(): ConfState {
    return this.confAfter[this.confAfter.length - 1]!;
  }

  // ---------------------------------------------------------------- scripted control

  /** Proposes a configuration change on `name` (which must be up). */
  proposeConf(name: NodeName | string, change: ConfChange): ConfChangeResult {
    const r = this.raft(name).proposeConfChange(change);
    if (r.status === 'OK') {
      this.stats.confProposals++;
      if (change.type === 'remove' && change.node === name) this.stats.selfRemovals++;
    }
    this.checkConfInFlight(this.raft(name));
    return r;
  }

  /** Ticks one node `count` times and handles its Readies (no delivery). */
  tick(name: NodeName | string, count = 1): void {
    for (let i = 0; i < count; i++) {
      this.tickNode(name as NodeName, this.live.get(name as NodeName)!);
      this.handleReady(name as NodeName);
    }
  }

  /** Ticks `name` until it starts a (pre-)campaign, then delivers until quiet. */
  campaign(name: NodeName | string): void {
    const raft = this.raft(name);
    const term = raft.status().term;
    for (let i = 0; i < 1000 && raft.status().role === 'follower' && raft.status().term === term; i++) {
      this.tick(name);
    }
    this.stabilize();
  }

  /** Proposes `key` on `name`; returns the proposal's index, or null when refused. */
  propose(name: NodeName | string, key?: string): number | null {
    const l = this.live.get(name as NodeName);
    if (l === undefined) return null;
    const k = key ?? `k${this.nextKey++}`;
    const r = l.raft.propose(encoder.encode(k));
    if (r.status !== 'OK') return null;
    this.stats.proposals++;
    l.pending.set(r.index, { term: r.term, key: k });
    return r.index;
  }

  /**
   * Delivers messages and handles Readies until nothing moves. A leader that owes its followers a commit index
   * (told on its next tick, raft.ts `commitNoticePending`) is then ticked, as time would pass, and delivery goes on.
   */
  stabilize(limit = 100_000): void {
    for (let i = 0; i < limit; i++) {
      let moved = false;
      for (const n of this.names) if (this.handleReady(n)) moved = true;
      const due = this.queue;
      this.queue = [];
      for (const f of due) {
        moved = true;
        this.deliver(f.msg);
      }
      this.check();
      if (!moved) {
        for (const l of this.live.values()) {
          if (!l.raft.commitNoticePending) continue;
          l.raft.tick();
          moved = true;
        }
      }
      if (!moved) return;
    }
    assert(false, 'cluster did not stabilize');
  }

  /** Cuts both directions between `a` and each of `others` (all other nodes when omitted). */
  isolate(a: NodeName | string, others: readonly string[] = this.names.filter((n) => n !== a)): void {
    for (const b of others) {
      this.cut.add(`${a}>${b}`);
      this.cut.add(`${b}>${a}`);
    }
  }

  cutLink(from: string, to: string): void {
    this.cut.add(`${from}>${to}`);
  }

  heal(): void {
    this.cut.clear();
    this.sides = null;
  }

  crash(name: NodeName | string): void {
    const l = this.live.get(name as NodeName);
    if (l === undefined) return;
    this.live.delete(name as NodeName);
    this.stats.crashes++;
  }

  restart(name: NodeName | string): void {
    if (!this.live.has(name as NodeName)) this.start(name as NodeName);
  }

  /** Loses every message in flight. */
  discardInFlight(): void {
    this.queue = [];
  }

  /** Ticks every live node `count` times, delivering everything after each round. */
  tickAll(count = 1): void {
    for (let i = 0; i < count; i++) {
      for (const [name, l] of this.live) this.tickNode(name, l);
      this.stabilize();
    }
  }

  /**
   * Replaces `name`'s disk with a log whose entries have the given terms (keys `i<index>t<term>`, so equal (index, term) means equal entries), the current term
   * `term` and commit index `commit`, and restarts it from there.
   */
  preload(name: NodeName | string, terms: readonly number[], term: number, commit = 0): void {
    const entries = terms.map((t, i) => makeEntry(i + 1, t, 'data', encoder.encode(`i${i + 1}t${t}`)));
    const hardState: HardState = { term: toTerm(term), vote: null, commit: logIndex(commit) };
    this.disks.set(name as NodeName, { hardState, snapshot: null, entries });
    this.live.delete(name as NodeName);
    this.start(name as NodeName);
  }

  /** Node liveness as `from` sees it: `to` is up and the network links them both ways. */
  peerLive(from: NodeName | string, to: NodeName | string): boolean {
    if (!this.live.has(to as NodeName)) return false;
    if (this.cut.has(`${from}>${to}`) || this.cut.has(`${to}>${from}`)) return false;
    return this.sides === null || this.sides.get(from as NodeName) === this.sides.get(to as NodeName);
  }

  /** Whether a majority of `voters` is live as `from` sees it (itself included). */
  private quorumLive(from: NodeName, voters: readonly NodeName[]): boolean {
    return liveQuorum(from, voters, (to) => this.peerLive(from, to));
  }

  /** One tick of a node, as a driver with quiescence gives it (see the header); a plain tick without quiescence. */
  private tickNode(name: NodeName, l: Live): void {
    if (this.quiescence) {
      const raft = l.raft;
      if (raft.isQuiet) {
        if (raft.isLeader) {
          if (this.quorumLive(name, raft.status().voters)) return;
          raft.wake();
          this.stats.quorumGoneWakes++;
        } else {
          const leader = raft.leader;
          if (leader !== null && this.peerLive(name, leader)) return;
          raft.wake();
          this.stats.leaderGoneWakes++;
        }
      } else if (
        raft.isLeader &&
        l.pending.size === 0 &&
        this.quorumLive(name, raft.status().voters) &&
        raft.quiesce()
      ) {
        this.stats.quiesced++;
        return;
      }
    }
    l.raft.tick();
  }

  // ---------------------------------------------------------------- the seeded run

  /** One unit of virtual time with faults: deliver what is due, tick, handle one Ready per node, inject faults. */
  stepUnit(proposeRate: number, confChangeRate = 0): void {
    this.now++;
    this.injectFaults();
    const due: InFlight[] = [];
    const later: InFlight[] = [];
    for (const f of this.queue) (f.at <= this.now ? due : later).push(f);
    this.queue = later;
    due.sort((a, b) => a.at - b.at || a.seq - b.seq);
    for (const f of due) this.deliver(f.msg);
    for (let i = 0; i < this.names.length; i++) {
      const n = this.names[i]!;
      // Nodes tick out of phase with one another, as real nodes do.
      const l = this.live.get(n);
      if (l !== undefined && (this.now + i * 3) % this.tickPeriods.get(n)! === 0) {
        this.tickNode(n, l);
        this.checkLeader(l.raft);
      }
    }
    if (this.random.next() < proposeRate) {
      const leader = this.leader();
      if (leader !== null) this.propose(leader);
    }
    if (this.random.next() < proposeRate / 50) this.randomTransfer();
    if (confChangeRate > 0 && this.random.next() < confChangeRate) this.randomConfChange();
    for (const n of this.names) this.handleReady(n);
    this.check();
  }

  /** Stops injecting faults, restarts every node, reconnects the network and bounds message delays. */
  healAll(): void {
    const delayUnitsMax = Math.min(this.faults.delayUnitsMax, 5);
    this.faults = { ...this.faults, dropRate: 0, duplicateRate: 0, partitionRate: 0, crashRate: 0, delayUnitsMax };
    this.heal();
    for (const n of this.names) this.restart(n);
    this.downUntil.clear();
  }

  /**
   * True when every live member of the leader's configuration applied every acknowledged proposal (a removed node
   * is told nothing more, so it is not waited for).
   */
  converged(): boolean {
    const leader = this.leader();
    const conf = leader === null ? null : this.raft(leader).status();
    for (const [name, l] of this.live) {
      if (conf !== null && !isMember(conf, name)) continue;
      for (const [key, index] of this.acked) if (l.sm.keys[index - 1] !== key) return false;
    }
    return true;
  }

  /**
   * The leader proposes one change drawn from those that apply to its configuration, keeping 3 to all nodes voters
   * (so that a healed cluster always has a quorum among nodes that restart); the change may remove the leader.
   */
  private randomConfChange(): void {
    const leader = this.leader();
    if (leader === null) return;
    const s = this.raft(leader).status();
    const outside = this.names.filter((n) => !isMember(s, n));
    const options: ConfChange[] = [];
    for (const node of outside) options.push({ type: 'add-learner', node }, { type: 'add-voter', node });
    for (const node of s.learners) options.push({ type: 'promote', node }, { type: 'remove', node });
    if (s.voters.length > 3) for (const node of s.voters) options.push({ type: 'remove', node });
    if (options.length === 0) return;
    this.proposeConf(leader, options[this.random.int(options.length)]!);
  }

  private randomTransfer(): void {
    const leader = this.leader();
    if (leader === null) return;
    const to = this.names[this.random.int(this.names.length)]!;
    if (this.raft(leader).transferLeader(to)) this.stats.transfers++;
  }

  private injectFaults(): void {
    const f = this.faults;
    if (this.sides !== null && this.now >= this.partitionUntil) this.sides = null;
    if (this.sides === null && this.random.next() < f.partitionRate) {
      this.sides = new Map(this.names.map((n) => [n, this.random.int(2)]));
      this.partitionUntil = this.now + 1 + this.random.int(f.partitionUnitsMax);
      this.stats.partitions++;
    }
    for (const [n, until] of this.downUntil) {
      if (this.now >= until) {
        this.downUntil.delete(n);
        this.restart(n);
      }
    }
    if (this.mayCrash() && this.random.next() < f.crashRate) {
      const n = this.names[this.random.int(this.names.length)]!;
      if (this.live.has(n)) this.crashFor(n);
    }
  }

  /**
   * At most a minority of all nodes is down at once, so that the cluster can always make progress once healed. With
   * spares that may still be a majority of the current voters for a while, which stalls commits but never safety.
   */
  private mayCrash(): boolean {
    return this.downUntil.size < Math.floor((this.names.length - 1) / 2);
  }

  private crashFor(name: NodeName): void {
    this.crash(name);
    this.downUntil.set(name, this.now + 1 + this.random.int(this.faults.downUnitsMax));
  }

  // ---------------------------------------------------------------- one node

  private start(name: NodeName): void {
    const disk = this.disks.get(name)!;
    const sm: StateMachine = { keys: disk.snapshot === null ? [] : decodeKeys(disk.snapshot.data) };
    const restore =
      disk.hardState === null
        ? undefined
        : { hardState: disk.hardState, snapshot: disk.snapshot, entries: disk.entries, applied: sm.keys.length };
    const raft = new Raft({
      ...this.raftOptions,
      self: name,
      voters: this.initialConf.voters,
      random: this.random.fork(`raft/${name}/${this.now}`),
      ...(restore === undefined ? {} : { restore }),
    });
    this.live.set(name, { raft, sm, pending: new Map(), writing: null });
    this.checkConf(raft);
  }

  /**
   * The driver's loop for one Ready: take it, and once its disk write completes (after `diskUnits`, during which the
   * node keeps stepping messages and ticking) persist, send, apply and advance. Returns whether anything happened.
   */
  private handleReady(name: NodeName): boolean {
    const l = this.live.get(name);
    if (l === undefined) return false;
    if (l.writing === null) {
      if (!l.raft.hasReady()) return false;
      const units = this.faults.diskUnitsMax > 0 ? this.random.int(this.faults.diskUnitsMax + 1) : 0;
      const rd = l.raft.ready();
      for (const m of rd.leaderMessages) this.send(m);
      l.writing = { rd, doneAt: this.now + units };
    }
    if (l.writing.doneAt > this.now) return false;
    const rd = l.writing.rd;
    l.writing = null;
    this.persist(name, rd);
    if (this.random.next() < this.faults.crashRate * 5 && this.mayCrash()) {
      // Durable but never sent: the crash window between fsync and the network.
      this.crashFor(name);
      return true;
    }
    for (const m of rd.messages) this.send(m);
    if (rd.snapshot !== null) {
      l.sm.keys = decodeKeys(rd.snapshot.data);
      this.checkPrefix(name, l.sm.keys);
    }
    for (const e of rd.committedEntries) this.apply(name, l, e);
    l.raft.advance(rd);
    this.checkConf(l.raft);
    this.checkConfInFlight(l.raft);
    const s = l.raft.status();
    if (s.applied - s.snapshotIndex >= this.compactEvery && s.applied <= l.raft.log.stableIndex()) {
      this.compact(name, l);
    }
    return true;
  }

  private persist(name: NodeName, rd: Ready): void {
    const disk = this.disks.get(name)!;
    if (rd.hardState !== null) disk.hardState = rd.hardState;
    if (rd.snapshot !== null) {
      disk.snapshot = rd.snapshot;
      disk.entries = [];
    }
    const first = rd.entries[0];
    if (first !== undefined) {
      const base = disk.snapshot?.index ?? 0;
      disk.entries.length = Math.min(disk.entries.length, first.index - base - 1);
      assert(disk.entries.length === first.index - base - 1, `${name}: gap in the persisted log at ${first.index}`);
      disk.entries.push(...rd.entries);
    }
  }

  private compact(name: NodeName, l: Live): void {
    const applied = l.raft.status().applied;
    const snap = l.raft.compact(applied, encodeKeys(l.sm.keys.slice(0, applied)));
    if (snap === null) return;
    const disk = this.disks.get(name)!;
    disk.snapshot = snap;
    disk.entries = disk.entries.filter((e) => e.index > snap.index);
  }

  private apply(name: NodeName, l: Live, e: Entry): void {
    assert(e.index === l.sm.keys.length + 1, `${name} applies ${e.index} after ${l.sm.keys.length}`);
    const key = e.kind === 'noop' ? '' : decoder.decode(e.data);
    l.sm.keys.push(key);
    this.learnCanonical(e.index, key, `${name} applied`);
    if (e.kind === 'conf') this.stats.confApplied++;
    const p = l.pending.get(e.index);
    if (p !== undefined) {
      l.pending.delete(e.index);
      if (p.term === e.term) {
        assert(p.key === key, `${name} proposed '${p.key}' at ${e.index} in term ${e.term} but applied '${key}'`);
        this.acked.set(key, e.index);
      }
    }
  }

  private checkPrefix(name: NodeName, keys: readonly string[]): void {
    for (let i = 0; i < keys.length; i++) this.learnCanonical(i + 1, keys[i]!, `${name} restored`);
  }

  /** Records (or checks against the record) the key applied at `index`, and the configuration after it. */
  private learnCanonical(index: number, key: string, who: string): void {
    const known = this.canonical[index - 1];
    if (known !== undefined) {
      assert(known === key, `${who} '${key}' at ${index} where another node applied '${known}'`);
      return;
    }
    assert(this.canonical.length === index - 1, `${who} ${index} before anything was applied at ${index - 1}`);
    this.canonical.push(key);
    const before = this.confAfter[index - 1]!;
    const change = key.startsWith('{') ? decodeConfChange(encoder.encode(key)) : null;
    if (change === null) {
      this.confAfter.push(before);
      return;
    }
    const next = applyConfChange(before, change);
    assert(!(next instanceof Error), `committed change '${key}' at ${index} does not apply to the one before it`);
    const after = next as ConfState;
    const counters = {
      'add-learner': 'committedAddLearner',
      'add-voter': 'committedAddVoter',
      promote: 'committedPromote',
      remove: 'committedRemove',
    } as const;
    this.stats[counters[change.type]]++;
    // Single-step: the voters before and after differ in at most one node.
    const added = after.voters.filter((v) => !before.voters.includes(v)).length;
    const removed = before.voters.filter((v) => !after.voters.includes(v)).length;
    assert(added + removed <= 1, `committed change '${key}' at ${index} moves ${added + removed} voters`);
    this.confAfter.push(after);
  }

  // ---------------------------------------------------------------- network

  private send(m: Message): void {
    if (m.kind === 'Snapshot') this.stats.snapshotsSent++;
    const f = this.faults;
    if (this.random.next() < f.dropRate) return;
    const copies = this.random.next() < f.duplicateRate ? 2 : 1;
    for (let i = 0; i < copies; i++) {
      const delay = f.delayUnitsMax > 0 ? 1 + this.random.int(f.delayUnitsMax) : 0;
      this.queue.push({ at: this.now + delay, seq: this.seq++, msg: m });
    }
  }

  private deliver(m: Message): void {
    if (this.cut.has(`${m.from}>${m.to}`)) return;
    if (this.dropIf?.(m)) return;
    if (this.sides !== null && this.sides.get(m.from) !== this.sides.get(m.to)) return;
    const l = this.live.get(m.to);
    if (l === undefined) return;
    this.trace?.push(m);
    l.raft.step(m);
    this.checkLeader(l.raft);
  }

  // ---------------------------------------------------------------- invariants

  private check(): void {
    for (const l of this.live.values()) this.checkLeader(l.raft);
  }

  /**
   * A node's configuration is the one its own log implies at its applied index, and the one the applied history
   * implies there (rule 1 of raft.ts).
   */
  private checkConf(raft: Raft): void {
    const s = raft.status();
    const log = raft.log;
    if (log.pendingSnapshot === null && s.applied >= log.snapshotIndex()) {
      assert(sameConf(s, log.confAt(s.applied)), `${s.self}: configuration disagrees with its log at ${s.applied}`);
    }
    if (s.applied < this.confAfter.length) {
      const want = this.confAt(s.applied);
      assert(
        sameConf(s, want),
        `${s.self}: configuration ${JSON.stringify([s.voters, s.learners])} at ${s.applied}, the history says ` +
          JSON.stringify([want.voters, want.learners]),
      );
    }
  }

  /** A leader holds at most one configuration change it has not applied (rule 2 of raft.ts). */
  private checkConfInFlight(raft: Raft): void {
    const s = raft.status();
    if (s.role !== 'leader') return;
    const log = raft.log;
    let inFlight = 0;
    for (let i = Math.max(s.applied, log.snapshotIndex()) + 1; i <= log.lastIndex(); i++) {
      if (log.entry(i).kind !== 'conf') continue;
      inFlight++;
      assert(i <= s.pendingConfIndex, `leader ${s.self} has a change at ${i} above its pending ${s.pendingConfIndex}`);
    }
    assert(inFlight <= 1, `leader ${s.self} has ${inFlight} configuration changes in flight`);
  }

  /** Called after every input to a node, so that even a leadership lasting one message is seen. */
  private checkLeader(raft: Raft): void {
    this.checkConfInFlight(raft);
    const s = raft.status();
    if (s.role !== 'leader') return;
    const known = this.leaders.get(s.term);
    if (known === undefined) {
      this.leaders.set(s.term, s.self);
      this.stats.elections++;
      this.checkLeaderCompleteness(raft);
    } else {
      assert(known === s.self, `two leaders in term ${s.term}: ${known} and ${s.self}`);
    }
  }

  /**
   * Log matching: whenever two live logs hold an entry with the same index and term, they hold the same entries up
   * to there (compared above both snapshots).
   */
  checkLogMatching(): void {
    const logs = [...this.live.values()].map((l) => l.raft.log);
    for (let x = 0; x < logs.length; x++) {
      for (let y = x + 1; y < logs.length; y++) {
        const a = logs[x]!;
        const b = logs[y]!;
        const lo = Math.max(a.snapshotIndex(), b.snapshotIndex()) + 1;
        let i = Math.min(a.lastIndex(), b.lastIndex());
        while (i >= lo && a.term(i) !== b.term(i)) i--;
        for (let j = lo; j <= i; j++) {
          const ea = a.entry(j);
          const eb = b.entry(j);
          const same =
            ea.term === eb.term && ea.kind === eb.kind && decoder.decode(ea.data) === decoder.decode(eb.data);
          assert(same, `log matching violated at ${j} (logs agree at ${i})`);
        }
      }
    }
  }

  /** A new leader's log holds every entry applied anywhere. */
  private checkLeaderCompleteness(raft: Raft): void {
    const log = raft.log;
    for (let i = log.snapshotIndex() + 1; i <= this.canonical.length; i++) {
      assert(i <= log.lastIndex(), `leader ${raft.self} lacks applied entry ${i}`);
      const e = log.entry(i);
      const key = e.kind === 'noop' ? '' : decoder.decode(e.data);
      assert(
        key === this.canonical[i - 1],
        `leader ${raft.self} holds '${key}' at ${i}, applied elsewhere as '${this.canonical[i - 1]}'`,
      );
    }
    const snapKeys = decodeKeys(log.snapshot().data);
    for (let i = 0; i < snapKeys.length; i++) assert(snapKeys[i] === this.canonical[i], 'leader snapshot diverges');
  }
}

function encodeKeys(keys: readonly string[]): Uint8Array {
  return encoder.encode(JSON.stringify(keys));
}

function decodeKeys(data: Uint8Array): string[] {
  return data.length === 0 ? [] : (JSON.parse(decoder.decode(data)) as string[]);
}

export interface SimRunResult {
  readonly size: number;
  readonly acked: number;
  readonly unitsToConverge: number;
  readonly stats: SimCluster['stats'];
}

export interface SimRunOptions {
  readonly size: number;
  /** Adds two spare nodes and random configuration changes to the faults. */
  readonly membership?: boolean;
  /** Units of the safety phase, with faults and proposals. */
  readonly faultUnits?: number;
  /** Units the healed cluster gets to apply every acknowledged proposal everywhere. */
  readonly convergeUnitsMax?: number;
  /** Idle leaders go quiet; proposals then come in busy stretches between idle ones (`QUIET_STRETCH_UNITS`). */
  readonly quiescence?: boolean;
}

/** With quiescence, the safety phase alternates busy and idle stretches this long. */
const QUIET_STRETCH_UNITS = 300;

/**
 * One seeded run: a safety phase under faults drawn from `random`, then a liveness phase in which the network heals,
 * every node restarts and the cluster must converge within `convergeUnitsMax`. Throws on any violation.
 */
export function runRaftSimulation(random: Random, options: SimRunOptions): SimRunResult {
  const params = random.fork('params');
  const faults: SimFaults = {
    dropRate: params.next() * 0.2,
    duplicateRate: params.next() * 0.1,
    delayUnitsMax: 1 + params.int(30),
    partitionRate: params.next() * 0.004,
    partitionUnitsMax: 50 + params.int(500),
    crashRate: params.next() * 0.003,
    downUnitsMax: 50 + params.int(500),
    diskUnitsMax: [0, 1, 4][params.int(3)]!,
  };
  const compactEvery = [5, 20, 100, Number.POSITIVE_INFINITY][params.int(4)]!;
  const proposeRate = 0.05 + params.next() * 0.4;
  // Small batches and pipelines make partial appends, probing and stale answers common.
  const raft = {
    appendEntriesMax: [1, 3, 64][params.int(3)]!,
    inflightMax: [1, 4, 256][params.int(3)]!,
    electionTicks: 5 + params.int(10),
    // Mostly the production setting; sometimes without pre-vote or check-quorum, to exercise the plain paths.
    preVote: params.next() < 0.8,
    checkQuorum: params.next() < 0.8,
  };
  const tickDriftUnitsMax = params.int(3);
  // Drawn last, so that a run without membership changes is the same as before they existed.
  const confChangeRate = options.membership === true ? 0.002 + params.next() * 0.02 : 0;
  // Applying a few entries per Ready leaves committed changes unapplied for longer (rule 3 of raft.ts).
  const applyEntriesMax = options.membership === true ? [1, 2, 1024][params.int(3)]! : undefined;
  const cluster = new SimCluster({
    size: options.size,
    spares: options.membership === true ? 2 : 0,
    random: random.fork('cluster'),
    faults,
    compactEvery,
    raft: applyEntriesMax === undefined ? raft : { ...raft, applyEntriesMax },
    tickDriftUnitsMax,
    quiescence: options.quiescence === true,
  });
  const faultUnits = options.faultUnits ?? 3000;
  for (let u = 0; u < faultUnits; u++) {
    const idle = options.quiescence === true && Math.floor(u / QUIET_STRETCH_UNITS) % 2 === 1;
    cluster.stepUnit(idle ? 0 : proposeRate, idle ? 0 : confChangeRate);
    if (u % 100 === 0) cluster.checkLogMatching();
  }
  cluster.healAll();
  // Generous: a backlog of hundreds of entries may have to travel one entry per round trip (appendEntriesMax 1), and
  // with membership changes a learner added late may need the whole uncompacted log that way.
  const convergeUnitsMax = options.convergeUnitsMax ?? (options.membership === true ? 15_000 : 6000);
  let units = 0;
  while (!(cluster.converged() && cluster.leader() !== null)) {
    assert(
      ++units <= convergeUnitsMax,
      `no convergence within ${convergeUnitsMax} units after healing (acked ${cluster.acked.size})`,
    );
    cluster.stepUnit(0);
  }
  cluster.checkLogMatching();
  return { size: options.size, acked: cluster.acked.size, unitsToConverge: units, stats: cluster.stats };
}
