/**
 * WriteConfirmRequest (rules 4 and 6): before taking commitTs the coordinator asks each primary that answered writes
 * of the tx before they applied for their apply results (pipelined-writes.ts). The primary waits for the tx's
 * operations here first, so every write it admitted has applied or failed by then; a lease change meanwhile answers
 * TX_ABORTED at once (the records belong to one lease).
 *
 * The request also says the tx is committing: its coordinator accepts no new operation once commit began. So its
 * locks here are marked finishing (lock-manager.ts): a younger request then waits for them to be released by the
 * cleanup instead of dying and retrying, which is what a hot key needs, and wait-die stays deadlock free.
 */
import type { WriteConfirmRequest, WriteConfirmResponse } from '../../tx/core/messages.js';
import type { PartitionReplica } from '../partition/partition-replica.js';

export async function handleWriteConfirm(
  p: PartitionReplica,
  request: WriteConfirmRequest,
): Promise<WriteConfirmResponse> {
  const idle = p.operations.whenIdle(request.txId).then(() => {
    p.locks.markFinishing(request.txId);
  });
  return { kind: 'WriteConfirmResponse', writeTs: await p.pipeline.confirm(request.txId, idle) };
}
