/**
 * The PRIMARY_MISS error a replica answers when it may not act as primary for a request: it carries the holder hint of
 * messages.ts, `{ holderName?, holderToken? }`, plus the partition and the reason, so the sender can go to the holder.
 */
import { BasaltError } from '../core/errors.js';
import type { PartitionId } from '../core/ids.js';
import { type Lease, tokenOf } from './lease.js';

/** PRIMARY_MISS with the holder hint of messages.ts: `{ holderName?, holderToken? }` (plus the partition, reason). */
export function primaryMissError(partitionId: PartitionId, reason: string, lease: Lease | null): BasaltError {
  const details: Record<string, unknown> = { partitionId, reason };
  if (lease !== null) {
    details['holderName'] = lease.holderName;
    details['holderToken'] = tokenOf(lease);
  }
  return new BasaltError('PRIMARY_MISS', `not the primary of ${partitionId} (${reason})`, details);
}
