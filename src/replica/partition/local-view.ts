/**
 * The RO coordinator's view of the replicas on its own node (tx/coordinator/read-only.ts `LocalReplicaView`): for each hosted
 * partition, the timestamp up to which a read is served here without waiting (`PartitionReplica.readableUpTo`: applied
 * safe time, or, while the replica acts as primary, its readable safe time at the clock's present reading). It is the
 * rule the read handler's `readableAt` applies, so "covers readTs" here means the handler serves at once.
 */
import type { HybridTimestamp, PartitionId } from '../../core/ids.js';
import type { LocalReplicaView } from '../../tx/coordinator/read-only.js';
import type { PartitionRegistry } from './partition-replica.js';

export function localReplicaView(registry: PartitionRegistry): LocalReplicaView {
  return {
    localSafeTime(partitionId: PartitionId): HybridTimestamp | undefined {
      return registry.get(partitionId)?.readableUpTo();
    },
  };
}
