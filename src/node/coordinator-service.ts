/**
 * The transaction coordinator as a node service: one `TxCoordinator` and one `ReadOnlyCoordinator` per node
 * incarnation, built by the node's composition root from the narrow set of parts they declare
 * (`CoordinatorComponents`): the node's request function, its tx state map and hybrid clock, the replica layer's
 * primary hints, local replica view and low watermark, and a placement answered from the node's metastorage view: a
 * key's partition by the shared key hash (`core/partitioning.ts`), primaries from the hints (a locally hosted
 * replica's applied lease, else the last holder learned, else a guess among the assigned replicas). It answers the
 * coordinator path of write intent resolution (the request table routes TxStateCoordinatorRequest here).
 *
 * A crash drops the coordinator with its incarnation (open txs are then recovered by their commit partitions); a
 * graceful stop cancels its background retries, and from then on state requests are refused as if no coordinator
 * ran here (UNKNOWN_MESSAGE), so that readers take the commit partition path.
 */

import type { MetaView, TableDescriptor } from '../cluster/metastorage-state.js';
import type { CounterSink } from '../core/counters.js';
import { BasaltError } from '../core/errors.js';
import type { NodeIdentity, PartitionId } from '../core/ids.js';
import { partitionIndexOf, tablePartitionId } from '../core/partitioning.js';
import type { Random } from '../env/random.js';
import type { Timers } from '../env/timers.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { PrimaryHints } from '../route/primary-directory.js';
import { hintsDirectory, type PrimaryDirectory } from '../route/primary-directory.js';
import { TxCoordinator } from '../tx/coordinator/coordinator.js';
import type { TxPlacement } from '../tx/coordinator/coordinator-ports.js';
import { type LocalReplicaView, ReadOnlyCoordinator } from '../tx/coordinator/read-only.js';
import type { TxCoordinatorOptions } from '../tx/coordinator/settings.js';
import type { LowWatermark } from '../tx/core/low-watermark.js';
import type { TxRequestFn, TxStateCoordinatorRequest, TxStateResponse } from '../tx/core/messages.js';
import type { TxStateMap } from '../tx/core/tx-state-map.js';
import type { NodeService } from './basalt-node.js';
import { isExpectedFailure } from './replica-host.js';

export const COORDINATOR_SERVICE = 'coordinator';

/** What the coordinator uses of its node. */
export interface CoordinatorComponents {
  readonly self: NodeIdentity;
  readonly hlc: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly request: TxRequestFn;
  readonly metaView: () => MetaView;
  /** Whether the view was recently confirmed current with the metastorage leader (Metastorage.isCurrent). */
  readonly metaCurrent: () => boolean;
  readonly hints: PrimaryHints;
  /** The replicas hosted on this node, for RO reads served without a message. */
  readonly localReplicas: LocalReplicaView;
  readonly lowWatermark: LowWatermark;
  /** Rule 19: false while this node's clock is beyond the bound from a majority. */
  readonly clockWithinBound: () => boolean;
  readonly counters: CounterSink;
  readonly random: Random;
  /** Failures of background work that faults do not explain (bugs). */
  readonly reportError: (error: unknown) => void;
}

export class CoordinatorService implements NodeService {
  readonly coordinator: TxCoordinator;
  /** Read-only transactions and implicit reads coordinated on this node. */
  readonly readOnly: ReadOnlyCoordinator;
  /** Where a key's partition is and who its primary is, as this node knows (clients that route by key ask it). */
  readonly placement: MetaPlacement;
  private readonly self: NodeIdentity;
  private stopped = false;

  constructor(components: CoordinatorComponents, options: TxCoordinatorOptions = {}) {
    const { self, hlc, timers, request, counters } = components;
    this.self = self;
    const placement = new MetaPlacement(components.metaView, components.hints, components.metaCurrent);
    this.placement = placement;
    const clockWithinBound = components.clockWithinBound;
    this.readOnly = new ReadOnlyCoordinator({
      self,
      clock: hlc,
      timers,
      request,
      placement,
      local: components.localReplicas,
      watermark: components.lowWatermark,
      clockWithinBound,
    });
    this.coordinator = new TxCoordinator({
      self,
      clock: hlc,
      timers,
      txStates: components.txStates,
      request,
      placement,
      options,
      clockWithinBound,
      counters,
      random: components.random.fork('coordinator-retries'),
      // Expected under faults (background finish retries, cleanups that gave up): counted; anything else is a bug.
      onError: (error) => {
        if (isExpectedFailure(error)) counters.add('coordinator.backgroundFailures');
        else components.reportError(error);
      },
    });
  }

  /** The coordinator path of write intent resolution (rule 12); refused once this service has stopped. */
  handleStateRequest(request: TxStateCoordinatorRequest): Promise<TxStateResponse> {
    if (this.stopped) {
      const message = `${this.self.name} has no handler for ${request.kind}`;
      return Promise.reject(new BasaltError('UNKNOWN_MESSAGE', message));
    }
    return this.coordinator.handleTxStateCoordinatorRequest(request);
  }

  stop(): void {
    this.stopped = true;
    this.coordinator.stop();
    this.readOnly.stop();
  }
}

/** Table → partitions from the node's metastorage view; primaries from the shared hints. */
export class MetaPlacement implements TxPlacement {
  readonly primaries: PrimaryDirectory;

  constructor(
    private readonly view: () => MetaView,
    readonly hints: PrimaryHints,
    /** True when the view may be trusted to say a table does not exist (see Metastorage.isCurrent). */
    private readonly current: () => boolean = () => true,
  ) {
    this.primaries = hintsDirectory(hints);
  }

  partitionOf(table: string, key: string): PartitionId {
    const t = this.table(table);
    return tablePartitionId(t.id, partitionIndexOf(key, t.partitions));
  }

  partitionsOf(table: string): readonly PartitionId[] {
    const t = this.table(table);
    return Array.from({ length: t.partitions }, (_, i) => tablePartitionId(t.id, i));
  }

  private table(name: string): TableDescriptor {
    const view = this.view();
    const table = view.tables.find((t) => t.name === name);
    // A node that has not learned the metastorage state yet (just started), or may lag behind it (a follower that
    // has not applied the whole log, just after a restart), cannot tell a missing table from one it has not heard of:
    // that is a transient refusal, retryable and certainly not executed, not UNKNOWN_TABLE.
    if (table === undefined && (view.revision === 0 || !this.current())) {
      throw new BasaltError(
        'NODE_UNAVAILABLE',
        view.revision === 0
          ? 'this node does not know the cluster metadata yet'
          : 'this node is checking that its cluster metadata is current',
        { table: name },
        {
          executed: 'no',
        },
      );
    }
    if (table === undefined) throw new BasaltError('UNKNOWN_TABLE', `no table named ${name}`, { table: name });
    return table;
  }
}
