/**
 * One node's write intent resolution and recovery, assembled from its parts so that the node wires it in one place:
 * the resolver the RO read handler uses, the local intent switcher it feeds, the orphan detector watching each hosted
 * partition's lock conflicts (which cleans a reporter partition in line once its recovery is answered), and the commit partition's answers to state and recovery requests (the request table
 * routes TxStateCommitPartitionRequest and TxRecoveryRequest to `commitPartition`).
 *
 * It takes the node's partition directory and the commit partitions' cleanup driver, both built before it, so it is
 * complete once constructed. The local intent switch is off unless `localIntentSwitch` is set (see intent-switch.ts
 * for why).
 */

import type { CounterSink } from '../core/counters.js';
import type { NodeId, NodeIdentity, NodeName } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import type { Timers } from '../env/timers.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { PrimaryDirectory } from '../route/primary-directory.js';
import type { TxRequestFn } from '../tx/core/messages.js';
import type { TxStateMap } from '../tx/core/tx-state-map.js';
import type { CleanupDriver } from './cleanup/cleanup-driver.js';
import { cleanupPartition } from './cleanup/partition-cleanup.js';
import { CommitPartitionStates } from './handlers/commit-partition-state.js';
import type { Settle } from './handlers/outcome-decision.js';
import type { PartitionRegistry, PartitionReplica } from './partition/partition-replica.js';
import type { PeerDirectory } from './ports.js';
import { IntentSwitcher } from './resolution/intent-switch.js';
import { OrphanDetector } from './resolution/orphan-detector.js';
import { TxStateResolver } from './resolution/resolver.js';

export interface ReplicaResolutionOptions {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly physicalClock: Pick<Clock, 'monotonicMs'>;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  /** The node's hosted partitions (the switcher's storages, the commit partitions' records). */
  readonly partitions: PartitionRegistry;
  /** The commit partitions' cleanup driver: recovery's cleanups share its runs with finishes. */
  readonly cleanups: Pick<CleanupDriver, 'ensureCleanup'>;
  readonly counters?: CounterSink;
  readonly onError?: (error: unknown) => void;
  readonly resolutionTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  readonly stateWaitMs?: number;
  /**
   * Also switch a resolved row's intent in local storage (default false: see the hazard in intent-switch.ts). The
   * final outcome is cached in the map either way, so later reads of the intent resolve locally without a message.
   */
  readonly localIntentSwitch?: boolean;
  /** Settles parallel commits' committing records (committing-settle.ts). */
  readonly settle?: Settle;
}

export class ReplicaResolution {
  readonly resolver: TxStateResolver;
  readonly switcher: IntentSwitcher;
  readonly orphans: OrphanDetector;
  /** The commit partition's answers to TxStateCommitPartitionRequest and TxRecoveryRequest. */
  readonly commitPartition: CommitPartitionStates;

  constructor(options: ReplicaResolutionOptions) {
    const common = {
      ...(options.counters === undefined ? {} : { counters: options.counters }),
      ...(options.onError === undefined ? {} : { onError: options.onError }),
    };
    this.switcher = new IntentSwitcher({
      storages: { mvPartition: (partitionId) => options.partitions.get(partitionId)?.mv },
      timers: options.timers,
      ...common,
    });
    this.resolver = new TxStateResolver({
      self: options.self,
      clock: options.clock,
      physicalClock: options.physicalClock,
      timers: options.timers,
      txStates: options.txStates,
      peers: options.peers,
      request: options.request,
      locator: options.locator,
      ...(options.localIntentSwitch === true ? { switcher: this.switcher } : {}),
      ...(options.counters === undefined ? {} : { counters: options.counters }),
      ...(options.resolutionTimeoutMs === undefined ? {} : { timeoutMs: options.resolutionTimeoutMs }),
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
      ...(options.stateWaitMs === undefined ? {} : { stateWaitMs: options.stateWaitMs }),
    });
    this.orphans = new OrphanDetector({
      txStates: options.txStates,
      partitions: options.partitions,
      cleanLocally: cleanupPartition,
      peers: options.peers,
      request: options.request,
      locator: options.locator,
      physicalClock: options.physicalClock,
      ...common,
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
    });
    this.commitPartition = new CommitPartitionStates({
      partitions: options.partitions,
      finish: options.cleanups,
      self: options.self,
      peers: options.peers,
      request: options.request,
      locator: options.locator,
      ...common,
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
      ...(options.stateWaitMs === undefined ? {} : { stateWaitMs: options.stateWaitMs }),
      ...(options.settle === undefined ? {} : { settle: options.settle }),
    });
  }

  /** Watches `partition`'s lock conflicts for orphans; returns the function that stops watching. */
  watch(partition: PartitionReplica): () => void {
    return this.orphans.attach(partition);
  }
}

/** The part of the node's Membership resolution needs (rule 17 lives in its `isGone`). */
export interface MembershipView {
  isGone(id: NodeId): boolean;
  connectedPeers(): readonly NodeIdentity[];
}

/** A PeerDirectory over the node's membership: this node by its own id, peers while their connection is up. */
export function membershipPeers(membership: MembershipView, self: NodeIdentity): PeerDirectory {
  return {
    isGone: (id) => membership.isGone(id),
    nameOf: (id): NodeName | undefined =>
      id === self.id ? self.name : membership.connectedPeers().find((p) => p.id === id)?.name,
  };
}
