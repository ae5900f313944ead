/**
 * The seam between the node and the replicas it hosts. The node watches the metastorage and, for every partition
 * assigned to it, calls `start` once (when the assignment first appears, or when the node starts and finds it);
 * `stop` when the assignment goes away (`removed`: drop the replica's stored state) or when the node shuts down
 * gracefully (`node-stopping`: keep it). Calls for one partition never overlap: the node waits for each to finish.
 *
 * `PlaceholderPartitionHost` runs each partition's Raft group with an empty state machine; the replica layer replaces
 * it with a host that registers real partition state machines (and answers `primaryOf` from its leases).
 *
 * A host gets the node's parts in its context, the replica layer among them (`ReplicaLayer`, built by the node's
 * composition root before the host, so that the request table and the coordinator share it); each host declares the
 * part of the context it uses.
 */

import { EmptyStateMachine, type GroupStateMachines } from '../cluster/group-state-machines.js';
import type { Membership } from '../cluster/membership.js';
import type { MetaView } from '../cluster/metastorage-state.js';
import type { CounterSink } from '../core/counters.js';
import type { NodeIdentity, NodeName, PartitionId } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { Timers } from '../env/timers.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { MessageBody } from '../net/envelope.js';
import type { Messenger } from '../net/messenger.js';
import type { LeaderChange, RaftDriver } from '../raft/driver.js';
import type { LogStorage } from '../raft/log-storage.js';
import type { CleanupDriver } from '../replica/cleanup/cleanup-driver.js';
import type { InlineCleanup } from '../replica/cleanup/inline-cleanup.js';
import type { TxFinishHandler } from '../replica/handlers/tx-finish.js';
import type { StorageGcDriver } from '../replica/partition/gc.js';
import type { PartitionDirectory } from '../replica/partition/partition-directory.js';
import type { TxStateVacuumDriver } from '../replica/partition/vacuum.js';
import type { ReplicaResolution } from '../replica/replica-resolution.js';
import type { TxSweep } from '../replica/resolution/tx-sweep.js';
import type { PrimaryHints } from '../route/primary-directory.js';
import type { StorageEngine } from '../storage/storage-engine.js';
import type { LowWatermark } from '../tx/core/low-watermark.js';
import type { TxStateMap } from '../tx/core/tx-state-map.js';

export type PartitionStopReason = 'removed' | 'node-stopping';

/** What runs the replicas of partitions on one node: started and stopped as the metastorage assigns them. */
export interface PartitionHost {
  /** Starts this node's replica of `partition`, whose replicas are `replicas`. */
  start(partition: PartitionId, replicas: readonly NodeName[]): Promise<void>;
  /** Stops this node's replica of `partition`. */
  stop(partition: PartitionId, reason: PartitionStopReason): Promise<void>;
  /**
   * Before a graceful stop: hand leases and leaderships over (rule 5), bounded by one lease duration; the node stops
   * its partitions afterwards.
   */
  drain?(): Promise<void>;
  /** The partition's primary as this node knows it, if any: its leaseholder (a host without leases: its Raft leader). */
  primaryOf?(partition: PartitionId): NodeName | undefined;
}

/** What a partition host may use of its node (one incarnation's components). */
export interface PartitionHostContext {
  readonly self: NodeName;
  /** Name and ephemeral id of this incarnation. */
  readonly identity: NodeIdentity;
  readonly clock: Clock;
  readonly hlc: HybridClock;
  /** Retired when the incarnation dies: timers set after a crash never fire. */
  readonly timers: Timers;
  readonly random: Random;
  /** The node's messenger (the request table is registered on it already; a host may add kinds of its own). */
  readonly messenger: Messenger<MessageBody>;
  readonly membership: Membership;
  readonly raft: RaftDriver;
  readonly stateMachines: GroupStateMachines;
  readonly logStorage: LogStorage;
  readonly storage: StorageEngine;
  readonly txStates: TxStateMap;
  /** Leader changes of every Raft group on this node (filter by `change.group`); returns the unsubscribe function. */
  readonly onLeaderChange: (listener: (change: LeaderChange) => void) => () => void;
  /** Failures of background work. */
  readonly onError: (error: unknown) => void;
  /** The node's current metastorage view (tables, assignments), once the metastorage has started. */
  readonly metaView: () => MetaView | undefined;
  /** The node's counters, reported by `metrics()` (resolution paths, recoveries, ...). */
  readonly counters: CounterSink;
  /** The node's replica layer: what a host of real replicas registers its partitions with and runs. */
  readonly replicas: ReplicaLayer;
}

/**
 * The replica side of one node, as its composition root builds it: passive until a host adds partitions to the
 * directory and starts the background drivers (the placeholder host does neither, so its requests find no partition).
 */
export interface ReplicaLayer {
  /** The partitions hosted here; the request table, the drivers and the hints look them up. */
  readonly partitions: PartitionDirectory;
  /** Primaries as this node knows them, shared by the coordinator's placement and the cleanup locator. */
  readonly hints: PrimaryHints;
  /** Below every open RO readTs here: RO reads re-check it, storage GC collects below it. */
  readonly lowWatermark: LowWatermark;
  /** The commit partitions' cleanup driver, shared by the finish handler and recovery. */
  readonly cleanups: CleanupDriver;
  readonly finish: TxFinishHandler;
  /** Write intent resolution for reads and the commit partition's state and recovery answers. */
  readonly resolution: ReplicaResolution;
  readonly inline: InlineCleanup;
  readonly gc: StorageGcDriver;
  readonly vacuum: TxStateVacuumDriver;
  readonly sweep: TxSweep;
  /** Where the layer's background failures go: expected ones (coded, explained by faults) are only counted. */
  readonly background: (error: unknown) => void;
}

/** Builds a node's partition host (`startCluster({ partitionHost })`). */
export type PartitionHostFactory = (context: PartitionHostContext) => PartitionHost;

export class PlaceholderPartitionHost implements PartitionHost {
  private readonly unregister = new Map<PartitionId, () => void>();

  constructor(private readonly context: PartitionHostContext) {}

  async start(partition: PartitionId, replicas: readonly NodeName[]): Promise<void> {
    this.unregister.set(partition, this.context.stateMachines.register(partition, new EmptyStateMachine()));
    await this.context.raft.addGroup(partition, replicas);
  }

  async stop(partition: PartitionId, reason: PartitionStopReason): Promise<void> {
    await this.context.raft.removeGroup(partition);
    this.unregister.get(partition)?.();
    this.unregister.delete(partition);
    if (reason === 'removed') await this.context.logStorage.removeGroup(partition);
  }

  primaryOf(partition: PartitionId): NodeName | undefined {
    return this.context.raft.status(partition)?.leader ?? undefined;
  }
}

export const placeholderPartitionHost: PartitionHostFactory = (context) => new PlaceholderPartitionHost(context);
