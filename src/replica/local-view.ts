/**
 * The RO coordinator's view of the replicas on its own node (tx/read-only.ts `LocalReplicaView`): for each hosted
 * partition, the timestamp up to which a read is served here without waiting. That is applied safe time, or, while
 * the replica acts as primary, its readable safe time at the clock's present reading (now, or just below its oldest
 * proposal in flight): the same rule as `PartitionReplica.readableAt`, so "covers readTs" here means the handler
 * serves at once.
 */
import type { HybridTimestamp, PartitionId } from '../core/ids.js';
import { maxTimestamp } from '../hlc/timestamp.js';
import type { LocalReplicaView } from '../tx/read-only.js';
import type { PartitionRegistry } from './partition-replica.js';

export function localReplicaView(registry: PartitionRegistry): LocalReplicaView {
  return {
    localSafeTime(partitionId: PartitionId): HybridTimestamp | undefined {
      const p = registry.get(partitionId);
      if (p === undefined) return undefined;
      const applied = p.stateMachine.safeTime.current();
      const now = p.clock.current();
      if (p.checkPrimary(now).kind !== 'ok') return applied;
      return maxTimestamp(applied, p.readableSafeTime(now));
    },
  };
}
