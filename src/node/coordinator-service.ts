/**
 * The transaction coordinator as a node service: one `TxCoordinator` per node incarnation, wired to the node's
 * messenger (its `request`, and the coordinator path of state requests), its tx state map and hybrid clock, and a
 * placement answered from the node's metastorage view: a key's partition by the shared key hash
 * (`core/partitioning.ts`), primaries from the partition host's hints (a locally hosted replica's applied lease,
 * else the last holder learned, else a guess among the assigned replicas).
 *
 * A crash drops the coordinator with its incarnation (open txs are then recovered by their commit partitions); a
 * graceful stop cancels its background retries.
 */
import { BasaltError } from '../core/errors.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { partitionIndexOf, tablePartitionId } from '../core/partitioning.js';
import { localReplicaView } from '../replica/local-view.js';
import { TxCoordinator } from '../tx/coordinator.js';
import type { TxPlacement, TxRequestFn } from '../tx/coordinator-ports.js';
import type { TxCoordinatorOptions } from '../tx/coordinator-support.js';
import { LowWatermark } from '../tx/low-watermark.js';
import type { TxRequest, TxResponse } from '../tx/messages.js';
import { ReadOnlyCoordinator } from '../tx/read-only.js';
import type { BasaltNode, NodeService, NodeServiceFactory } from './basalt-node.js';
import type { MetaView, TableDescriptor } from './metastorage-state.js';
import { isExpectedFailure, PrimaryHints, ReplicaPartitionHost } from './replica-host.js';

export const COORDINATOR_SERVICE = 'coordinator';

export class CoordinatorService implements NodeService {
  readonly coordinator: TxCoordinator;
  /** Read-only transactions and implicit reads coordinated on this node. */
  readonly readOnly: ReadOnlyCoordinator;
  private readonly unregister: () => void;

  constructor(node: BasaltNode, options: TxCoordinatorOptions = {}) {
    const hints =
      node.partitions instanceof ReplicaPartitionHost
        ? node.partitions.hints
        : new PrimaryHints(
            (p) => replicasOf(node.metastorage.view(), p),
            () => undefined,
            (name) => name === node.name || node.liveIdOf(name) !== undefined,
          );
    const request: TxRequestFn = (to, body, requestOptions) => node.messenger.request(to, body, requestOptions);
    const placement = new MetaPlacement(() => node.metastorage.view(), hints);
    const host = node.partitions instanceof ReplicaPartitionHost ? node.partitions : undefined;
    this.readOnly = new ReadOnlyCoordinator({
      self: { name: node.name, id: node.ephemeralId },
      clock: node.hlc,
      timers: node.timers,
      request,
      placement,
      local: host === undefined ? { localSafeTime: () => undefined } : localReplicaView(host.router),
      watermark: host?.lowWatermark ?? new LowWatermark({ clock: node.hlc }),
      clockWithinBound: () => node.clockWithinBound(),
    });
    this.coordinator = new TxCoordinator({
      self: { name: node.name, id: node.ephemeralId },
      clock: node.hlc,
      timers: node.timers,
      txStates: node.txStates,
      request,
      placement,
      options,
      clockWithinBound: () => node.clockWithinBound(),
      counters: node.counters,
      random: node.random.fork('coordinator-retries'),
      // Expected under faults (background finish retries, cleanups that gave up): counted; anything else is a bug.
      onError: (error) => {
        if (isExpectedFailure(error)) node.counters.add('coordinator.backgroundFailures');
        else node.reportError(error);
      },
    });
    this.unregister = node.messenger
      .as<TxRequest | TxResponse>()
      .handle('TxStateCoordinatorRequest', (body) => this.coordinator.handleTxStateCoordinatorRequest(body));
  }

  stop(): void {
    this.unregister();
    this.coordinator.stop();
    this.readOnly.stop();
  }
}

/** The coordinator service factory (one coordinator per node incarnation). */
export function coordinatorService(options: TxCoordinatorOptions = {}): NodeServiceFactory {
  return { name: COORDINATOR_SERVICE, create: (node) => new CoordinatorService(node, options) };
}

/** Table → partitions from the node's metastorage view; primaries from the shared hints. */
export class MetaPlacement implements TxPlacement {
  constructor(
    private readonly view: () => MetaView,
    private readonly hints: PrimaryHints,
  ) {}

  partitionOf(table: string, key: string): PartitionId {
    const t = this.table(table);
    return tablePartitionId(t.id, partitionIndexOf(key, t.partitions));
  }

  partitionsOf(table: string): readonly PartitionId[] {
    const t = this.table(table);
    return Array.from({ length: t.partitions }, (_, i) => tablePartitionId(t.id, i));
  }

  primaryHint(partitionId: PartitionId): NodeName {
    const name = this.hints.best(partitionId);
    if (name === undefined) {
      const details = { partitionId };
      throw new BasaltError('NODE_UNAVAILABLE', `no replica of ${partitionId} is known here`, details, {
        executed: 'no',
      });
    }
    return name;
  }

  notePrimary(partitionId: PartitionId, name: NodeName): void {
    this.hints.note(partitionId, name);
  }

  private table(name: string): TableDescriptor {
    const view = this.view();
    const table = view.tables.find((t) => t.name === name);
    // A node that has not learned the metastorage state yet (just started) cannot tell a missing table from one it
    // has not heard of: that is a transient refusal, retryable and certainly not executed, not UNKNOWN_TABLE.
    if (table === undefined && view.revision === 0) {
      throw new BasaltError(
        'NODE_UNAVAILABLE',
        'this node does not know the cluster metadata yet',
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

function replicasOf(view: MetaView, partitionId: PartitionId): readonly NodeName[] | undefined {
  return view.assignments.find(([p]) => p === partitionId)?.[1] as NodeName[] | undefined;
}
