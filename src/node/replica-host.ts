/**
 * The partition host that runs real replicas (the `PartitionHost` seam): per assigned partition one
 * `PartitionReplica` (its state machine registered with the node's Raft multiplexer before its group is added, its
 * proposals submitted to the node's Raft driver) and one `HostedPartition` registered in the node's single
 * `ReplicaRequestRouter`, which answers every replica request kind on the node's messenger.
 *
 * Background work besides: storage GC, tx state vacuum, and the tx sweep (tx-sweep.ts), which ends the map entries,
 * locks and intents of txs nobody touches again (an installed snapshot's resolved txs are handed to it at once).
 *
 * Upkeep: every replica's `maintain` runs on each leader change of its group and on a timer (`upkeepIntervalMs`), so
 * leases are proposed, renewed and taken over and idle safe time advances. When this node gains the lease of a
 * partition it re-runs the cleanups its commit partition records still owe (`recoverCleanups`), and the cleanup
 * driver rescans them on a timer; each hosted partition's lock conflicts feed the in-line cleanup. While this node's
 * clock is beyond the bound from the majority (rule 19, measured by membership) its replicas neither act nor propose
 * leases, and it hands the Raft leadership of its groups to a live replica, so that one takes the lease over once the
 * current one lapses.
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
import { BasaltError, missHolder } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { sleep, type TimerHandle } from '../env/timers.js';
import { addMs } from '../hlc/timestamp.js';
import { type CleanupSender, messengerCleanupSender, type PrimaryLocator } from '../replica/cleanup-driver.js';
import { StorageGcDriver } from '../replica/gc.js';
import { HostedPartition } from '../replica/handlers/hosted-partition.js';
import { ReplicaRequestRouter } from '../replica/handlers/router.js';
import { InlineCleanup } from '../replica/inline-cleanup.js';
import { actingEnd, type Lease, sameHolder } from '../replica/lease.js';
import { leaseCounting } from '../replica/lease-metrics.js';
import { PartitionReplica } from '../replica/partition-replica.js';
import { type LeaseTiming, leaseTiming } from '../replica/primary.js';
import {
  membershipPeers,
  type ReplicaResolution,
  replicaResolutionFor,
} from '../replica/resolution/replica-resolution.js';
import { TxSweep } from '../replica/resolution/tx-sweep.js';
import { TxStateVacuumDriver, vacuumPartitionOf } from '../replica/vacuum.js';
import type { TxRequestFn } from '../tx/coordinator-ports.js';
import { LowWatermark } from '../tx/low-watermark.js';
import type { TxRequest, TxResponse } from '../tx/messages.js';
import type { GroupStateMachine } from './group-state-machines.js';
import type { MetaView } from './metastorage-state.js';
import type {
  PartitionHost,
  PartitionHostContext,
  PartitionHostFactory,
  PartitionStopReason,
} from './partition-host.js';

export interface ReplicaHostOptions {
  /** Period of the replicas' upkeep (lease decisions, idle safe time, storage flush). */
  readonly upkeepIntervalMs?: number;
  /** Lease length and renewal margin (defaults: LIMITS). */
  readonly leaseDurationMs?: number;
  readonly leaseRenewMarginMs?: number;
  readonly txTimeoutMs?: number;
  readonly lockWaitTimeoutMs?: number;
  readonly safeTimeSyncIdleMs?: number;
}

const UPKEEP_INTERVAL_MS_DEFAULT = 25;
/** What a graceful hand-over leaves for the leadership to move and the successor's lease to commit. */
const HAND_OVER_MARGIN_MS = 500;

interface Hosted {
  readonly replica: PartitionReplica;
  readonly partition: HostedPartition;
  readonly replicas: readonly NodeName[];
  readonly undo: (() => void)[];
  /** This replica acted under the current lease at the last upkeep (to notice gaining it). */
  holding: boolean;
}

/**
 * Best-known primaries of partitions: learned from responses and PRIMARY_MISS hints, else guessed among the assigned
 * replicas (rotating, so that repeated guesses try every replica).
 */
export class PrimaryHints {
  private readonly learned = new Map<PartitionId, NodeName>();
  private readonly rotation = new Map<PartitionId, number>();

  constructor(
    private readonly replicasOf: (partitionId: PartitionId) => readonly NodeName[] | undefined,
    private readonly localHolder: (partitionId: PartitionId) => NodeName | undefined,
    private readonly isLive: (name: NodeName) => boolean = () => true,
  ) {}

  note(partitionId: PartitionId, name: NodeName): void {
    if (this.learned.size >= LIMITS.txStateMapEntriesMax && !this.learned.has(partitionId)) this.learned.clear();
    this.learned.set(partitionId, name);
  }

  /** Forgets a learned primary that turned out wrong. */
  forget(partitionId: PartitionId, name: NodeName): void {
    if (this.learned.get(partitionId) === name) this.learned.delete(partitionId);
  }

  /**
   * The local lease holder, else the learned holder, else the next guess; a learned or guessed node that is not live
   * is passed over (a crashed primary must not be asked forever). Undefined for an unknown partition.
   */
  best(partitionId: PartitionId): NodeName | undefined {
    const local = this.localHolder(partitionId);
    if (local !== undefined && this.isLive(local)) return local;
    const learned = this.learned.get(partitionId);
    if (learned !== undefined && this.isLive(learned)) return learned;
    return this.guess(partitionId);
  }

  /** The next live replica of the partition, round robin (any replica when none is known live). */
  guess(partitionId: PartitionId): NodeName | undefined {
    const replicas = this.replicasOf(partitionId);
    if (replicas === undefined || replicas.length === 0) return undefined;
    const start = this.rotation.get(partitionId) ?? 0;
    for (let k = 0; k < replicas.length; k++) {
      const i = (start + k) % replicas.length;
      const name = replicas[i];
      if (name !== undefined && this.isLive(name)) {
        this.rotation.set(partitionId, (i + 1) % replicas.length);
        return name;
      }
    }
    this.rotation.set(partitionId, (start + 1) % replicas.length);
    return replicas[start % replicas.length];
  }
}

export class ReplicaPartitionHost implements PartitionHost {
  readonly router: ReplicaRequestRouter;
  readonly hints: PrimaryHints;
  /** Write intent resolution for reads (local map → coordinator → commit partition) and recovery of orphans. */
  readonly resolution: ReplicaResolution;
  /** This node's low watermark: below every open RO readTs here; RO reads re-check it, storage GC collects below. */
  readonly lowWatermark: LowWatermark;
  /** Cleans finished lock holders in line for the requests they block. */
  readonly inline: InlineCleanup;
  private readonly gc: StorageGcDriver;
  private readonly vacuum: TxStateVacuumDriver;
  /** Ends what txs left behind here when nobody trips over it (tx-sweep.ts). */
  readonly sweep: TxSweep;
  private readonly context: PartitionHostContext;
  private readonly options: ReplicaHostOptions;
  private readonly hosted = new Map<PartitionId, Hosted>();
  private readonly unsubscribe: (() => void)[] = [];
  private timer: TimerHandle | undefined;
  private readonly timing: LeaseTiming;
  private stopped = false;
  /** Expected background failures so far (see `background`). */
  backgroundFailures = 0;

  constructor(context: PartitionHostContext, options: ReplicaHostOptions = {}) {
    this.context = context;
    this.options = options;
    this.timing = leaseTiming(context.hlc.maxClockSkewMs, options.leaseDurationMs, options.leaseRenewMarginMs);
    this.hints = new PrimaryHints(
      (p) => this.hosted.get(p)?.replicas ?? replicasFromView(context.metaView(), p),
      (p) => this.localHolder(p),
      (name) => name === context.self || context.membership.liveIdOf(name) !== undefined,
    );
    this.lowWatermark = new LowWatermark({ clock: context.hlc });
    const lowWatermark = () => this.lowWatermark.current();
    // Recovery and resolution requests fail under faults (timeouts, lost leaders): counted like other background work.
    this.resolution = replicaResolutionFor({ ...context, onError: (error) => this.background(error) }, this.locator());
    this.inline = new InlineCleanup({
      self: context.identity,
      peers: membershipPeers(context.membership, context.identity),
      request: ((to: NodeName, body: TxRequest, options: { readonly timeoutMs: number }) =>
        context.messenger.request(to, body, options)) as TxRequestFn,
      locator: this.locator(),
      counters: context.counters,
      onError: (error) => this.background(error),
    });
    const txMessenger = context.messenger.as<TxRequest | TxResponse>();
    this.router = new ReplicaRequestRouter({
      finish: { counters: context.counters },
      sender: this.hintingSender(messengerCleanupSender(txMessenger)),
      locator: this.locator(),
      timers: context.timers,
      resolver: this.resolution.resolver,
      inline: this.inline,
      lowWatermark,
      onError: (error) => this.background(error),
    });
    this.unsubscribe.push(this.router.registerWith(txMessenger));
    this.unsubscribe.push(this.resolution.attach(this.router, txMessenger));
    this.gc = new StorageGcDriver({
      timers: context.timers,
      partitions: () => [...this.hosted.values()].map((e) => e.partition.mv),
      lowWatermark,
      onError: (error) => this.background(error),
    });
    this.vacuum = new TxStateVacuumDriver({
      timers: context.timers,
      clock: context.hlc,
      mapClock: context.clock,
      txStates: context.txStates,
      partitions: () => [...this.hosted.values()].map((e) => vacuumPartitionOf(e.partition)),
      ...(options.txTimeoutMs !== undefined && { txTimeoutMs: options.txTimeoutMs }),
      onError: (error) => this.background(error),
    });
    this.sweep = new TxSweep({
      self: context.identity,
      clock: context.hlc,
      timers: context.timers,
      txStates: context.txStates,
      peers: membershipPeers(context.membership, context.identity),
      partitions: () => [...this.hosted.values()].map((e) => e.partition),
      orphans: this.resolution.orphans,
      counters: context.counters,
      ...(options.txTimeoutMs !== undefined && { txTimeoutMs: options.txTimeoutMs }),
      onError: (error) => this.background(error),
    });
    this.gc.start();
    this.vacuum.start();
    this.router.cleanups.start();
    this.sweep.start();
    this.unsubscribe.push(context.onLeaderChange((change) => this.maintainOne(change.group)));
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
      clockWithinBound: () => context.membership.clockWithinBound(),
    });
    const partition = new HostedPartition({
      replica,
      engine: context.storage,
      txStateMap: context.txStates,
      clock: context.hlc,
      timers: context.timers,
      ...(options.txTimeoutMs !== undefined && { txTimeoutMs: options.txTimeoutMs }),
      ...(options.lockWaitTimeoutMs !== undefined && { lockWaitTimeoutMs: options.lockWaitTimeoutMs }),
      counters: context.counters,
    });
    const entry: Hosted = { replica, partition, replicas, undo: [], holding: false };
    entry.undo.push(
      context.stateMachines.register(partitionId, countingRestores(replica.stateMachine, context.counters)),
    );
    entry.undo.push(this.router.register(partition));
    entry.undo.push(this.resolution.watch(partition));
    entry.undo.push(this.inline.watch(partition));
    entry.undo.push(replica.stateMachine.onSnapshotResolved((txIds) => this.sweep.forget(txIds)));
    // Every apply may change the lease (a first lease, a takeover): decide at once rather than on the next tick.
    entry.undo.push(replica.stateMachine.onApplied(() => this.maintainOne(partitionId)));
    entry.undo.push(replica.stateMachine.onLeaseChange(leaseCounting(context.counters, replica.self)));
    this.hosted.set(partitionId, entry);
    try {
      await context.raft.addGroup(partitionId, replicas);
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
    const lease = this.hosted.get(partitionId)?.replica.stateMachine.currentLease();
    if (lease === null || lease === undefined) return undefined;
    const now = this.context.hlc.current();
    return lease.start <= now && now < lease.expiration ? lease.holderName : undefined;
  }

  /** The hosted partition (tests and diagnostics). */
  partition(partitionId: PartitionId): HostedPartition | undefined {
    return this.hosted.get(partitionId)?.partition;
  }

  /** Stops the upkeep and the request handlers; replicas still hosted are stopped. */
  shutdown(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer !== undefined) this.context.timers.clearTimer(this.timer);
    this.gc.stop();
    this.vacuum.stop();
    this.router.cleanups.stop();
    this.sweep.stop();
    for (const u of this.unsubscribe.splice(0)) u();
    for (const partitionId of [...this.hosted.keys()]) this.release(partitionId);
  }

  // ---------------------------------------------------------------------------------------- internals

  /**
   * Background work that failed: a coded, expected failure under faults (leadership lost before TxCleanupCompleted
   * applied, a cleanup run that ended unfinished: the record stays for the rescan) is only counted; anything else (a bug)
   * goes to the node's error report.
   */
  private background(error: unknown): void {
    if (isExpectedFailure(error)) this.backgroundFailures++;
    else this.context.onError(error);
  }

  private release(partitionId: PartitionId): void {
    const entry = this.hosted.get(partitionId);
    if (entry === undefined) return;
    this.hosted.delete(partitionId);
    entry.replica.stop();
    for (const undo of entry.undo.reverse()) undo();
  }

  private localHolder(partitionId: PartitionId): NodeName | undefined {
    const lease = this.hosted.get(partitionId)?.replica.stateMachine.currentLease();
    if (lease === null || lease === undefined) return undefined;
    return this.context.hlc.current() < lease.expiration ? lease.holderName : undefined;
  }

  private arm(): void {
    const interval = this.options.upkeepIntervalMs ?? UPKEEP_INTERVAL_MS_DEFAULT;
    this.timer = this.context.timers.setTimer(() => {
      this.timer = undefined;
      if (this.stopped) return;
      for (const partitionId of this.hosted.keys()) this.maintainOne(partitionId);
      this.context.storage.flush().catch(this.context.onError);
      this.arm();
    }, interval);
  }

  private maintainOne(partitionId: PartitionId): void {
    const entry = this.hosted.get(partitionId);
    if (entry === undefined || this.stopped) return;
    const status = this.context.raft.status(partitionId);
    if (status === undefined) return;
    try {
      entry.replica.maintain({ isLeader: status.role === 'leader', term: status.term });
    } catch (error) {
      this.context.onError(error);
    }
    if (status.role === 'leader' && !this.context.membership.clockWithinBound()) this.handLeadershipOver(entry);
    const holding = this.acting(entry);
    if (holding && !entry.holding) {
      // Gained primacy: re-run what this commit partition still owes (idempotent).
      this.router.recoverCleanups(partitionId).catch((error: unknown) => this.background(error));
    }
    entry.holding = holding;
  }

  /** One step of `drain` for one partition: true once it has nothing left to hand over. */
  private handedOver(entry: Hosted, remainingMs: number): boolean {
    const { raft, hlc } = this.context;
    const partitionId = entry.replica.partitionId;
    const status = raft.status(partitionId);
    if (status === undefined) return true;
    const successor = this.liveSuccessor(entry);
    if (successor === undefined) return true;
    const lease = entry.replica.stateMachine.currentLease();
    const now = hlc.current();
    const holds = lease !== null && sameHolder(lease.holder, entry.replica.self) && now < lease.expiration;
    if (status.role === 'leader') {
      // Keep serving under our own lease while it lets us act, unless it would outlast the bound (a takeover lease
      // can end up to two durations ahead): then hand over now, so the successor's lease is in place when ours ends.
      const end = holds ? actingEnd(lease, this.timing.maxClockSkewMs) : now;
      const serve = now < end && end <= addMs(now, remainingMs - HAND_OVER_MARGIN_MS);
      if (!serve) raft.transferLeader(partitionId, successor);
      return false;
    }
    return !holds;
  }

  private liveSuccessor(entry: Hosted): NodeName | undefined {
    const { membership, self } = this.context;
    return entry.replicas.find((name) => name !== self && membership.canSucceed(name));
  }

  /** Rule 19: a leader whose clock is beyond the bound hands its group to the first live replica (retried each tick). */
  private handLeadershipOver(entry: Hosted): void {
    const to = this.liveSuccessor(entry);
    if (to !== undefined) this.context.raft.transferLeader(entry.replica.partitionId, to);
  }

  private acting(entry: Hosted): boolean {
    const lease: Lease | null = entry.replica.stateMachine.currentLease();
    return (
      lease !== null &&
      sameHolder(lease.holder, entry.replica.self) &&
      entry.replica.checkPrimary(this.context.hlc.current()).kind === 'ok'
    );
  }

  /** Cleanup requests teach the hints: a PRIMARY_MISS names the holder. */
  private hintingSender(inner: CleanupSender): CleanupSender {
    return {
      request: async (to, body) => {
        try {
          return await inner.request(to, body);
        } catch (error) {
          const holder = holderHint(error);
          for (const p of body.partitions) {
            if (holder !== undefined) this.hints.note(p, holder);
            else this.hints.forget(p, to);
          }
          throw error;
        }
      },
    };
  }

  private locator(): PrimaryLocator {
    return {
      locate: async (partitionId) => {
        const name = this.hints.best(partitionId);
        if (name === undefined) {
          throw new BasaltError('NODE_UNAVAILABLE', `no replica of ${partitionId} is known`, undefined, {
            executed: 'no',
          });
        }
        return name;
      },
    };
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

function replicasFromView(view: MetaView | undefined, partitionId: PartitionId): readonly NodeName[] | undefined {
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
} as const;

/** `machine` as the multiplexer sees it, counting its snapshot restores on the node's counters. */
function countingRestores(
  machine: GroupStateMachine,
  counters: { add(name: string, n?: number): void },
): GroupStateMachine {
  return {
    appliedIndex: () => machine.appliedIndex(),
    apply: (entries) => machine.apply(entries),
    snapshot: () => machine.snapshot(),
    restore: (snapshot) => {
      counters.add(REPLICA_HOST_COUNTERS.snapshotInstalls);
      return machine.restore(snapshot);
    },
  };
}
