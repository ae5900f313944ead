/**
 * WriteConfirmRequest (rules 4 and 6): before taking commitTs the coordinator asks each primary that answered writes
 * of the tx before they applied for their apply results (pipelined-writes.ts). The primary waits for the tx's
 * operations here first, so every write it admitted has applied or failed by then.
 */
import type { WriteConfirmRequest, WriteConfirmResponse } from '../../tx/messages.js';
import type { HostedPartition } from './hosted-partition.js';

export async function handleWriteConfirm(
  p: HostedPartition,
  request: WriteConfirmRequest,
): Promise<WriteConfirmResponse> {
  await p.operations.whenIdle(request.txId);
  return { kind: 'WriteConfirmResponse', writeTs: await p.pipeline.confirm(request.txId) };
}
