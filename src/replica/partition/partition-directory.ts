/**
 * The partitions one node hosts, by id, with the replica set each was started with: the one registry that request
 * handlers, the commit partitions' cleanup driver, the local intent switcher, the RO coordinator's local view, the
 * background drivers (GC, vacuum, tx sweep) and the primary hints read. The partition host adds a partition when its
 * replica starts and removes it when the replica stops; a request for a partition not in here answers PRIMARY_MISS
 * (`not-hosted`, see `assertHosted`).
 *
 * It is built before any of its readers, so none of them waits for another to exist.
 */
import { BasaltError } from '../../core/errors.js';
import type { NodeName, PartitionId } from '../../core/ids.js';
import type { PartitionRegistry, PartitionReplica } from './partition-replica.js';

/** The hosted partitions as the rescan walks them (the router's registry). */
export interface HostedPartitions extends PartitionRegistry {
  hosted(): Iterable<PartitionReplica>;
}

interface Entry {
  readonly partition: PartitionReplica;
  readonly replicas: readonly NodeName[];
}

export class PartitionDirectory implements HostedPartitions {
  private readonly byId = new Map<PartitionId, Entry>();

  /** Hosts `partition` (replicated on `replicas`); returns the function that removes it and stops its waiters. */
  add(partition: PartitionReplica, replicas: readonly NodeName[]): () => void {
    if (this.byId.has(partition.partitionId)) {
      throw new BasaltError('ALREADY_EXISTS', `partition ${partition.partitionId} is registered`);
    }
    const entry: Entry = { partition, replicas };
    this.byId.set(partition.partitionId, entry);
    return () => {
      if (this.byId.get(partition.partitionId) !== entry) return;
      this.byId.delete(partition.partitionId);
      partition.stop();
    };
  }

  get(partitionId: PartitionId): PartitionReplica | undefined {
    return this.byId.get(partitionId)?.partition;
  }

  hosted(): PartitionReplica[] {
    return [...this.byId.values()].map((e) => e.partition);
  }

  /** The replica set a hosted partition was started with (undefined when it is not hosted here). */
  replicasOf(partitionId: PartitionId): readonly NodeName[] | undefined {
    return this.byId.get(partitionId)?.replicas;
  }

  get size(): number {
    return this.byId.size;
  }
}
