/**
 * The console's cluster view: what one node knows of the cluster, read from its own state without sending anything.
 * Members come from the metastorage view with their liveness as this node's membership judges it (rule 17: live,
 * suspect, gone; a member never seen is unknown). Partitions come from the assignments; for a partition hosted here
 * the Raft status (leader, term, commit and applied index) and the applied lease (holder, window, phase) are this
 * node's own; for one hosted elsewhere only the primary this node routes to is known. Members, tables and partitions
 * are each cut at the limit (`truncated` tells about partitions).
 */

import type { NodeId, NodeName, PartitionId } from '../../core/ids.js';
import { tableIdOf } from '../../core/partitioning.js';
import { physicalMs } from '../../hlc/timestamp.js';
import type { BasaltNode } from '../../node/basalt-node.js';
import { COORDINATOR_SERVICE, type CoordinatorService } from '../../node/coordinator-service.js';
import { ReplicaPartitionHost } from '../../node/replica-host.js';
import type { PartitionReplica } from '../../replica/partition/partition-replica.js';
import { locateOr } from '../../route/primary-directory.js';

export type ConsoleLiveness = 'self' | 'live' | 'suspect' | 'gone' | 'unknown';

export interface ConsoleMember {
  readonly name: string;
  readonly address: string | null;
  readonly state: string;
  readonly dead: boolean;
  readonly metaVoter: boolean;
  readonly liveness: ConsoleLiveness;
  readonly ephemeralId: string | null;
  readonly clockOffsetMs: number | null;
}

export interface ConsoleLease {
  readonly holder: string;
  readonly startMs: number;
  readonly expirationMs: number;
  readonly phase: string;
}

export interface ConsolePartition {
  readonly id: string;
  readonly table: string | null;
  readonly replicas: readonly string[];
  /** The replicas it moves to, while it moves. */
  readonly moveTo: readonly string[] | null;
  readonly hostedHere: boolean;
  readonly leader: string | null;
  readonly term: number | null;
  readonly commitIndex: number | null;
  readonly appliedIndex: number | null;
  /** The primary this node knows (its own applied lease if hosted here, else its routing hint). */
  readonly leaseholder: string | null;
  readonly lease: ConsoleLease | null;
}

export interface ConsoleCluster {
  readonly node: string;
  readonly ephemeralId: string;
  readonly version: string;
  readonly nowMs: number;
  readonly livenessTimeoutMs: number;
  readonly metastorageLeader: string | null;
  readonly metaRevision: number;
  readonly members: readonly ConsoleMember[];
  readonly tables: readonly {
    readonly name: string;
    readonly id: number;
    readonly partitions: number;
    readonly replicas: number;
  }[];
  readonly partitions: readonly ConsolePartition[];
  readonly partitionCount: number;
  readonly truncated: boolean;
}

export function clusterView(node: BasaltNode, version: string, limit: number): ConsoleCluster {
  const view = node.metastorage.view();
  const offsets = node.membership.clockOffsetsMs();
  const members = (view.members ?? []).slice(0, limit).map((m): ConsoleMember => {
    const id = node.membership.currentIdOf(m.name as NodeName);
    return {
      name: m.name,
      address: m.address ?? null,
      state: m.state,
      dead: m.dead === true,
      metaVoter: m.meta === true,
      liveness: livenessOf(node, id),
      ephemeralId: id ?? null,
      clockOffsetMs: offsets[m.name] ?? null,
    };
  });
  const tablesById = new Map(view.tables.map((t) => [t.id, t.name]));
  const targets = new Map(view.targets ?? []);
  const partitions = view.assignments
    .slice(0, limit)
    .map(([id, replicas]) => partitionView(node, id as PartitionId, replicas, tablesById, targets.get(id)));
  return {
    node: node.name,
    ephemeralId: node.self.id,
    version,
    nowMs: physicalMs(node.hlc.current()),
    livenessTimeoutMs: node.membership.timeoutMs,
    metastorageLeader: node.metastorage.leader() ?? null,
    metaRevision: node.metastorage.revision,
    members,
    tables: view.tables
      .slice(0, limit)
      .map((t) => ({ name: t.name, id: t.id, partitions: t.partitions, replicas: t.replicas })),
    partitions,
    partitionCount: view.assignments.length,
    truncated: view.assignments.length > limit,
  };
}

function livenessOf(node: BasaltNode, id: NodeId | undefined): ConsoleLiveness {
  if (id === undefined) return 'unknown';
  return node.membership.liveness(id);
}

/** The replica of a partition hosted on this node, when the node runs real partition replicas. */
export function localReplica(node: BasaltNode, partition: PartitionId): PartitionReplica | undefined {
  return node.partitions instanceof ReplicaPartitionHost ? node.partitions.partition(partition) : undefined;
}

/** The primary this node's requests for `partition` go to (its hint), for a partition it does not host. */
function routedPrimary(node: BasaltNode, partition: PartitionId): string | null {
  const service = node.service<CoordinatorService>(COORDINATOR_SERVICE);
  return service === undefined ? null : locateOr(service.placement.primaries, partition, null);
}

function partitionView(
  node: BasaltNode,
  id: PartitionId,
  replicas: readonly string[],
  tablesById: ReadonlyMap<number, string>,
  moveTo: readonly string[] | undefined,
): ConsolePartition {
  const status = node.raft.status(id);
  const replica = localReplica(node, id);
  const lease = replica?.leaseView(node.hlc.current());
  const tableId = tableIdOf(id);
  return {
    id,
    table: tableId === undefined ? null : (tablesById.get(tableId) ?? null),
    replicas,
    moveTo: moveTo ?? null,
    hostedHere: status !== undefined,
    leader: status?.leader ?? null,
    term: status === undefined ? null : Number(status.term),
    commitIndex: status === undefined ? null : Number(status.commit),
    appliedIndex: status === undefined ? null : Number(status.applied),
    leaseholder: node.partitions.primaryOf?.(id) ?? routedPrimary(node, id),
    lease:
      lease?.lease == null
        ? null
        : {
            holder: lease.lease.holderName,
            startMs: physicalMs(lease.lease.start),
            expirationMs: physicalMs(lease.lease.expiration),
            phase: lease.phase,
          },
  };
}
