/**
 * Public API of Basalt: the embedded cluster and its harness (`startCluster`, `Cluster`), the clients (`connect`,
 * `connectCluster`, the client server), coded errors and the id and timestamp types they carry. Internals (asserts,
 * limits, the protocol layers) are not part of it.
 */

import { type Client, embeddedClient } from './client/client.js';
import { invalidArgument } from './core/errors.js';
import type { NodeName } from './core/ids.js';
import { Cluster, defaultNodeNames } from './harness/cluster.js';
import { RealClusterEnvironment } from './harness/real-cluster.js';
import type { NodeServiceFactory, NodeTuning } from './node/basalt-node.js';
import { nodeRoles } from './node/compose.js';
import type { PartitionHostFactory } from './node/partition-host.js';
import type { ReplicaHostOptions } from './node/replica-host.js';
import { SimClusterEnvironment } from './sim/cluster.js';
import type { TxCoordinatorOptions } from './tx/coordinator/settings.js';

export {
  type BackupOptions,
  type BackupProgress,
  type BackupSource,
  type BackupSummary,
  backup,
  type SnapshotTransaction,
} from './client/backup.js';
export {
  BACKUP_FORMAT,
  BACKUP_FORMAT_VERSION,
  type BackupFile,
  type BackupManifest,
  type BackupParent,
  type BackupTable,
} from './client/backup-format.js';
export type {
  BeginOptions,
  Client,
  KeyValue,
  Lease,
  LeaseKeepAlive,
  PutOptions,
  ReadOptions,
  ScanOptions,
  ScanRange,
  Transaction,
  TransactionOptions,
  Value,
} from './client/client.js';
export { type ClusterClientServerOptions, startClientServer } from './client/cluster-server.js';
export {
  type ConnectOptions,
  type CreateUserOptions,
  connect,
  type RemoteBeginOptions,
  type RemoteClient,
  type RemoteTransaction,
  type RemoteTransactionOptions,
  type RemoteWatchOptions,
  type UserInfo,
} from './client/remote.js';
export {
  RESTORE_MARKER_PREFIX,
  type RestoreOptions,
  type RestoreProgress,
  type RestoreSummary,
  type RestoreTarget,
  type RestoreTransaction,
  restore,
  type VerifySummary,
  verifyBackup,
} from './client/restore.js';
export { type ConnectClusterOptions, connectCluster, RoutingClient } from './client/routing.js';
export { type ScanPagesOptions, type ScanSource, scanPages } from './client/scan-pages.js';
export type { ClientServer, ClientServerOptions } from './client/server.js';
/**
 * Watches: `client.watch(table, { prefix?, range?, fromTimestamp? })` is an async iterable of changes
 * (`{ kind: 'put', key, value, commitTs }`, `{ kind: 'delete', key, deleted: true, commitTs }`) in commit order per
 * key, exactly once, and of progress marks `{ kind: 'resolved', resolvedTs }`: every change at or below resolvedTs
 * was delivered. A `fromTimestamp` no longer retained fails WATCH_TOO_OLD, a consumer that fell that far behind
 * WATCH_FELL_BEHIND; `ChangeSource` and `watchChanges` build the same stream over any source of change pages.
 */
export {
  type ChangeReadPage,
  type ChangeReadRequest,
  type ChangeSource,
  type WatchDelete,
  type WatchEvent,
  type WatchOptions,
  type WatchPut,
  type WatchResolved,
  type WatchStream,
  watchChanges,
} from './client/watch.js';
export type {
  ProtectedTimestamp,
  TableDescriptor,
  TableOptions,
  TableRole,
  UserRole,
} from './cluster/metastorage-state.js';
export {
  BasaltError,
  ERROR_CODES,
  type ErrorCode,
  type ErrorData,
  type ErrorHint,
  type Execution,
  isBasaltError,
} from './core/errors.js';
export type { HybridTimestamp, NodeId, NodeName, PartitionId, TxId } from './core/ids.js';
export {
  Cluster,
  type ClusterNode,
  type Placement,
  type SimulationControls,
  type WaitOptions,
} from './harness/cluster.js';
export type { ClusterNetwork, DroppedMessages, HeldMessages, NetworkFilter } from './harness/network-filters.js';
export { formatTimestamp, hybridTimestamp, logical, physicalMs } from './hlc/timestamp.js';
export type { NodeMetrics, NodeService, NodeServiceFactory, NodeTuning } from './node/basalt-node.js';
export type { PartitionHost, PartitionHostFactory } from './node/partition-host.js';
export type { ReplicaHostOptions } from './node/replica-host.js';
export type { TxCoordinatorOptions } from './tx/coordinator/settings.js';
export type { TxStateView } from './tx/core/tx-state-map.js';

/** Options of {@link startCluster}. */
export interface ClusterOptions {
  /** Number of nodes, named n1..nN (default 3). */
  readonly nodes?: number;
  /** Real-time clusters only: in-process messages (default) or TCP on loopback. */
  readonly transport?: 'memory' | 'tcp';
  /** Real-time clusters only: LMDB under `dataDir/<node name>`; in-memory storage when absent. */
  readonly dataDir?: string;
  /** Virtual time, simulated network, disks and clocks, all driven by `seed`: deterministic. */
  readonly simulation?: {
    /** The seed every choice of the simulation derives from: the same seed, the same run. */
    readonly seed: string | number;
  };
  /** Tuning of every node's runtime (liveness, Raft, clocks, request timeouts). */
  readonly tuning?: NodeTuning;
  /** Replaces the host of partition replicas (default: real replicas with leases, tuned by `replicas`). */
  readonly partitionHost?: PartitionHostFactory;
  /** Tuning of the default replica host (lease length, upkeep period, lock wait, tx timeout). */
  readonly replicas?: ReplicaHostOptions;
  /** Tuning of every node's transaction coordinator (its txTimeoutMs must match `replicas.txTimeoutMs`). */
  readonly coordinator?: TxCoordinatorOptions;
  /** More services built on every node incarnation (each node always runs a transaction coordinator first). */
  readonly services?: readonly NodeServiceFactory[];
  /** Failures of nodes' background work (default: printed to stderr). Under simulation they fail the run instead. */
  readonly onError?: (node: NodeName, error: unknown) => void;
}

/** Starts an in-process cluster (DESIGN §4) and waits until its metastorage is up. */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster<Client>> {
  const names = defaultNodeNames(options.nodes ?? 3);
  const common = {
    names,
    ...(options.tuning !== undefined && { tuning: options.tuning }),
    ...nodeRoles(options),
  };
  if (options.simulation !== undefined) {
    if (options.transport === 'tcp' || options.dataDir !== undefined) {
      throw invalidArgument('a simulated cluster has its own network and disks: drop transport and dataDir');
    }
    return Cluster.start(
      new SimClusterEnvironment({ ...common, seed: options.simulation.seed }),
      names,
      embeddedClient,
    );
  }
  const env = new RealClusterEnvironment({
    ...common,
    transport: options.transport ?? 'memory',
    ...(options.dataDir !== undefined && { dataDir: options.dataDir }),
    onError: options.onError ?? ((node, error) => console.error(`basalt: node ${node}: ${String(error)}`)),
  });
  return Cluster.start(env, names, embeddedClient);
}
