/**
 * One replica of one partition on one node: the per-partition aggregate the node's partition host creates for each
 * hosted partition and every request handler works on. It owns
 * - its incarnation (drawn here, at creation: rule 2; a restarted replica is a new object and never inherits a lease),
 *   its state machine (registered by the host with the node's Raft multiplexer), its proposal tracker and the
 *   `submit` function the host hands it (the Raft driver's `propose` for this group);
 * - its view of the applied lease (`leaseView`, `checkPrimary`: rules 1, 19; PRIMARY_MISS carries the holder hint) and
 *   its upkeep decision (`decideUpkeep`, performed by the host), lease confirmations (rule 6) and hand-over (rule 5);
 * - the partition's lock table, which lives only on the primary, in memory, for one lease (lease-locks.ts), the per-tx
 *   operation records, the pipelined writes awaiting confirmation (also for one lease: pipelined-writes.ts), read
 *   views of the partition's MVCC and tx state storage, and the reads waiting for their readTs to become readable
 *   (readable-waiters.ts).
 *
 * Readability (rules 9, 11, 19): a readTs is readable here once applied safe time covers it, or, while this replica
 * acts as primary, once its readable safe time (now, or just below its smallest proposal in flight) covers it.
 * Waiters are re-checked after every apply; each has a timeout on the injected timers.
 *
 * Rest (idle partitions): a replica nobody used for `restAfterMs` (no request, proposal or waiting read), with no
 * proposal in flight, no lock held or waited for and no write awaiting confirmation, may be put to rest by its host
 * (`mayRest`, `rest`): its upkeep then proposes nothing (no lease renewal, no idle SafeTimeSync), so the lease may
 * lapse and the Raft group may go quiet. `touch` (every request, data proposal and read; not the upkeep's own
 * proposals, which would keep it awake forever) wakes it: its wake listeners run
 * at once (the host resumes its upkeep, which renews a lapsed lease), and a primary-only request waits for that lease
 * (`untilLeaseStart`) instead of answering PRIMARY_MISS. A read that must wait for safe time also asks for it
 * (`onWake` with 'safe-time': the host pokes the Raft leader's node, whose upkeep then proposes). Rules 1–6 are
 * untouched: a lapsed lease is renewed by an ordinary extension (rule 3: it applies only while still current), and
 * until it applies the replica does not act.
 *
 * Everything here is synchronous except the proposals' promises, which only the Raft driver (through `submit` and the
 * state machine's apply) settles, and the waits on injected timers. The object is never reused after `stop`.
 */

import { assert } from '../../core/assert.js';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, Term, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import type { Random } from '../../env/random.js';
import { sleep, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { maxTimestamp, physicalMs } from '../../hlc/timestamp.js';
import type { MvPartitionStorage } from '../../storage/mv-partition-storage.js';
import type { StorageEngine } from '../../storage/storage-engine.js';
import type { TxStateStorage } from '../../storage/tx-state-storage.js';
import type { LockManager } from '../../tx/core/lock-manager.js';
import type { LockStep } from '../../tx/core/lock-modes.js';
import type { LeaseInfo, ReadWriteResponse } from '../../tx/core/messages.js';
import { txDeadline } from '../../tx/core/tx-id.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { ApplyResult } from './apply-result.js';
import { type DataProposal, dataCommand, type PartitionCommand } from './commands.js';
import {
  type Lease,
  type LeaseToken,
  type LeaseView,
  leaseView,
  newReplicaIncarnation,
  type ReplicaIncarnation,
  sameToken,
  tokenOf,
} from './lease.js';
import { LeaseLockTable } from './lease-locks.js';
import { PipelinedWrites } from './pipelined-writes.js';
import {
  checkPrimary,
  confirmLease,
  DataSequence,
  decideUpkeep,
  type LeaseConfirmation,
  type LeaseProposal,
  type LeaseTiming,
  leaseTiming,
  type PrimaryCheck,
  type RaftView,
  type UpkeepAction,
  type UpkeepDecision,
  type UpkeepOccasion,
} from './primary.js';
import { primaryMissError } from './primary-miss.js';
import { ProposalTracker, proposeCommand, type SubmitProposal, type TakenProposal } from './proposals.js';
import { ReadableWaiters } from './readable-waiters.js';
import { primarySafeTime } from './safe-time.js';
import { PartitionStateMachine } from './state-machine.js';
import { TxOperations } from './tx-operations.js';
import { WriteBatcher } from './write-batcher.js';

export interface PartitionReplicaOptions {
  readonly partitionId: PartitionId;
  /** This node's ephemeral id and stable name. */
  readonly nodeId: NodeId;
  readonly nodeName: NodeName;
  /** Draws this replica object's incarnation. */
  readonly random: Random;
  /** Physical clock, for idle-time bookkeeping (monotonicMs). */
  readonly physicalClock: Clock;
  readonly clock: HybridClock;
  /** The node's storage engine (the partition's storages are read from it; only the state machine writes). */
  readonly engine: StorageEngine;
  readonly txStateMap: TxStateMap;
  /** Proposes bytes in this partition's Raft group; resolves once applied here (RaftDriver.propose). */
  readonly submit: SubmitProposal;
  readonly timing?: LeaseTiming;
  readonly txTimeoutMs?: number;
  readonly txStateRetentionMs?: number;
  readonly safeTimeSyncIdleMs?: number;
  /** Unused this long, the replica may rest (see Rest in the header); default LIMITS.replicaRestAfterMsDefault. */
  readonly restAfterMs?: number;
  /** Rule 19: false while this node's clock is beyond the bound; the replica then neither acts nor proposes leases. */
  readonly clockWithinBound?: () => boolean;
  readonly timers: Timers;
  readonly lockWaitTimeoutMs?: number;
  readonly readWaitMs?: number;
  readonly readWaitersMax?: number;
  readonly leaseStartWaitMs?: number;
  readonly locks?: LockManager;
  readonly counters?: CounterSink;
  /** Data writes proposed within one turn of the event loop share one Raft entry (write-batcher.ts). Default off. */
  readonly batchWrites?: boolean;
  /** With `batchWrites`: how long a batch gathers writes (default 0, the rest of the turn; write-batcher.ts). */
  readonly batchWritesGatherMs?: number;
}

/** Counters of batched data writes (replica setting `batchWrites`). */
export const WRITE_BATCH_COUNTERS = {
  /** UpdateBatch commands proposed (two or more writes in one entry). */
  writeBatches: 'replica.writeBatches',
  /** Writes proposed inside an UpdateBatch. */
  batchedWrites: 'replica.batchedWrites',
} as const;

export type UnprotectedIntentListener = (txId: TxId, commitPartitionId: PartitionId) => void;

/** Why a resting replica is woken: it was used, or a read here waits for safe time (ask the leader for it). */
export type WakeReason = 'used' | 'safe-time';

/** What the host adds to an upkeep decision: the group's Raft state here, who could lead instead, the occasion. */
export interface UpkeepFacts {
  readonly raft: RaftView | undefined;
  readonly successor: NodeName | undefined;
  readonly occasion: UpkeepOccasion;
}

/** What a data proposal needs besides what the replica fills in (timestamp, proposal id, sequence number). */
export type { DataProposal } from './commands.js';

export class PartitionReplica {
  readonly partitionId: PartitionId;
  readonly self: ReplicaIncarnation;
  readonly nodeName: NodeName;
  readonly stateMachine: PartitionStateMachine;
  readonly proposals: ProposalTracker;
  readonly timing: LeaseTiming;
  readonly locks: LockManager;
  /** The node's counters (handlers bump theirs here). */
  readonly counters: CounterSink;
  readonly operations = new TxOperations<ReadWriteResponse>();
  /** Writes answered before they applied, until the coordinator confirms them (pipelined-writes.ts). */
  readonly pipeline: PipelinedWrites;
  readonly mv: MvPartitionStorage;
  readonly txState: TxStateStorage;
  readonly txStateMap: TxStateMap;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txTimeoutMs: number;
  private readonly readWaitMs: number;
  private readonly leaseStartWaitMs: number;
  private readonly lockTable: LeaseLockTable;
  private readonly readWaiters: ReadableWaiters;
  private readonly physicalClock: Clock;
  private readonly submit: SubmitProposal;
  private readonly sequence = new DataSequence();
  /** Set with `batchWrites`: every data write goes through it. */
  private readonly batcher: WriteBatcher | undefined;
  private readonly safeTimeSyncIdleMs: number | undefined;
  private readonly clockWithinBound: () => boolean;
  private leaseProposalInFlight = false;
  /** The Lease command in flight (settles once applied or abandoned), for requests that wait for it. */
  private leaseProposal: Promise<unknown> | null = null;
  private readonly restAfterMs: number;
  /** Monotonic ms of the last use (request, proposal, read). */
  private lastUsedMs: number;
  private resting = false;
  private readonly wakeListeners = new Set<(reason: WakeReason) => void>();
  private handingOver = false;
  /** Monotonic ms until which this replica does not renew its lease (a planned leadership move). */
  private renewalsPausedUntilMs = Number.NEGATIVE_INFINITY;
  /** Acted as primary at the last upkeep tick (to notice gaining primacy). */
  private wasActing = false;
  /** The applied lease and term the last upkeep decided on (`appliedChangedUpkeep`). */
  private upkeepLease: Lease | null | undefined;
  private upkeepTerm: Term | undefined;
  private stopped = false;
  private lastSafeTimeAdvanceMs: number;
  private readonly intentListeners = new Set<UnprotectedIntentListener>();
  private readonly heldIntentListeners = new Set<(txId: TxId) => void>();
  private readonly unsubscribe: () => void;

  constructor(options: PartitionReplicaOptions) {
    this.partitionId = options.partitionId;
    this.self = newReplicaIncarnation(options.nodeId, options.random);
    this.nodeName = options.nodeName;
    this.clock = options.clock;
    this.physicalClock = options.physicalClock;
    this.submit = options.submit;
    this.timing = options.timing ?? leaseTiming(options.clock.maxClockSkewMs);
    this.safeTimeSyncIdleMs = options.safeTimeSyncIdleMs;
    this.restAfterMs = options.restAfterMs ?? LIMITS.replicaRestAfterMsDefault;
    this.lastUsedMs = options.physicalClock.monotonicMs();
    this.clockWithinBound = options.clockWithinBound ?? (() => true);
    this.proposals = new ProposalTracker(this.self, options.clock);
    this.stateMachine = new PartitionStateMachine({
      partitionId: options.partitionId,
      engine: options.engine,
      txStateMap: options.txStateMap,
      clock: options.clock,
      proposals: this.proposals,
      ...(options.txTimeoutMs === undefined ? {} : { txTimeoutMs: options.txTimeoutMs }),
      ...(options.txStateRetentionMs === undefined ? {} : { txStateRetentionMs: options.txStateRetentionMs }),
    });
    this.lastSafeTimeAdvanceMs = this.physicalClock.monotonicMs();
    this.stateMachine.onApplied(() => {
      this.lastSafeTimeAdvanceMs = this.physicalClock.monotonicMs();
    });
    this.pipeline = new PipelinedWrites(this.partitionId);
    this.mv = options.engine.mvPartition(this.partitionId);
    this.txState = options.engine.txStatePartition(this.partitionId);
    this.txStateMap = options.txStateMap;
    this.timers = options.timers;
    this.txTimeoutMs = options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault;
    this.readWaitMs = options.readWaitMs ?? LIMITS.replicaReadWaitMsDefault;
    this.leaseStartWaitMs = options.leaseStartWaitMs ?? LIMITS.replicaLeaseStartWaitMsMax;
    this.counters = options.counters ?? NO_COUNTERS;
    this.lockTable = new LeaseLockTable({
      ...(options.locks === undefined ? {} : { locks: options.locks }),
      timers: this.timers,
      lockWaitTimeoutMs: options.lockWaitTimeoutMs ?? LIMITS.replicaLockWaitTimeoutMsDefault,
      counters: this.counters,
      lease: this.currentToken(),
    });
    this.locks = this.lockTable.locks;
    this.readWaiters = new ReadableWaiters({
      partitionId: this.partitionId,
      timers: this.timers,
      waitersMax: options.readWaitersMax ?? LIMITS.safeTimeWaitersMax,
      readable: (readTs) => this.readableAt(readTs),
      appliedSafeTime: () => this.stateMachine.safeTime.current(),
    });
    this.batcher = options.batchWrites === true ? this.newBatcher(options.batchWritesGatherMs ?? 0) : undefined;
    this.unsubscribe = this.stateMachine.onApplied(() => {
      // Locks and pipelined-write records live for one lease: a tx cleaned up at another primary meanwhile would
      // keep them here for good (and the partition could never rest on this node).
      if (this.lockTable.leaseApplied(this.currentToken())) this.pipeline.clear('lease-changed');
      this.readWaiters.wake();
    });
  }

  /** The tx's hard deadline D (rule 15). */
  deadlineOf(txId: TxId): HybridTimestamp {
    return txDeadline(txId, this.txTimeoutMs);
  }

  // ---------------------------------------------------------------------------------------- upkeep

  /**
   * This replica's upkeep on one occasion (primary.ts `decideUpkeep`), from its own state and the host's facts; it
   * remembers whether it acts, so that the next tick sees primacy gained. A tick reads a fresh HLC timestamp (as a
   * proposal would), a drain poll the clock's present reading. The caller performs the actions: `perform` those
   * that are the replica's own.
   */
  decideUpkeep(facts: UpkeepFacts): UpkeepDecision {
    const ticks = facts.occasion.kind === 'tick' && facts.raft !== undefined && !this.stopped;
    const nowMs = this.physicalClock.monotonicMs();
    const decision = decideUpkeep({
      occasion: facts.occasion,
      raft: facts.raft,
      successor: facts.successor,
      self: this.self,
      selfName: this.nodeName,
      timing: this.timing,
      appliedTerm: this.stateMachine.appliedTerm(),
      lease: this.stateMachine.currentLease(),
      now: ticks ? this.clock.now() : this.clock.current(),
      leaseProposalInFlight: this.leaseProposalInFlight,
      handingOver: this.handingOver,
      renewalsPaused: nowMs < this.renewalsPausedUntilMs,
      clockWithinBound: this.clockWithinBound(),
      stopped: this.stopped,
      resting: this.resting,
      lastSafeTimeAdvanceMs: this.lastSafeTimeAdvanceMs,
      nowMs,
      proposalsInFlight: this.proposals.inFlightCount,
      safeTimeSyncIdleMs: this.safeTimeSyncIdleMs,
      wasActing: this.wasActing,
    });
    this.wasActing = decision.acting;
    this.upkeepLease = this.stateMachine.currentLease();
    this.upkeepTerm = this.stateMachine.appliedTerm();
    return decision;
  }

  /**
   * Whether what was applied since the last upkeep changed an input an apply can change: the applied lease (a first
   * lease, a renewal, a takeover) or the applied term (a new leader may propose a lease once it applied an entry of its
   * own term). Everything else the upkeep decides on moves with time, which the host's timer follows.
   */
  appliedChangedUpkeep(): boolean {
    return this.stateMachine.currentLease() !== this.upkeepLease || this.stateMachine.appliedTerm() !== this.upkeepTerm;
  }

  /** Performs `action` if it is this replica's own (a lease or SafeTimeSync proposal); false for the host's. */
  perform(action: UpkeepAction): boolean {
    switch (action.kind) {
      case 'propose-lease':
        this.proposeLease(action.proposal);
        return true;
      case 'propose-safe-time-sync':
        void this.propose((p) => ({ kind: 'SafeTimeSync', ts: p.ts, proposalId: p.id })).catch(() => {});
        return true;
      case 'transfer-leadership':
      case 'recover-cleanups':
        return false;
    }
  }

  /**
   * A tick without a host (a replica driven on its own): decides and performs its proposals. Call it on leader
   * changes, after applies and on a timer; it never proposes a lease twice at once.
   */
  maintain(raft: RaftView): UpkeepDecision {
    const decision = this.decideUpkeep({ raft, successor: undefined, occasion: { kind: 'tick' } });
    for (const action of decision.actions) this.perform(action);
    return decision;
  }

  private proposeLease(action: LeaseProposal): void {
    this.leaseProposalInFlight = true;
    const done = (): void => {
      this.leaseProposalInFlight = false;
      this.leaseProposal = null;
    };
    const proposal = this.propose((p) => ({
      kind: 'Lease',
      ts: p.ts,
      proposalId: p.id,
      lease: action.lease,
      replaces: action.replaces,
    })).then(done, done);
    // A proposal refused at once has already settled (and cleared the flag): nothing to wait for then.
    if (this.leaseProposalInFlight) this.leaseProposal = proposal;
    proposal.catch(() => {});
  }

  // ---------------------------------------------------------------------------------------- rest

  /** The partition is used now; a resting replica wakes (see Rest in the header). */
  touch(): void {
    this.lastUsedMs = this.physicalClock.monotonicMs();
    if (!this.resting) return;
    this.resting = false;
    // A lease renewed after a rest counts as primacy gained: the owed cleanups run again (idempotent), since the
    // rescans skipped this partition while its lease had lapsed.
    this.wasActing = false;
    for (const listener of this.wakeListeners) listener('used');
  }

  /** Listens for wakes: 'used' after a rest, 'safe-time' whenever a read here waits for safe time. */
  onWake(listener: (reason: WakeReason) => void): () => void {
    this.wakeListeners.add(listener);
    return () => this.wakeListeners.delete(listener);
  }

  /** Nobody used the partition for `restAfterMs`, and nothing of it is in flight or held here. */
  mayRest(): boolean {
    if (this.stopped || this.resting || this.handingOver) return this.resting;
    if (this.physicalClock.monotonicMs() - this.lastUsedMs < this.restAfterMs) return false;
    return (
      this.proposals.inFlightCount === 0 &&
      (this.batcher?.pendingCount ?? 0) === 0 &&
      !this.leaseProposalInFlight &&
      this.readWaiters.size === 0 &&
      this.pipeline.size === 0 &&
      this.locks.keyCount === 0
    );
  }

  /** Puts the replica to rest (after `mayRest`): its upkeep proposes nothing until `touch`. */
  rest(): void {
    this.resting = true;
  }

  get isResting(): boolean {
    return this.resting;
  }

  /**
   * Rule 5: stop renewing, so that the next leader's lease starts at the current expiration, and stop granting new
   * locks (`lockingLease`); finish, cleanup and lease confirmations are still served until then.
   */
  handOver(): void {
    this.handingOver = true;
  }

  /**
   * A planned move of the leadership away from this replica (rebalancing): renewals pause for `pauseMs` (the caller
   * asks again while the move still wants it; once it stops asking, renewals resume), so that this replica's lease
   * runs out while it keeps serving. True once its lease no longer lets it act (past the acting window, or not its
   * lease): the leadership may move now, and the successor's lease starts at the current expiration (rule 5), so
   * requests wait no longer than the stasis window plus an election, instead of a whole lease after a move that left
   * an unexpired lease behind on a replica that no longer leads.
   */
  prepareHandOff(pauseMs: number): boolean {
    this.renewalsPausedUntilMs = this.physicalClock.monotonicMs() + pauseMs;
    const view = this.leaseView();
    return !view.mine || view.phase === 'stasis' || view.phase === 'expired' || view.phase === 'none';
  }

  /**
   * The replica stops being hosted (the object is never reused): every proposal in flight is abandoned, and waiting
   * reads fail NODE_UNAVAILABLE. An abandoned proposal may already sit in followers' logs and apply under its lease,
   * so its outcome is unknown to its proposer.
   */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    const message = `replica of ${this.partitionId} stopped with the proposal in flight; it may still apply`;
    this.proposals.abandonAll(new BasaltError('NODE_UNAVAILABLE', message));
    this.unsubscribe();
    this.pipeline.clear('stopped');
    this.readWaiters.failAll(() => stoppedError(this.partitionId));
  }

  // ---------------------------------------------------------------------------------------- acting as primary

  /** The applied lease as this replica sees it at `now` (by default the clock's present reading, without a tick). */
  leaseView(now: HybridTimestamp = this.clock.current()): LeaseView {
    return leaseView(this.stateMachine.currentLease(), this.self, now, this.timing.maxClockSkewMs);
  }

  /** Rules 1, 19 for a primary-only request; `now` must be read after absorbing the request's timestamp. */
  checkPrimary(now: HybridTimestamp, token?: LeaseToken): PrimaryCheck {
    const lease = this.stateMachine.currentLease();
    return checkPrimary(lease, this.self, now, this.timing.maxClockSkewMs, token, this.clockWithinBound());
  }

  /** Rule 6: absorbs commitTs, then says whether this replica still acts under `token`. */
  confirmLease(token: LeaseToken, commitTs: HybridTimestamp): LeaseConfirmation {
    const now = this.clock.update(commitTs);
    const lease = this.stateMachine.currentLease();
    const within = this.clockWithinBound();
    return confirmLease(lease, this.self, now, this.timing.maxClockSkewMs, token, commitTs, within);
  }

  /** The primary's readable safe time at `now` (rules 9, 11). */
  readableSafeTime(now: HybridTimestamp): HybridTimestamp {
    return primarySafeTime(this.stateMachine.lastAppliedTs(), now, this.proposals.smallestInFlight());
  }

  /** Rules 1, 19: the lease this replica acts under at `now` (matching `token` if given), else PRIMARY_MISS. */
  actingLease(now: HybridTimestamp, token?: LeaseToken): Lease {
    const check = this.checkPrimary(now, token);
    if (check.kind !== 'ok') throw this.primaryMiss(check);
    return check.lease;
  }

  /**
   * `actingLease` for a request that takes locks: a holder handing its lease over grants no new locks (rule 5), so it
   * answers PRIMARY_MISS `handing-over` (retryable: the next lease starts at this one's expiration).
   */
  lockingLease(now: HybridTimestamp, token?: LeaseToken): Lease {
    const lease = this.actingLease(now, token);
    if (this.handingOver) throw primaryMissError(this.partitionId, 'handing-over', lease);
    return lease;
  }

  /**
   * Rule 1 lets a holder whose applied lease has not started yet wait for its start rather than refuse: when that is
   * the only obstacle and the start is at most `leaseStartWaitMs` away, resolves with `now` read after the wait;
   * otherwise at once with `now` (the caller's primacy check then answers).
   */
  async untilLeaseStart(now: HybridTimestamp, token?: LeaseToken): Promise<HybridTimestamp> {
    this.touch();
    let check = this.checkPrimary(now, token);
    if (check.kind !== 'ok' && LAPSED.has(check.reason) && this.leaseProposal !== null && !this.stopped) {
      // Our own Lease command is on its way (a rested holder renewing its lapsed lease, a first lease): wait for it.
      await settledWithin(this.leaseProposal, this.leaseStartWaitMs, this.timers);
      now = this.clock.now();
      check = this.checkPrimary(now, token);
    }
    if (check.kind === 'ok' || check.reason !== 'not-started' || check.start === undefined) return now;
    const waitMs = physicalMs(check.start) - physicalMs(now) + 1;
    if (waitMs > this.leaseStartWaitMs || this.stopped) return now;
    await sleep(this.timers, waitMs);
    return this.clock.now();
  }

  primaryMiss(check: Exclude<PrimaryCheck, { kind: 'ok' }>): BasaltError {
    return primaryMissError(this.partitionId, check.reason, this.stateMachine.currentLease());
  }

  /** What an RW response carries: the applied lease under `token` (renewals raise its expiration). */
  leaseInfo(token: LeaseToken, fallback: Lease): LeaseInfo {
    const current = this.stateMachine.currentLease();
    const lease = current !== null && sameToken(tokenOf(current), token) ? current : fallback;
    return { token: tokenOf(lease), holderName: lease.holderName, expiration: lease.expiration };
  }

  private currentToken(): LeaseToken | undefined {
    const lease = this.stateMachine.currentLease();
    return lease === null ? undefined : tokenOf(lease);
  }

  // ---------------------------------------------------------------------------------------- proposals

  /** Proposes any command; resolves with its apply result here (rule 4), rejects if it can no longer apply. */
  propose(build: (proposal: TakenProposal) => PartitionCommand): Promise<ApplyResult> {
    if (this.stopped) {
      const message = `replica of ${this.partitionId} stopped: nothing was proposed`;
      return Promise.reject(new BasaltError('NODE_UNAVAILABLE', message, undefined, { executed: 'no' }));
    }
    return proposeCommand(this.proposals, build, this.submit);
  }

  /**
   * Proposes an Update (one write) or UpdateAll under `token`, with the next sequence number of that lease; with
   * `batchWrites`, in an UpdateBatch with the other writes of this turn (write-batcher.ts). Resolves with this write's
   * own apply result. `onProposed` runs once its command was handed to Raft.
   */
  proposeData(data: DataProposal, onProposed?: () => void): Promise<ApplyResult> {
    this.touch();
    if (this.batcher !== undefined) return this.batcher.submit(data, onProposed);
    const applied = this.propose((p) =>
      dataCommand(
        { ts: p.ts, proposalId: p.id },
        {
          token: data.token,
          seq: this.sequence.next(data.token),
          txId: data.txId,
          coordinatorId: data.coordinatorId,
          commitPartitionId: data.commitPartitionId,
          full: data.full,
          writes: data.writes,
        },
      ),
    );
    onProposed?.();
    return applied;
  }

  private newBatcher(gatherMs: number): WriteBatcher {
    return new WriteBatcher({
      timers: this.timers,
      gatherMs,
      propose: (build) => this.propose(build),
      nextSeq: (token) => this.sequence.next(token),
      // Rules 1, 19 again at the end of the turn: the write's check passed one turn ago.
      refusal: (token) => {
        if (this.stopped) return stoppedError(this.partitionId);
        const check = this.checkPrimary(this.clock.now(), token);
        return check.kind === 'ok' ? undefined : this.primaryMiss(check);
      },
      onCommand: (items) => {
        if (items < 2) return;
        this.counters.add(WRITE_BATCH_COUNTERS.writeBatches);
        this.counters.add(WRITE_BATCH_COUNTERS.batchedWrites, items);
      },
    });
  }

  // ---------------------------------------------------------------------------------------- locks

  /**
   * Acquires `steps` in order for `txId` under wait-die, in the lock table of the applied lease (lease-locks.ts);
   * each wait is bounded by lockWaitTimeoutMs (then TX_LOCK_CONFLICT). Locks already granted stay held (released at
   * cleanup, or by the caller for one-phase; `onePhase` makes them patient longer, lease-locks.ts).
   */
  acquire(txId: TxId, steps: readonly LockStep[], onePhase = false): Promise<void> {
    return this.lockTable.acquire(txId, steps, onePhase);
  }

  /**
   * Observers of foreign write intents met without a lock (their writer lost its locks with a primary change): such
   * an intent blocks every RW request on its row until its tx is cleaned up here, so orphan recovery listens.
   */
  onUnprotectedIntent(listener: UnprotectedIntentListener): () => void {
    this.intentListeners.add(listener);
    return () => this.intentListeners.delete(listener);
  }

  /** Called by the RW handler before it refuses a request on an unprotected foreign intent. */
  reportUnprotectedIntent(txId: TxId, commitPartitionId: PartitionId): void {
    for (const listener of this.intentListeners) listener(txId, commitPartitionId);
  }

  /**
   * Observers of a tx whose intent here was asked about on the primary-replica path (its commit partition has no
   * record at or below its vacuum horizon): the in-line cleanup settles such a tx, so the intent does not wait for
   * a writer to meet it.
   */
  onHeldIntentQueried(listener: (txId: TxId) => void): () => void {
    this.heldIntentListeners.add(listener);
    return () => this.heldIntentListeners.delete(listener);
  }

  reportHeldIntent(txId: TxId): void {
    for (const listener of this.heldIntentListeners) listener(txId);
  }

  // ---------------------------------------------------------------------------------------- readability

  /** True if a read at `readTs` sees everything that will ever be visible at it (see the module header). */
  readableAt(readTs: HybridTimestamp): boolean {
    return this.stateMachine.safeTime.current() >= readTs || this.readableUpTo() >= readTs;
  }

  /**
   * Up to where a read is served here without waiting: applied safe time, or, while this replica acts as primary, its
   * readable safe time at the clock's present reading when that is later.
   */
  readableUpTo(): HybridTimestamp {
    const applied = this.stateMachine.safeTime.current();
    const now = this.clock.current();
    if (this.checkPrimary(now).kind !== 'ok') return applied;
    return maxTimestamp(applied, this.readableSafeTime(now));
  }

  /** Resolves once `readTs` is readable here; TIMEOUT after `timeoutMs`, OVERLOADED when too many wait. */
  waitReadable(readTs: HybridTimestamp, timeoutMs: number = this.readWaitMs): Promise<void> {
    this.touch();
    if (this.readableAt(readTs)) return Promise.resolve();
    if (this.stopped) return Promise.reject(stoppedError(this.partitionId));
    const wait = this.readWaiters.wait(readTs, timeoutMs);
    // Safe time moves only with applies: ask for one (the leader's upkeep renews a lapsed lease or syncs safe time).
    for (const listener of this.wakeListeners) listener('safe-time');
    return wait;
  }

  get readWaiterCount(): number {
    return this.readWaiters.size;
  }
}

/** The PRIMARY_MISS reasons our own Lease command in flight may cure. */
const LAPSED: ReadonlySet<string> = new Set(['no-lease', 'ended', 'not-holder']);

/** Resolves once `promise` settles or `timeoutMs` passed, whichever is first (never rejects). */
function settledWithin(promise: Promise<unknown>, timeoutMs: number, timers: Timers): Promise<void> {
  return new Promise((resolve) => {
    const timer = timers.setTimer(resolve, timeoutMs);
    const done = (): void => {
      timers.clearTimer(timer);
      resolve();
    };
    promise.then(done, done);
  });
}

function stoppedError(partitionId: PartitionId): BasaltError {
  return new BasaltError('NODE_UNAVAILABLE', `replica of ${partitionId} stopped`, { partitionId });
}

/** Registry of the partitions hosted on a node, as handlers look them up. */
export interface PartitionRegistry {
  get(partitionId: PartitionId): PartitionReplica | undefined;
}

export function assertHosted(partition: PartitionReplica | undefined, partitionId: PartitionId): PartitionReplica {
  assert(partition === undefined || partition.partitionId === partitionId, 'registry maps a partition to itself');
  if (partition === undefined) {
    throw primaryMissError(partitionId, 'not-hosted', null);
  }
  return partition;
}
