/**
 * TxCleanupRequest on an enlisted primary (ignite3-protocol.md §7.6): each listed partition this node acts as primary
 * of is cleaned in parallel by `cleanupPartition` (cleanup/partition-cleanup.ts, which says what a cleanup does). A
 * partition this node does not act for is left out of `cleaned`, so the sender re-resolves its primary; if none was
 * cleaned the whole request answers that PRIMARY_MISS. Idempotent: a repeated cleanup finds nothing left to do and
 * answers success again.
 */
import { invalidArgument } from '../../core/errors.js';
import type { PartitionId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TxCleanupRequest, TxCleanupResponse } from '../../tx/core/messages.js';
import { cleanupPartition } from '../cleanup/partition-cleanup.js';
import { assertHosted, type PartitionRegistry } from '../partition/partition-replica.js';

export async function handleTxCleanup(
  registry: PartitionRegistry,
  request: TxCleanupRequest,
): Promise<TxCleanupResponse> {
  if (request.outcome === undefined) throw invalidArgument('a cleanup needs the outcome');
  if (request.partitions.length > LIMITS.finishEnlistedPartitionsMax) throw invalidArgument('too many partitions');
  const attempts = await Promise.all(
    request.partitions.map((partitionId) =>
      cleanupOn(registry, partitionId, request).then(
        () => ({ partitionId, error: undefined }),
        (error: unknown) => ({ partitionId, error }),
      ),
    ),
  );
  const cleaned: PartitionId[] = attempts.filter((a) => a.error === undefined).map((a) => a.partitionId);
  const failed = attempts.find((a) => a.error !== undefined);
  if (cleaned.length === 0 && failed !== undefined) throw failed.error;
  return { kind: 'TxCleanupResponse', txId: request.txId, cleaned };
}

async function cleanupOn(registry: PartitionRegistry, partitionId: PartitionId, request: TxCleanupRequest) {
  const p = assertHosted(registry.get(partitionId), partitionId);
  await cleanupPartition(p, request);
}
