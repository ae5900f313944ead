/**
 * The PRIMARY_MISS error a replica answers when it may not act as primary for a request: its typed hint carries the
 * partition, the reason and the lease this replica knows (the holder's name and lease token), so the sender can go
 * to the holder next (core/errors.ts `hintOf`, tx/coordinator/primary-route.ts).
 */
import { BasaltError } from '../../core/errors.js';
import type { PartitionId } from '../../core/ids.js';
import type { Lease } from './lease.js';

/** PRIMARY_MISS with its typed hint (the partition, why, and the lease this replica knows: where to go next). */
export function primaryMissError(partitionId: PartitionId, reason: string, lease: Lease | null): BasaltError {
  const details: Record<string, unknown> = { partitionId, reason };
  if (lease !== null) details['holderName'] = lease.holderName;
  const holder =
    lease === null
      ? undefined
      : {
          name: lease.holderName,
          token: { holder: { nodeId: lease.holder.nodeId, incarnation: lease.holder.incarnation }, start: lease.start },
        };
  const hint = { kind: 'primary-miss', partitionId, reason, ...(holder !== undefined && { holder }) } as const;
  return new BasaltError('PRIMARY_MISS', `not the primary of ${partitionId} (${reason})`, details, { hint });
}
