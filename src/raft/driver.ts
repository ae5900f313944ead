/**
 * Runs the Raft groups of one node: the thin IO shell around the pure cores. It ticks every core on one injected
 * timer, feeds it the messages of a narrow transport, and for each Ready, in order: sends a leader's replication
 * messages (so that its own disk write overlaps the followers'), persists the Ready to LogStorage, sends the other
 * messages (votes and answers, which promise what is now durable), restores a received snapshot and applies
 * committed entries to the state machine, then advances the core. The same code runs on real timers and TCP, or in the simulator.
 *
 * A follower that accepted several Appends of a group in one Ready answers the leader once, with the largest index
 * (`withoutSubsumedAccepts`). Proposals made in one event-loop turn go into one batch (one Append per follower). A proposal resolves when its
 * entry is committed *and applied on this node*; it rejects with NOT_LEADER (and the known leader) when this node
 * cannot propose or another leader's entry was applied in its place, with TIMEOUT when a snapshot covered it, so
 * that its fate is unknown here, and with EntryLeftLogError (TIMEOUT) when this node's log lost it while other logs
 * may still hold it (its fate is decided only once this node applies an entry at its index or above). Invariants: at
 * most one Ready per group is being handled at a time; applies happen in log order; pending proposals are bounded by
 * `raftPendingProposalsMax`.
 *
 * Quiescence (raft.ts): with `quiescence` options, a leader group the owner calls idle, whose driver has no
 * proposal pending and a majority of whose voters are live goes quiet instead of ticking; quiet groups are not
 * ticked, and while every group is quiet the timer sleeps from one quiet check to the next. Every `quietCheckTicks`
 * ticks each quiet follower asks node liveness about its leader's node and wakes once it is gone (DESIGN rule 17:
 * connection down or heartbeats unanswered for the liveness timeout), so it campaigns; while that node lives it stays
 * quiet. A quiet leader wakes once its live voters are no majority, so that check-quorum steps it down if it is cut off.
 * `pokeLeader` wakes a group here and asks its leader's node for attention; that node's `onWakeRequest` hears it.
 *
 * Commit latency: with a clock, each proposal carries the monotonic time of its `propose` call, and when it resolves
 * (committed in its own term and applied here) the elapsed time goes into one fixed-bucket histogram for all groups.
 * Nothing is kept per proposal beyond the pending record it already has, so memory stays bounded by the same limit.
 */
import { ownedCopy } from '../core/bytes.js';
import { BasaltError } from '../core/errors.js';
import { Histogram, type HistogramSnapshot, LATENCY_BUCKETS_MS } from '../core/histogram.js';
import { type LogIndex, logIndex, type NodeName, type PartitionId, type Term, term as toTerm } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import type { ConfChange } from './conf-change.js';
import type { LogStorage } from './log-storage.js';
import { liveQuorum } from './progress.js';
import { Raft, type RaftConfig } from './raft.js';
import type { AppendRespMessage, Entry, HardState, Message, Ready, Role, Snapshot, Status } from './types.js';
import { isRaftEnvelope, type RaftEnvelope } from './wire.js';

/**
 * The entry of a proposal left this node's log before it was applied here (TIMEOUT: its outcome is unknown), while
 * other logs may still hold it, so a later leader may yet commit it at `index`. It can no longer apply once this node
 * applied any entry at `index` or above: the entry there is then decided, and this node applied it if it was this one.
 * A proposer that keeps something for the proposal's sake until it can no longer apply (a timestamp in flight for
 * safe time, rule 9) keeps it until then, though it answers its caller now.
 */
export class EntryLeftLogError extends BasaltError {
  override readonly name: string = 'EntryLeftLogError';
  /** The log index the entry was proposed at, and the term it was proposed in. */
  readonly index: LogIndex;
  readonly term: Term;

  constructor(index: LogIndex, term: Term, details: Readonly<Record<string, unknown>>) {
    super('TIMEOUT', 'outcome unknown: the entry left this log and may still commit elsewhere', details);
    this.index = index;
    this.term = term;
  }
}

/** The transport as Raft needs it; the node layer adapts the messenger (or the simulated network) to it. */
export interface RaftTransport {
  /** Fire and forget: Raft retries on its own, so a lost message is only a delay. */
  send(to: NodeName, envelope: RaftEnvelope): void;
  /** Installs the receiver of envelopes from peers (anything: it is validated here). */
  setHandler(handler: (from: NodeName, envelope: unknown) => void): void;
}

/** The replicated state machine of every group on this node. */
export interface RaftStateMachine {
  /** The index of the last entry applied to `group` (0 for a new group); read once when the group starts. */
  appliedIndex(group: PartitionId): number;
  /**
   * Applies committed entries in log order; noop and conf (configuration change) entries are included so the applied
   * index is always known. Raft itself acts on a conf entry once it is applied.
   */
  apply(group: PartitionId, entries: readonly Entry[]): void | Promise<void>;
  /** The state of `group` after every entry applied so far, to compact the log. */
  snapshot(group: PartitionId): Uint8Array | Promise<Uint8Array>;
  /** Replaces the state of `group` with a snapshot received from the leader. */
  restore(group: PartitionId, snapshot: Snapshot): void | Promise<void>;
}

export interface LeaderChange {
  readonly group: PartitionId;
  readonly leader: NodeName | null;
  readonly term: Term;
  readonly role: Role;
}

/** Lets idle groups go quiet (raft.ts "Quiescence"). */
export interface QuiescenceOptions {
  /** Whether `name`'s node is live (node liveness): a quiet follower wakes once its leader's is not. */
  readonly peerLive: (name: NodeName) => boolean;
  /** Whether the owner of `group` has nothing for it to do: asked of a leader group before each of its ticks. */
  readonly idle: (group: PartitionId) => boolean;
  /** A follower of `group` on another node asked this node for attention (a read there waits for safe time). */
  readonly onWakeRequest?: (group: PartitionId) => void;
  /** Quiet followers check their leader's liveness every this many ticks (default: the election timeout's). */
  readonly checkTicks?: number;
}

export type RaftCoreOptions = Partial<Omit<RaftConfig, 'self' | 'voters' | 'learners' | 'random' | 'restore'>>;

export interface RaftDriverOptions {
  readonly self: NodeName;
  readonly transport: RaftTransport;
  readonly timers: Timers;
  readonly random: Random;
  readonly storage: LogStorage;
  readonly stateMachine: RaftStateMachine;
  readonly tickIntervalMs?: number;
  readonly raft?: RaftCoreOptions;
  /** Applied entries kept in the log before it is compacted into a snapshot. */
  readonly compactEntriesMin?: number;
  readonly onLeaderChange?: (change: LeaderChange) => void;
  /** A group whose storage or state machine failed stops; its pending proposals are rejected. */
  readonly onGroupFailed?: (group: PartitionId, error: unknown) => void;
  /** Measures commit latency (monotonicMs); without it no latency is recorded. */
  readonly clock?: Clock;
  /** Without it no group ever goes quiet. */
  readonly quiescence?: QuiescenceOptions;
}

export interface Committed {
  readonly index: LogIndex;
  readonly term: Term;
}

interface Pending {
  readonly term: number;
  /** Monotonic time of the `propose` call (0 without a clock). */
  readonly proposedAtMs: number;
  readonly resolve: (c: Committed) => void;
  readonly reject: (e: BasaltError) => void;
}

interface Queued {
  readonly data: Uint8Array;
  readonly proposedAtMs: number;
  readonly resolve: (c: Committed) => void;
  readonly reject: (e: BasaltError) => void;
}

interface Group {
  readonly id: PartitionId;
  readonly raft: Raft;
  /** Proposals waiting for their apply, by log index. */
  readonly pending: Map<number, Pending>;
  /** Proposals of this turn, not yet handed to the core. */
  queued: Queued[];
  /** The hard state as last written to LogStorage (its commit index may lag behind). */
  durableHardState: HardState | null;
  scheduled: boolean;
  busy: boolean;
  failed: boolean;
  /** Called once when the in-progress Ready loop ends (removeGroup and stop wait for it). */
  idleWaiters: (() => void)[];
  lastLeader: NodeName | null;
  lastTerm: number;
  lastRole: Role;
}

export class RaftDriver {
  private readonly self: NodeName;
  private readonly transport: RaftTransport;
  private readonly timers: Timers;
  private readonly random: Random;
  private readonly storage: LogStorage;
  private readonly sm: RaftStateMachine;
  private readonly tickIntervalMs: number;
  private readonly coreOptions: RaftCoreOptions;
  private readonly compactEntriesMin: number;
  private readonly onLeaderChange: ((change: LeaderChange) => void) | undefined;
  private readonly onGroupFailed: ((group: PartitionId, error: unknown) => void) | undefined;
  private readonly clock: Clock | undefined;
  private readonly commitLatency = new Histogram(LATENCY_BUCKETS_MS);
  private readonly groups = new Map<PartitionId, Group>();
  private pendingCount = 0;
  private quiescence: QuiescenceOptions | undefined;
  private readonly quietCheckTicks: number;
  private ticks = 0;
  private timer: TimerHandle | null = null;
  /** The ticks the armed timer stands for: 1, or more while every group is quiet (`armTimer`). */
  private timerTicks = 1;
  private stopped = false;

  constructor(options: RaftDriverOptions) {
    this.self = options.self;
    this.transport = options.transport;
    this.timers = options.timers;
    this.random = options.random;
    this.storage = options.storage;
    this.sm = options.stateMachine;
    this.tickIntervalMs = options.tickIntervalMs ?? LIMITS.raftTickIntervalMs;
    this.coreOptions = options.raft ?? {};
    this.compactEntriesMin = options.compactEntriesMin ?? LIMITS.raftCompactEntriesMin;
    this.onLeaderChange = options.onLeaderChange;
    this.onGroupFailed = options.onGroupFailed;
    this.clock = options.clock;
    this.quiescence = options.quiescence;
    this.quietCheckTicks = options.quiescence?.checkTicks ?? options.raft?.electionTicks ?? LIMITS.raftElectionTicks;
    this.transport.setHandler((from, envelope) => this.receive(from, envelope));
    this.armTimer();
  }

  /**
   * Starts (or restarts, from what LogStorage holds) the group `id`, whose initial configuration is `voters` (the
   * same on every replica, one added later included; the current configuration comes from the stored snapshot and
   * log, see `status`). When the state machine is behind the stored snapshot it is restored from it first.
   * With `preferredLeader`, a fresh replica on any other node waits one election timeout longer before its first
   * campaign, so that a new group's first leader is its preferred one when that node is up (placement spreads
   * preferred leaders; without this the first leaders fall where the random timeouts put them, and one node may lead
   * most groups of a new table).
   */
  async addGroup(
    id: PartitionId,
    voters: readonly NodeName[],
    options: { readonly preferredLeader?: NodeName } = {},
  ): Promise<void> {
    if (this.groups.has(id)) throw new BasaltError('ALREADY_EXISTS', `raft group ${id} already runs here`);
    const stored = this.storage.load(id);
    let applied = this.sm.appliedIndex(id);
    if (stored.snapshot !== null && applied < stored.snapshot.index) {
      await this.sm.restore(id, stored.snapshot);
      applied = stored.snapshot.index;
    }
    const fresh = stored.hardState === null && stored.snapshot === null && stored.entries.length === 0;
    const defer = fresh && options.preferredLeader !== undefined && options.preferredLeader !== this.self;
    const raft = new Raft({
      ...this.coreOptions,
      ...(defer && { firstElectionDelayTicks: this.coreOptions.electionTicks ?? LIMITS.raftElectionTicks }),
      self: this.self,
      voters,
      random: this.random.fork(`raft/${id}`),
      ...(fresh
        ? {}
        : {
            restore: {
              hardState: stored.hardState ?? {
                term: stored.snapshot?.term ?? (0 as Term),
                vote: null,
                commit: stored.snapshot?.index ?? (0 as LogIndex),
              },
              snapshot: stored.snapshot,
              entries: stored.entries,
              applied,
            },
          }),
    });
    const s = raft.status();
    this.groups.set(id, {
      id,
      raft,
      pending: new Map(),
      queued: [],
      durableHardState: stored.hardState,
      scheduled: false,
      busy: false,
      failed: false,
      idleWaiters: [],
      lastLeader: s.leader,
      lastTerm: s.term,
      lastRole: s.role,
    });
    this.schedule(this.groups.get(id)!);
  }

  /** Whether this node's log storage holds state of `group` (it ran here before, and was not removed). */
  hasStoredGroup(id: PartitionId): boolean {
    return this.storage.groups().includes(id);
  }

  /**
   * Replicates `data` in `group`; resolves once it is committed and applied here. The log keeps an exact-size copy
   * of `data` (until compaction, up to `compactEntriesMin` applied entries per group): bytes fresh from the codec are
   * a view of one of msgpackr's shared pack buffers, and a retained view would keep that whole buffer, and with it
   * every message packed into it, alive. (Entries a follower receives are decoded as copies already.)
   */
  propose(group: PartitionId, data: Uint8Array): Promise<Committed> {
    const g = this.groups.get(group);
    if (g === undefined || g.failed || this.stopped) {
      return Promise.reject(new BasaltError('NOT_FOUND', `raft group ${group} does not run here`, { group }));
    }
    const s = g.raft.status();
    if (s.role !== 'leader') return Promise.reject(notLeader(group, s));
    if (this.pendingCount + g.queued.length >= LIMITS.raftPendingProposalsMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many Raft proposals in flight', { group }));
    }
    const proposedAtMs = this.clock?.monotonicMs() ?? 0;
    return new Promise((resolve, reject) => {
      g.queued.push({ data: ownedCopy(data), proposedAtMs, resolve, reject });
      this.schedule(g);
    });
  }

  /**
   * Proposes a configuration change of `group`, which this node must lead; resolves once the change is committed and
   * applied here (then it is in effect on this node). Rejects at once with the core's refusal (CONF_CHANGE_IN_FLIGHT,
   * ALREADY_EXISTS, NOT_FOUND, INVALID_ARGUMENT), NOT_LEADER or OVERLOADED; later as `propose` does.
   */
  proposeConfChange(group: PartitionId, change: ConfChange): Promise<Committed> {
    const g = this.groups.get(group);
    if (g === undefined || g.failed || this.stopped) {
      return Promise.reject(new BasaltError('NOT_FOUND', `raft group ${group} does not run here`, { group }));
    }
    if (this.pendingCount >= LIMITS.raftPendingProposalsMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many Raft proposals in flight', { group }));
    }
    const r = g.raft.proposeConfChange(change);
    if (r.status === 'NOT_LEADER') return Promise.reject(notLeader(group, g.raft.status(), r.leader));
    if (r.status === 'OVERLOADED') {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many uncommitted Raft entries', { group }));
    }
    if (r.status === 'REFUSED') return Promise.reject(r.error);
    const proposedAtMs = this.clock?.monotonicMs() ?? 0;
    return new Promise((resolve, reject) => {
      this.rejectLeftLog(g, r.index);
      g.pending.set(r.index, { term: r.term, proposedAtMs, resolve, reject });
      this.pendingCount++;
      this.schedule(g);
    });
  }

  /**
   * Stops running group `id` here (its table was dropped or its replica moved away): it no longer ticks, receives or
   * persists, and its pending proposals reject with NOT_FOUND. Resolves once no Ready of the group is being handled,
   * so the caller may then drop its stored state (`LogStorage.removeGroup`). False if the group did not run here.
   */
  async removeGroup(id: PartitionId): Promise<boolean> {
    const g = this.groups.get(id);
    if (g === undefined) return false;
    this.groups.delete(id);
    g.failed = true;
    this.failPending(g, new BasaltError('NOT_FOUND', `raft group ${id} was removed`, { group: id }));
    await this.idle(g);
    return true;
  }

  /** Asks the leader of `group` (this node) to hand leadership to `to`. */
  transferLeader(group: PartitionId, to: NodeName): boolean {
    const g = this.groups.get(group);
    if (g === undefined || g.failed) return false;
    const started = g.raft.transferLeader(to);
    this.schedule(g);
    return started;
  }

  /**
   * Wakes `group` here and, on a follower, asks the leader's node for attention (its `onWakeRequest`): false when this
   * node follows no known leader of it.
   */
  pokeLeader(group: PartitionId): boolean {
    const g = this.groups.get(group);
    if (g === undefined || g.failed || this.stopped) return false;
    const poked = g.raft.pokeLeader();
    this.schedule(g);
    return poked;
  }

  /**
   * Installs (or, with undefined, removes) what lets idle groups go quiet (the owner of the groups may come after the
   * driver). Removing it wakes every quiet group.
   */
  quiesceWith(options: QuiescenceOptions | undefined): void {
    this.quiescence = options;
    if (options !== undefined) return;
    for (const g of this.groups.values()) {
      if (!g.raft.isQuiet) continue;
      g.raft.wake();
      this.schedule(g);
    }
  }

  /** Whether `group` is quiet here (false when it does not run here). */
  isQuiet(group: PartitionId): boolean {
    return this.groups.get(group)?.raft.isQuiet ?? false;
  }

  status(group: PartitionId): Status | undefined {
    return this.groups.get(group)?.raft.status();
  }

  /** Leader only: the highest log index `node` is known to hold in `group` (undefined otherwise). */
  matchOf(group: PartitionId, node: NodeName): number | undefined {
    const g = this.groups.get(group);
    return g === undefined || g.raft.status().role !== 'leader' ? undefined : g.raft.progressOf(node)?.match;
  }

  groupIds(): PartitionId[] {
    return [...this.groups.keys()];
  }

  /** Milliseconds from `propose` to committed and applied here, of every proposal of this node that resolved. */
  commitLatencyMs(): HistogramSnapshot {
    return this.commitLatency.snapshot();
  }

  /**
   * Stops ticking and receiving; pending proposals reject with NODE_UNAVAILABLE. Resolves once no Ready is being
   * handled any more, so that the caller may then close the storage (which is left to its owner).
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) this.timers.clearTimer(this.timer);
    this.timer = null;
    // A pending entry may be in followers' logs and commit under the next leader: its outcome is unknown.
    const stopped = new BasaltError('NODE_UNAVAILABLE', 'raft stopped with the proposal pending; it may still commit');
    for (const g of this.groups.values()) this.failPending(g, stopped);
    await Promise.all([...this.groups.values()].map((g) => this.idle(g)));
  }

  private idle(g: Group): Promise<void> {
    if (!g.busy) return Promise.resolve();
    return new Promise((resolve) => g.idleWaiters.push(resolve));
  }

  // ---------------------------------------------------------------- inputs

  /**
   * Arms the tick timer: one tick ahead while any group is awake; while every group is quiet (or there is none), up to
   * the next quiet check, since ticks do nothing to a quiet group (an idle node's process then wakes a few times a
   * second, not twenty). A group that wakes meanwhile re-arms it one tick ahead (`awoke`).
   */
  private armTimer(): void {
    const sleeping = this.everyGroupQuiet();
    const ticks = sleeping ? this.quietCheckTicks - (this.ticks % this.quietCheckTicks) : 1;
    this.timerTicks = ticks;
    this.timer = this.timers.setTimer(() => {
      this.timer = null;
      if (this.stopped) return;
      this.ticks += ticks;
      const checkQuiet = this.ticks % this.quietCheckTicks === 0;
      for (const g of this.groups.values()) {
        if (g.failed) continue;
        if (g.raft.isQuiet) {
          if (checkQuiet) this.checkQuiet(g);
          continue;
        }
        if (this.mayQuiesce(g) && g.raft.quiesce()) {
          this.schedule(g);
          continue;
        }
        g.raft.tick();
        this.schedule(g);
      }
      this.armTimer();
    }, ticks * this.tickIntervalMs);
  }

  private everyGroupQuiet(): boolean {
    for (const g of this.groups.values()) if (!g.failed && !g.raft.isQuiet) return false;
    return true;
  }

  /** `g` is awake: a timer armed for a quiet node's long sleep is cut short, so that `g` ticks from the next tick. */
  private awoke(g: Group): void {
    if (this.timerTicks === 1 || this.timer === null || this.stopped || g.failed || g.raft.isQuiet) return;
    this.timers.clearTimer(this.timer);
    this.timer = null;
    this.armTimer();
  }

  /**
   * A leader group with nothing pending here whose owner calls it idle, and a live majority of its voters (a quiet
   * leader does not notice that it lost its quorum; it wakes, see `checkQuiet`); the core checks the rest.
   */
  private mayQuiesce(g: Group): boolean {
    const q = this.quiescence;
    if (q === undefined || !g.raft.isLeader || g.busy || g.pending.size > 0 || g.queued.length > 0) return false;
    return q.idle(g.id) && this.quorumLive(g, q);
  }

  private quorumLive(g: Group, q: QuiescenceOptions): boolean {
    return liveQuorum(this.self, g.raft.status().voters, q.peerLive);
  }

  /**
   * A quiet follower whose leader's node is gone wakes, so that it campaigns; a quiet leader without a live majority
   * of its voters wakes, so that check-quorum steps it down if it is cut off (rule 17 decides "gone" and "live").
   */
  private checkQuiet(g: Group): void {
    const q = this.quiescence;
    if (g.raft.isLeader) {
      if (q !== undefined && this.quorumLive(g, q)) return;
    } else {
      const leader = g.raft.leader;
      if (q !== undefined && leader !== null && q.peerLive(leader)) return;
    }
    g.raft.wake();
    this.schedule(g);
  }

  private receive(from: NodeName, envelope: unknown): void {
    if (this.stopped || !isRaftEnvelope(envelope)) return;
    const m = envelope.message;
    // A message must come from the peer it names, to this node.
    if (m.from !== from || m.to !== this.self) return;
    const g = this.groups.get(envelope.group);
    if (g === undefined || g.failed) return;
    g.raft.step(m);
    this.schedule(g);
    if (m.kind === 'HeartbeatResp' && m.wake === true) this.quiescence?.onWakeRequest?.(g.id);
  }

  // ---------------------------------------------------------------- the Ready loop

  private schedule(g: Group): void {
    if (g.scheduled || this.stopped) return;
    g.scheduled = true;
    // Everything that arrives in this turn (messages, proposals, ticks) is handled by one Ready.
    queueMicrotask(() => {
      g.scheduled = false;
      void this.process(g);
      this.awoke(g);
    });
  }

  private async process(g: Group): Promise<void> {
    if (g.busy || g.failed || this.stopped) return;
    g.busy = true;
    try {
      this.flushProposals(g);
      while (!this.stopped && !g.failed && g.raft.hasReady()) {
        const rd = g.raft.ready();
        await this.handleReady(g, rd);
        if (this.stopped || g.failed) return;
        g.raft.advance(rd);
        this.notifyLeader(g);
        await this.maybeCompact(g);
        this.flushProposals(g);
      }
      this.notifyLeader(g);
    } catch (error) {
      g.failed = true;
      this.failPending(g, new BasaltError('INTERNAL', `raft group ${g.id} failed`, { group: g.id }, { cause: error }));
      // After stop() (or removeGroup) the owner may already have closed the storage: that failure is expected.
      if (!this.stopped && this.groups.get(g.id) === g) this.onGroupFailed?.(g.id, error);
    } finally {
      g.busy = false;
      for (const wake of g.idleWaiters.splice(0)) wake();
    }
  }

  private flushProposals(g: Group): void {
    if (g.queued.length === 0) return;
    const batch = g.queued;
    g.queued = [];
    const r = g.raft.proposeBatch(batch.map((q) => q.data));
    if (r.status !== 'OK') {
      const error =
        r.status === 'NOT_LEADER'
          ? notLeader(g.id, g.raft.status(), r.leader)
          : new BasaltError('OVERLOADED', 'too many uncommitted Raft entries', { group: g.id });
      for (const q of batch) q.reject(error);
      return;
    }
    batch.forEach((q, i) => {
      this.rejectLeftLog(g, r.index + i);
      g.pending.set(r.index + i, { term: r.term, proposedAtMs: q.proposedAtMs, resolve: q.resolve, reject: q.reject });
    });
    this.pendingCount += batch.length;
  }

  private async handleReady(g: Group, rd: Ready): Promise<void> {
    for (const message of rd.leaderMessages) this.transport.send(message.to, { group: g.id, message });
    // Committed entries this node already holds durably need not wait for this Ready's write: they are applied while
    // it is under way (a leader's are always such; a follower's may arrive in this very Ready, and wait for it).
    const durable = rd.snapshot === null ? g.raft.log.stableIndex() : 0;
    let early = 0;
    while (early < rd.committedEntries.length && rd.committedEntries[early]!.index <= durable) early++;
    const write = this.mustWrite(g, rd)
      ? this.storage.save(g.id, { hardState: rd.hardState, snapshot: rd.snapshot, entries: rd.entries })
      : undefined;
    try {
      if (early > 0) await this.applyEntries(g, rd.committedEntries.slice(0, early));
    } finally {
      await write;
    }
    if (write !== undefined && rd.hardState !== null) g.durableHardState = rd.hardState;
    if (this.stopped || g.failed) return;
    for (const message of withoutSubsumedAccepts(rd.messages))
      this.transport.send(message.to, { group: g.id, message });
    if (rd.snapshot !== null) {
      await this.sm.restore(g.id, rd.snapshot);
      this.settleCoveredBy(g, rd.snapshot.index);
    }
    if (early < rd.committedEntries.length) await this.applyEntries(g, rd.committedEntries.slice(early));
  }

  private async applyEntries(g: Group, entries: readonly Entry[]): Promise<void> {
    await this.sm.apply(g.id, entries);
    for (const e of entries) this.settle(g, e);
  }

  /**
   * Whether this Ready needs a durable write. A change of the commit index alone does not: Raft keeps it volatile
   * (a restarted node relearns it, and never commits below what its state machine applied), so it is written only
   * along with entries, a snapshot, a term or a vote, and an fsync is saved on the commit path.
   */
  private mustWrite(g: Group, rd: Ready): boolean {
    if (rd.snapshot !== null || rd.entries.length > 0) return true;
    const hs = rd.hardState;
    if (hs === null) return false;
    const durable = g.durableHardState;
    return durable === null || hs.term !== durable.term || hs.vote !== durable.vote;
  }

  /** Resolves or rejects the proposal waiting at `e.index`, if any. */
  private settle(g: Group, e: Entry): void {
    const p = g.pending.get(e.index);
    if (p === undefined) return;
    g.pending.delete(e.index);
    this.pendingCount--;
    if (p.term === e.term) {
      if (this.clock !== undefined) this.commitLatency.observe(this.clock.monotonicMs() - p.proposedAtMs);
      p.resolve({ index: e.index, term: e.term });
    } else p.reject(new BasaltError('NOT_LEADER', 'the proposal was overwritten by a new leader', leaderDetails(g)));
  }

  /**
   * A new entry of this node lands at `index`, above every entry it holds, so an older proposal still waiting there
   * lost its entry here without this driver seeing how (another leader's entries replaced it). It is never left
   * hanging; other logs may still hold its entry and a later leader commit it, so it rejects with EntryLeftLogError.
   */
  private rejectLeftLog(g: Group, index: number): void {
    const stale = g.pending.get(index);
    if (stale === undefined) return;
    g.pending.delete(index);
    this.pendingCount--;
    const s = g.raft.status();
    const details = { group: g.id, leader: s.leader, term: s.term, index };
    stale.reject(new EntryLeftLogError(logIndex(index), toTerm(stale.term), details));
  }

  /** Proposals at or below a restored snapshot: committed or not, this node cannot tell. */
  private settleCoveredBy(g: Group, index: number): void {
    for (const [i, p] of g.pending) {
      if (i > index) continue;
      g.pending.delete(i);
      this.pendingCount--;
      p.reject(new BasaltError('TIMEOUT', 'outcome unknown: a snapshot replaced the log here', leaderDetails(g)));
    }
  }

  private async maybeCompact(g: Group): Promise<void> {
    const log = g.raft.log;
    const applied = log.applied;
    // The snapshot must stand for exactly the applied index, which must be durable in the log.
    if (applied - log.snapshotIndex() < this.compactEntriesMin || applied > log.stableIndex()) return;
    const data = await this.sm.snapshot(g.id);
    if (this.stopped || log.applied !== applied) return;
    const snapshot = g.raft.compact(applied, data);
    if (snapshot !== null) await this.storage.compact(g.id, snapshot);
  }

  private notifyLeader(g: Group): void {
    const s = g.raft.status();
    if (s.leader === g.lastLeader && s.term === g.lastTerm && s.role === g.lastRole) return;
    g.lastLeader = s.leader;
    g.lastTerm = s.term;
    g.lastRole = s.role;
    this.onLeaderChange?.({ group: g.id, leader: s.leader, term: s.term, role: s.role });
  }

  private failPending(g: Group, error: BasaltError): void {
    for (const p of g.pending.values()) p.reject(error);
    this.pendingCount -= g.pending.size;
    g.pending.clear();
    for (const q of g.queued) q.reject(error);
    g.queued = [];
  }
}

/**
 * A Ready's messages without the accepting AppendResps that another accepting AppendResp of the same Ready to the same
 * leader in the same term subsumes (a larger or equal index). A leader's handling of an accept is monotone in its index (match, the
 * pipeline slots it frees, probe → replicate, the commit index), so the largest accept tells it everything the others
 * would; a follower that received several Appends in one turn then answers once. Rejections all go out. Without two
 * accepts the messages are returned as they are.
 */
export function withoutSubsumedAccepts(messages: readonly Message[]): readonly Message[] {
  let accepts = 0;
  for (const m of messages) if (m.kind === 'AppendResp' && !m.reject) accepts++;
  if (accepts < 2) return messages;
  // By leader and term: within one term a follower's log only grows along that leader's, so a larger accept holds.
  const largest = new Map<string, AppendRespMessage>();
  const keyOf = (m: AppendRespMessage): string => `${m.to}/${m.term}`;
  for (const m of messages) {
    if (m.kind !== 'AppendResp' || m.reject) continue;
    const kept = largest.get(keyOf(m));
    if (kept === undefined || m.index > kept.index) largest.set(keyOf(m), m);
  }
  return messages.filter((m) => m.kind !== 'AppendResp' || m.reject || largest.get(keyOf(m)) === m);
}

function leaderDetails(g: Group): Record<string, unknown> {
  const s = g.raft.status();
  return { group: g.id, leader: s.leader, term: s.term };
}

function notLeader(group: PartitionId, s: Status, hint: NodeName | null = s.leader): BasaltError {
  return new BasaltError('NOT_LEADER', `not the leader of ${group}`, { group, leader: hint, term: s.term });
}
