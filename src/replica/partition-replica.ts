/**
 * One replica object of one partition on one node: the composition of its incarnation (drawn here, at creation:
 * rule 2), its state machine, its proposal tracker and its lease-holder decisions. The node's partition host creates
 * one per hosted partition, registers `stateMachine` with the node's Raft state-machine multiplexer, hands it a
 * `submit` function (the Raft driver's `propose` for this group), and calls `maintain` on leader changes and on a
 * timer. Request handlers use `checkPrimary`, `confirmLease`, `readableSafeTime` and the `propose*` methods.
 *
 * Everything here is synchronous except the proposals' promises, which only the Raft driver (through `submit` and the
 * state machine's apply) settles. A replica object is never reused after `stop`: a restarted replica is a new object
 * with a new incarnation and never inherits the lease.
 */
import { BasaltError } from '../core/errors.js';
import type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { StorageEngine } from '../storage/storage-engine.js';
import type { TxStateMap } from '../tx/tx-state-map.js';
import type { ApplyResult } from './apply-result.js';
import type { PartitionCommand, RowWrite } from './commands.js';
import { type LeaseToken, type LeaseView, leaseView, newReplicaIncarnation, type ReplicaIncarnation } from './lease.js';
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
import { ProposalTracker, proposeCommand, type SubmitProposal, type TakenProposal } from './proposals.js';
import { primarySafeTime } from './safe-time.js';
import { PartitionStateMachine } from './state-machine.js';

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
  readonly engine: StorageEngine;
  readonly txStateMap: TxStateMap;
  /** Proposes bytes in this partition's Raft group; resolves once applied here (RaftDriver.propose). */
  readonly submit: SubmitProposal;
  readonly timing?: LeaseTiming;
  readonly txTimeoutMs?: number;
  readonly txStateRetentionMs?: number;
  readonly safeTimeSyncIdleMs?: number;
  /** Rule 19: false while this node's clock is beyond the bound; the replica then neither acts nor proposes leases. */
  readonly clockWithinBound?: () => boolean;
}

/** What the host adds to an upkeep decision: the group's Raft state here, who could lead instead, the occasion. */
export interface UpkeepFacts {
  readonly raft: RaftView | undefined;
  readonly successor: NodeName | undefined;
  readonly occasion: UpkeepOccasion;
}

/** What a data proposal needs besides what the replica fills in (timestamp, proposal id, sequence number). */
export interface DataProposal {
  readonly token: LeaseToken;
  readonly txId: TxId;
  readonly coordinatorId: NodeId;
  readonly commitPartitionId: PartitionId;
  readonly full: boolean;
  readonly writes: readonly RowWrite[];
}

export class PartitionReplica {
  readonly partitionId: PartitionId;
  readonly self: ReplicaIncarnation;
  readonly nodeName: NodeName;
  readonly stateMachine: PartitionStateMachine;
  readonly proposals: ProposalTracker;
  readonly timing: LeaseTiming;
  private readonly clock: HybridClock;
  private readonly physicalClock: Clock;
  private readonly submit: SubmitProposal;
  private readonly sequence = new DataSequence();
  private readonly safeTimeSyncIdleMs: number | undefined;
  private readonly clockWithinBound: () => boolean;
  private leaseProposalInFlight = false;
  private handingOver = false;
  /** Acted as primary at the last upkeep tick (to notice gaining primacy). */
  private wasActing = false;
  private stopped = false;
  private lastSafeTimeAdvanceMs: number;

  constructor(options: PartitionReplicaOptions) {
    this.partitionId = options.partitionId;
    this.self = newReplicaIncarnation(options.nodeId, options.random);
    this.nodeName = options.nodeName;
    this.clock = options.clock;
    this.physicalClock = options.physicalClock;
    this.submit = options.submit;
    this.timing = options.timing ?? leaseTiming(options.clock.maxClockSkewMs);
    this.safeTimeSyncIdleMs = options.safeTimeSyncIdleMs;
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
    const decision = decideUpkeep({
      ...facts,
      self: this.self,
      selfName: this.nodeName,
      timing: this.timing,
      appliedTerm: this.stateMachine.appliedTerm(),
      lease: this.stateMachine.currentLease(),
      now: ticks ? this.clock.now() : this.clock.current(),
      leaseProposalInFlight: this.leaseProposalInFlight,
      handingOver: this.handingOver,
      clockWithinBound: this.clockWithinBound(),
      stopped: this.stopped,
      lastSafeTimeAdvanceMs: this.lastSafeTimeAdvanceMs,
      nowMs: this.physicalClock.monotonicMs(),
      proposalsInFlight: this.proposals.inFlightCount,
      ...(this.safeTimeSyncIdleMs === undefined ? {} : { safeTimeSyncIdleMs: this.safeTimeSyncIdleMs }),
      wasActing: this.wasActing,
    });
    this.wasActing = decision.acting;
    return decision;
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
    };
    this.propose((p) => ({ kind: 'Lease', ts: p.ts, proposalId: p.id, lease: action.lease, replaces: action.replaces }))
      .then(done, done)
      .catch(() => {});
  }

  /**
   * Rule 5: stop renewing, so that the next leader's lease starts at the current expiration, and stop granting new
   * locks (handlers ask `isHandingOver`); finish, cleanup and lease confirmations are still served until then.
   */
  handOver(): void {
    this.handingOver = true;
  }

  get isHandingOver(): boolean {
    return this.handingOver;
  }

  /**
   * The replica object stops: every proposal in flight is abandoned (the object is never reused). An abandoned
   * proposal may already sit in followers' logs and apply under its lease, so its outcome is unknown to its proposer.
   */
  stop(): void {
    this.stopped = true;
    const message = `replica of ${this.partitionId} stopped with the proposal in flight; it may still apply`;
    this.proposals.abandonAll(new BasaltError('NODE_UNAVAILABLE', message));
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

  // ---------------------------------------------------------------------------------------- proposals

  /** Proposes any command; resolves with its apply result here (rule 4), rejects if it can no longer apply. */
  propose(build: (proposal: TakenProposal) => PartitionCommand): Promise<ApplyResult> {
    if (this.stopped) {
      const message = `replica of ${this.partitionId} stopped: nothing was proposed`;
      return Promise.reject(new BasaltError('NODE_UNAVAILABLE', message, undefined, { executed: 'no' }));
    }
    return proposeCommand(this.proposals, build, this.submit);
  }

  /** Proposes an Update (one write) or UpdateAll under `token`, with the next sequence number of that lease. */
  proposeData(data: DataProposal): Promise<ApplyResult> {
    return this.propose((p) => {
      const base = {
        ts: p.ts,
        proposalId: p.id,
        token: data.token,
        seq: this.sequence.next(data.token),
        txId: data.txId,
        coordinatorId: data.coordinatorId,
        commitPartitionId: data.commitPartitionId,
        full: data.full,
      };
      const [only] = data.writes;
      return data.writes.length === 1 && only !== undefined
        ? { ...base, kind: 'Update', write: only }
        : { ...base, kind: 'UpdateAll', writes: data.writes };
    });
  }
}
