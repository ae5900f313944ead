/**
 * WriteCheckRequest: a parallel commit's check of its in-flight writes on one partition (committing-settle.ts), on
 * that partition's primary.
 *
 * The writes were proposed before the commit record was (the coordinator sends the record once every write was
 * answered, and a pipelined write is answered once proposed). This handler proposes a command of its own and waits
 * for it to apply: Raft then has decided every entry proposed before it (one proposed later in the same term follows
 * it in the log; one of an earlier term that is not in this leader's log before it can never be committed), so each
 * write of the tx has applied by now or never will. The answer is then read from storage: every key holds an intent
 * of the tx. A tx write applies only at its proposal timestamp (state-machine.ts), which its coordinator's commitTs
 * exceeds, so presence is all that needs checking; and no intent of a committing tx is switched or removed before
 * its outcome is final.
 */
import type { WriteCheckRequest, WriteCheckResponse } from '../../tx/core/messages.js';
import type { PartitionReplica } from '../partition/partition-replica.js';

export async function handleWriteCheck(p: PartitionReplica, request: WriteCheckRequest): Promise<WriteCheckResponse> {
  p.actingLease(await p.untilLeaseStart(p.clock.now()));
  await p.propose((proposal) => ({ kind: 'SafeTimeSync', ts: proposal.ts, proposalId: proposal.id }));
  const applied = request.keys.every((key) => {
    const rowId = p.mv.rowIdOf(key);
    if (rowId === undefined) return false;
    const read = p.mv.readLatest(rowId);
    return read.kind === 'intent' && read.txId === request.txId;
  });
  return { kind: 'WriteCheckResponse', applied };
}
