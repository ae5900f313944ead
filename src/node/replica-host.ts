/**
 * The partition host that runs real replicas (the `PartitionHost` seam): per assigned partition one
 * `PartitionReplica` (its state machine registered with the node's Raft multiplexer before its group is added, its
 * proposals submitted to the node's Raft driver) added to the node's PartitionDirectory, where the
 * node's request table (replica/request-table.ts) finds it.
 *
 * The replica layer it runs (directory, cleanup driver, resolution, in-line cleanup, background drivers) is built by
 * the node's composition root (compose.ts) and handed over in the host context; the host starts and stops its
 * background work: storage GC, tx state vacuum, the cleanup driver's rescans, and the tx sweep (tx-sweep.ts), which
 * ends the map entries, locks and intents of txs nobody touches again (an installed snapshot's resolved txs are handed
 * to it at once).
 *
 * Upkeep: the host is a loop that asks each replica's pure upkeep decision (primary.ts `decideUpkeep`) on each
 * leader change of its group, after each apply and on a timer (`upkeepIntervalMs`), and on each poll of a graceful
 * drain, and performs the actions it returns: lease proposals (first, renewal, takeover) and idle SafeTimeSyncs; while
 * this node's clock is beyond the bound from the majority (rule 19, measured by membership) the transfer of the Raft
 * leadership to a live replica, so that one takes the lease over once the current one lapses; on a drain, the
 * hand-over's leadership transfer (rule 5); and, when this node gains the lease of a partition, the re-run of the
 * cleanups its commit partition records still owe (`recoverCleanups`). The cleanup driver rescans them on a timer;
 * each hosted partition's lock conflicts feed the in-line cleanup.
 *
 * Rest (partition-replica.ts): the timer runs the upkeep of awake partitions only. One that may rest is put to rest
 * and leaves the timer; its Raft group may then go quiet (the driver asks `isResting`, and wakes a quiet follower
 * once node liveness says its leader's node is gone). A touch (a request, a data proposal, a read, a leader change
 * here) wakes it and runs its upkeep at once, so a lapsed lease is proposed while the first request waits for it; a
 * read that waits for safe time on a follower pokes the leader's node, whose replica wakes in turn.
 *
 * Primaries as this node knows them (`PrimaryHints`): a locally hosted replica's applied lease is the truth; for other
 * partitions the last holder a response or a PRIMARY_MISS named, else a rotating guess among the assigned replicas
 * (a wrong guess answers PRIMARY_MISS with the holder's name, which is learned). The coordinator's placement and the
 * cleanup locator share these hints.
 *
 * Durability: the state machine writes each apply batch (data, lease record and applied position) in one consistent
 * storage step but never flushes; a power loss may lose the unflushed tail of those steps, which leaves an older but
 * consistent applied position, and the Raft driver replays the committed log from there on restart (the log is
 * durable before it is acknowledged, and a compacted prefix is restored from its snapshot). The host flushes the
 * engine on each upkeep tick only to bound what a crash can take back (and the simulator's undo log).
 */

import type { GroupStateMachine } from '../cluster/group-state-machines.js';
import type { MetaView } from '../cluster/metastorage-state.js';
import { assert } from '../core/assert.js';
import type { CounterSink } from '../core/counters.js';
import { BasaltError, missHolder } from '../core/errors.js';
import type { HybridTimestamp, NodeName, PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { META_GROUP } from '../core/partitioning.js';
import { sleep, type TimerHandle } from '../env/timers.js';
import type { CleanupDriver } from '../replica/cleanup/cleanup-driver.js';
import type { InlineCleanup } from '../replica/cleanup/inline-cleanup.js';
import type { StorageGcDriver } from '../replica/partition/gc.js';
import { routingHolder, startedHolder } from '../replica/partition/lease.js';
import { leaseCounting } from '../replica/partition/lease-metrics.js';
import type { PartitionDirectory } from '../replica/partition/partition-directory.js';
import { PartitionReplica } from '../replica/partition/partition-replica.js';
import {
  type LeaseTiming,
  leaseTiming,
  type UpkeepAction,
  type UpkeepDecision,
  type UpkeepOccasion,
} from '../replica/partition/primary.js';
import type { TxStateVacuumDriver } from '../replica/partition/vacuum.js';
import type { ReplicaResolution } from '../replica/replica-resolution.js';
import type { TxSweep } from '../replica/resolution/tx-sweep.js';
import type {
  PartitionHost,
  PartitionHostContext,
  PartitionHostFactory,
  PartitionStopReason,
} from './partition-host.js';

/** Tuning of the partition replicas of every node (the default partition host). */
export interface ReplicaHostOptions {
  /** Period of the replicas' upkeep (lease decisions, idle safe time, storage flush). */
  readonly upkeepIntervalMs?: number;
  /** Length of a primary's lease in HLC ms (default 5 s); must exceed twice the maximum clock skew. */
  readonly leaseDurationMs?: number;
  /** The holder proposes a renewal once this little of its lease is left (default 2 s). */
  readonly leaseRenewMarginMs?: number;
  /** Tx timeout the replicas derive deadlines with; must equal the coordinators' `txTimeoutMs` (default 30 s). */
  readonly txTimeoutMs?: number;
  /** Longest wait of one lock request before it fails TX_LOCK_CONFLICT (default 10 s). */
  readonly lockWaitTimeoutMs?: number;
  /** A leader proposes an idle SafeTimeSync once applied safe time has not moved for this long (default 1 s). */
  readonly safeTimeSyncIdleMs?: number;
  /**
   * Idle partitions rest and their Raft groups go quiet (see Rest above). Off by default: a resting holder's lease
   * lapses, and harnesses that wait for "every partition has a primary" would wait for a request first.
   */
  readonly rest?: boolean;
  /**
   * Data writes of many txs proposed within one turn of the event loop share one Raft entry (an UpdateBatch,
   * write-batcher.ts) instead of one entry each. Off by default.
   */
  readonly batchWrites?: boolean;
  /** With `batchWrites`: how long a batch gathers writes (default 0: the rest of the turn). */
  readonly batchWritesGatherMs?: number;
  /** Unused this long, a partition rests (partition-replica.ts "Rest"; default LIMITS.replicaRestAfterMsDefault). */
  readonly restAfterMs?: number;
  /** Period of the upkeep timer while no partition is awake (default LIMITS.replicaRestingUpkeepIntervalMs). */
  readonly restingUpkeepIntervalMs?: number;
  /** MVCC history kept below `now` (the low watermark's retention; default LIMITS.lowWatermarkRetentionMsDefault). */
  readonly lowWatermarkRetentionMs?: number;
}

const UPKEEP_INTERVAL_MS_DEFAULT = 25;
const TICK: UpkeepOccasion = { kind: 'tick' };

interface Hosted {
  readonly replica: PartitionReplica;
  readonly replicas: readonly NodeName[];
  readonly undo: (() => void)[];
}

/** What the replica host uses of its node: the node's context, with the replica layer the composition root built. */
export type ReplicaHostContext = Pick<
  PartitionHostContext,
  | 'self'
  | 'identity'
  | 'clock'
  | 'hlc'
  | 'timers'
  | 'random'
  | 'membership'
  | 'raft'
  | 'stateMachines'
  | 'logStorage'
  | 'storage'
  | 'txStates'
  | 'onLeaderChange'
  | 'onError'
  | 'counters'
  | 'replicas'
>;

export class ReplicaPartitionHost implements PartitionHost {
  /** Write intent resolution for reads (local map → coordinator → commit partition) and recovery of orphans. */
  readonly resolution: ReplicaResolution;
  /** Cleans finished lock holders in line for the requests they block. */
  readonly inline: InlineCleanup;
  /** Ends what txs left behind here when nobody trips over it (tx-sweep.ts). */
  readonly sweep: TxSweep;
  private readonly partitions: PartitionDirectory;
  private readonly cleanups: CleanupDriver;
  private readonly gc: StorageGcDriver;
  private readonly vacuum: TxStateVacuumDriver;
  private readonly context: ReplicaHostContext;
  private readonly options: ReplicaHostOptions;
  private readonly hosted = new Map<PartitionId, Hosted>();
  /** Partitions whose upkeep the timer runs: every hosted one that does not rest. */
  private readonly awake = new Set<PartitionId>();
  private readonly unsubscribe: (() => void)[] = [];
  private timer: TimerHandle | undefined;
  /** The armed timer is the slow one (no partition was awake). */
  private timerResting = false;
  private readonly timing: LeaseTiming;
  private stopped = false;

  /** Runs the replica layer's background drivers and the upkeep until `shutdown`. */
  constructor(context: ReplicaHostContext, options: ReplicaHostOptions = {}) {
    this.context = context;
    this.options = options;
    this.timing = leaseTiming(context.hlc.maxClockSkewMs, options.leaseDurationMs, options.leaseRenewMarginMs);
    const layer = context.replicas;
    this.partitions = layer.partitions;
    this.cleanups = layer.cleanups;
    this.resolution = layer.resolution;
    this.inline = layer.inline;
    this.sweep = layer.sweep;
    this.gc = layer.gc;
    this.vacuum = layer.vacuum;
    this.gc.start();
    this.vacuum.start();
    this.cleanups.start();
    this.sweep.start();
    this.unsubscribe.push(context.onLeaderChange((change) => this.leaderChanged(change.group, change.role)));
    if (options.rest === true) {
      context.raft.quiesceWith({
        peerLive: (name) => context.membership.liveIdOf(name) !== undefined,
        // The metastorage group is idle whenever nothing of it is pending in the driver (its commands are proposals).
        idle: (group) => group === META_GROUP || (this.hosted.get(group)?.replica.isResting ?? false),
        // A follower's read waits for safe time: this node's replica (its leader's) wakes and proposes.
        onWakeRequest: (group) => this.hosted.get(group)?.replica.touch(),
      });
      this.unsubscribe.push(() => context.raft.quiesceWith(undefined));
    }
    this.arm();
  }

  async start(partitionId: PartitionId, replicas: readonly NodeName[]): Promise<void> {
    if (this.stopped) throw new BasaltError('NODE_UNAVAILABLE', `the replica host of ${this.context.self} stopped`);
    const { context, options } = this;
    const replica = new PartitionReplica({
      partitionId,
      nodeId: context.identity.id,
      nodeName: context.self,
      random: context.random.fork(partitionId),
      physicalClock: context.clock,
      clock: context.hlc,
      engine: context.storage,
      txStateMap: context.txStates,
      submit: (bytes) => context.raft.propose(partitionId, bytes),
      timing: this.timing,
      ...(options.txTimeoutMs !== undefined && { txTimeoutMs: options.txTimeoutMs }),
      ...(options.safeTimeSyncIdleMs !== undefined && { safeTimeSyncIdleMs: options.safeTimeSyncIdleMs }),
      ...(options.restAfterMs !== undefined && { restAfterMs: options.restAfterMs }),
      clockWithinBound: () => context.membership.clockWithinBound(),
      timers: context.timers,
      ...(options.lockWaitTimeoutMs !== undefined && { lockWaitTimeoutMs: options.lockWaitTimeoutMs }),
      counters: context.counters,
      ...(options.batchWrites === true && { batchWrites: true }),
      ...(options.batchWritesGatherMs !== undefined && { batchWritesGatherMs: options.batchWritesGatherMs }),
    });
    const entry: Hosted = { replica, replicas, undo: [] };
    entry.undo.push(
      context.stateMachines.register(partitionId, countingRestores(replica.stateMachine, context.counters)),
    );
    entry.undo.push(this.partitions.add(replica, replicas));
    entry.undo.push(this.resolution.watch(replica));
    entry.undo.push(this.inline.watch(replica));
    entry.undo.push(replica.stateMachine.onSnapshotResolved((txIds) => this.sweep.forget(txIds)));
    // An apply that changed the lease (a first lease, a takeover) or the applied term is decided on at once rather
    // than on the next tick; other applies change nothing the upkeep decides on (most applies are data).
    entry.undo.push(
      replica.stateMachine.onApplied(() => {
        if (replica.appliedChangedUpkeep()) this.upkeep(partitionId, TICK);
      }),
    );
    entry.undo.push(replica.stateMachine.onLeaseChange(leaseCounting(context.counters, replica.self)));
    entry.undo.push(replica.onWake((reason) => this.woken(partitionId, reason)));
    this.hosted.set(partitionId, entry);
    assert(
      this.partitions.get(partitionId) === replica,
      'the directory serves the replica this host holds',
      partitionId,
    );
    this.wake(partitionId);
    try {
      // The assignment lists the preferred leader first.
      await context.raft.addGroup(partitionId, replicas, { preferredLeader: replicas[0] });
    } catch (error) {
      this.release(partitionId);
      throw error;
    }
  }

  /**
   * `removed` also drops what the partition stored, hosted or not (a previous incarnation may have crashed half-way
   * through removing it): the Raft log first, then the MVCC and tx state storage, each removal idempotent, so a crash
   * in between leaves storage that the next incarnation's reconciler finds and removes through this call again.
   */
  async stop(partitionId: PartitionId, reason: PartitionStopReason): Promise<void> {
    const entry = this.hosted.get(partitionId);
    if (entry !== undefined) {
      if (reason === 'node-stopping') entry.replica.handOver();
      await this.context.raft.removeGroup(partitionId);
      this.release(partitionId);
    }
    if (reason !== 'removed') return;
    await this.context.logStorage.removeGroup(partitionId);
    this.context.storage.destroyPartition(partitionId);
    await this.context.storage.flush();
  }

  /**
   * Graceful hand-over before a stop (rule 5), all partitions in parallel, bounded by one lease duration: every
   * replica stops renewing and granting locks; a leader whose own lease still lets it act keeps the leadership (it
   * serves finish, cleanup and lease confirmations until its acting window ends), then hands the leadership to a live
   * replica, whose takeover lease starts at the current expiration. Resolves once every partition is handed over
   * (a takeover applied here, or nothing to hand: a follower holding nothing, no live replica to take it) or the
   * bound has passed.
   */
  async drain(): Promise<void> {
    if (this.stopped || this.hosted.size === 0) return;
    const { clock, timers } = this.context;
    const deadlineMs = clock.monotonicMs() + this.timing.leaseDurationMs;
    for (const entry of this.hosted.values()) entry.replica.handOver();
    const pollMs = this.options.upkeepIntervalMs ?? UPKEEP_INTERVAL_MS_DEFAULT;
    while (
      !this.stopped &&
      [...this.hosted.values()].some((entry) => !this.handedOver(entry, deadlineMs - clock.monotonicMs()))
    ) {
      if (clock.monotonicMs() >= deadlineMs) {
        this.context.counters.add('drain.timeouts');
        return;
      }
      await sleep(timers, pollMs);
    }
  }

  /** The leaseholder as this node's applied lease names it, while that lease has started and not expired. */
  primaryOf(partitionId: PartitionId): NodeName | undefined {
    const replica = this.hosted.get(partitionId)?.replica;
    return replica === undefined ? undefined : startedHolder(replica.leaseView(this.context.hlc.current()));
  }

  /** The hosted partition replica (tests and diagnostics). */
  partition(partitionId: PartitionId): PartitionReplica | undefined {
    return this.hosted.get(partitionId)?.replica;
  }

  /** Stops the upkeep and the request handlers; replicas still hosted are stopped. */
  shutdown(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer !== undefined) this.context.timers.clearTimer(this.timer);
    this.gc.stop();
    this.vacuum.stop();
    this.cleanups.stop();
    this.sweep.stop();
    for (const u of this.unsubscribe.splice(0)) u();
    for (const partitionId of [...this.hosted.keys()]) this.release(partitionId);
  }

  // ---------------------------------------------------------------------------------------- internals

  private release(partitionId: PartitionId): void {
    const entry = this.hosted.get(partitionId);
    if (entry === undefined) return;
    this.hosted.delete(partitionId);
    this.awake.delete(partitionId);
    entry.replica.stop();
    for (const undo of entry.undo.reverse()) undo();
    assert(this.partitions.get(partitionId) !== entry.replica, 'a released replica leaves the directory', partitionId);
  }

  /** `partitionId`'s upkeep runs on the timer again, which ticks fast from now on. */
  private wake(partitionId: PartitionId): void {
    assert(this.hosted.has(partitionId), 'only a hosted partition is awake', partitionId);
    this.awake.add(partitionId);
    if (!this.timerResting || this.timer === undefined || this.stopped) return;
    this.context.timers.clearTimer(this.timer);
    this.arm();
  }

  /**
   * The upkeep timer: every `upkeepIntervalMs` while a partition is awake, else only every
   * `restingUpkeepIntervalMs` (for the flush; an idle node should not wake its process 40 times a second).
   */
  private arm(): void {
    const interval = this.options.upkeepIntervalMs ?? UPKEEP_INTERVAL_MS_DEFAULT;
    const resting = this.awake.size === 0;
    this.timerResting = resting;
    this.timer = this.context.timers.setTimer(
      () => {
        this.timer = undefined;
        if (this.stopped) return;
        for (const partitionId of this.awake) {
          const replica = this.hosted.get(partitionId)?.replica;
          assert(replica !== undefined, 'an awake partition is hosted', partitionId);
          if (this.options.rest === true && replica.mayRest()) {
            replica.rest();
            this.awake.delete(partitionId);
            this.context.counters.add(REPLICA_HOST_COUNTERS.rests);
          } else this.upkeep(partitionId, TICK);
        }
        this.context.storage.flush().catch(this.context.onError);
        this.arm();
      },
      resting ? (this.options.restingUpkeepIntervalMs ?? LIMITS.replicaRestingUpkeepIntervalMs) : interval,
    );
  }

  /** A leader change is a use of the partition here: a new leader takes the lease over at once. */
  private leaderChanged(partitionId: PartitionId, role: string): void {
    const replica = this.hosted.get(partitionId)?.replica;
    if (replica === undefined) return;
    replica.touch();
    this.upkeep(partitionId, TICK);
    // Reads waiting here for safe time asked the former leader: ask the new one.
    if (role !== 'leader' && replica.readWaiterCount > 0) this.context.raft.pokeLeader(partitionId);
  }

  /** A resting replica was used: its upkeep runs again (now, and on the timer); a waiting read asks the leader. */
  private woken(partitionId: PartitionId, reason: 'used' | 'safe-time'): void {
    if (this.stopped || !this.hosted.has(partitionId)) return;
    if (reason === 'used') {
      this.wake(partitionId);
      this.upkeep(partitionId, TICK);
      return;
    }
    if (this.context.raft.status(partitionId)?.role !== 'leader') this.context.raft.pokeLeader(partitionId);
  }

  /**
   * Decides one partition's upkeep on `occasion` (primary.ts `decideUpkeep`) and performs it: the replica's own
   * proposals, leadership transfers, and the cleanups a gained primacy owes. Undefined if nothing is hosted (or the
   * decision failed: a bug, reported; it runs after applies, which it must not break).
   */
  private upkeep(partitionId: PartitionId, occasion: UpkeepOccasion): UpkeepDecision | undefined {
    const entry = this.hosted.get(partitionId);
    if (entry === undefined || this.stopped) return undefined;
    const status = this.context.raft.status(partitionId);
    const raft = status === undefined ? undefined : { isLeader: status.role === 'leader', term: status.term };
    let decision: UpkeepDecision;
    try {
      decision = entry.replica.decideUpkeep({ raft, successor: this.liveSuccessor(entry), occasion });
    } catch (error) {
      this.context.onError(error);
      return undefined;
    }
    for (const action of decision.actions) this.perform(entry, action);
    return decision;
  }

  private perform(entry: Hosted, action: UpkeepAction): void {
    const { partitionId } = entry.replica;
    switch (action.kind) {
      case 'propose-lease':
      case 'propose-safe-time-sync':
        try {
          entry.replica.perform(action);
        } catch (error) {
          this.context.onError(error);
        }
        return;
      case 'transfer-leadership':
        this.context.raft.transferLeader(partitionId, action.to);
        return;
      case 'recover-cleanups':
        this.cleanups.recover(partitionId).catch((error: unknown) => this.context.replicas.background(error));
        return;
    }
  }

  /** One poll of `drain` for one partition: true once it has nothing left to hand over. */
  private handedOver(entry: Hosted, remainingMs: number): boolean {
    const decision = this.upkeep(entry.replica.partitionId, { kind: 'drain', remainingMs });
    return decision?.handedOver ?? true;
  }

  /** A live voter of the group's current configuration (it changes as the partition moves) other than this node. */
  private liveSuccessor(entry: Hosted): NodeName | undefined {
    const { membership, self, raft } = this.context;
    const voters = raft.status(entry.replica.partitionId)?.voters ?? entry.replicas;
    return voters.find((name) => name !== self && membership.canSucceed(name));
  }
}

/** The holder named by a PRIMARY_MISS (its typed hint). */
export function holderHint(error: unknown): NodeName | undefined {
  return missHolder(error);
}

/** A coded failure that faults explain (not INTERNAL or STORAGE_CORRUPTED, which mean a bug or a broken disk). */
export function isExpectedFailure(error: unknown): boolean {
  return error instanceof BasaltError && error.code !== 'INTERNAL' && error.code !== 'STORAGE_CORRUPTED';
}

/** The leaseholder a hosted partition's applied lease names, while it has not expired (for the primary hints). */
export function localLeaseHolder(replica: PartitionReplica | undefined, now: HybridTimestamp): NodeName | undefined {
  return replica === undefined ? undefined : routingHolder(replica.leaseView(now));
}

/** The replicas the metastorage view assigns to a partition. */
export function replicasFromView(
  view: MetaView | undefined,
  partitionId: PartitionId,
): readonly NodeName[] | undefined {
  return view?.assignments.find(([p]) => p === partitionId)?.[1] as NodeName[] | undefined;
}

/** A PartitionHostFactory running real replicas. */
export function replicaPartitionHost(options: ReplicaHostOptions = {}): PartitionHostFactory {
  return (context) => new ReplicaPartitionHost(context, options);
}

/** Names of the node counters bumped here. */
export const REPLICA_HOST_COUNTERS = {
  /** Partition replicas restored from a Raft snapshot (one sent by the leader, or the stored one at a restart). */
  snapshotInstalls: 'snapshot.installs',
  /** Partition replicas put to rest (idle; see Rest above). */
  rests: 'replica.rests',
} as const;

/** `machine` as the multiplexer sees it, counting its snapshot restores on the node's counters. */
function countingRestores(machine: GroupStateMachine, counters: CounterSink): GroupStateMachine {
  return {
    appliedIndex: () => machine.appliedIndex(),
    apply: (entries) => machine.apply(entries),
    ...(machine.stage !== undefined && { stage: machine.stage.bind(machine) }),
    snapshot: () => machine.snapshot(),
    restore: (snapshot) => {
      counters.add(REPLICA_HOST_COUNTERS.snapshotInstalls);
      return machine.restore(snapshot);
    },
  };
}
