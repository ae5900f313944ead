/**
 * One partition's cleanup on its primary (ignite3-protocol.md §7.6), run for a TxCleanupRequest (handlers/tx-cleanup.ts)
 * and in line, for a finished tx's locks met by a request (inline-cleanup.ts):
 * 1. absorb commitTs (rule 8), check primacy (PRIMARY_MISS if this node does not act for the partition);
 * 2. close the tx's operation record (no new operation of the tx runs here), map → final ('cleanup-request') when an
 *    outcome is given, fail the tx's lock waiters, wait for its operations in flight;
 * 3. unless unlock-only: if the tx has intents here, propose its write-intent switch (coalesced, below), release
 *    every lock of a committed tx once that switch is proposed, and await its apply (on the commit partition the
 *    FinishTx entry already switched them, so there is usually none left);
 * 4. release every lock of the tx (all of them, when there was no switch).
 * Idempotent: a repeated cleanup finds no intents and no locks and succeeds again. Unlock-only (a tx that
 * wrote nothing anywhere) skips the switch; it still waits for operations in flight, so that none acquires a lock
 * after the release, and its map entry goes final too, with the tx's true outcome (seed 002, rule 11), so that it is
 * vacuumed after the retention rather than kept PENDING for good. (A primary that missed it and later has the tx
 * recovered by its commit partition ends ABORTED there: for a tx that only read, committing and aborting have the
 * same effect, and with no intent of it anywhere no reader ever resolves it.) A partition that holds an intent of
 * the tx is not cleaned by an unlock-only request (INVALID_ARGUMENT, map untouched): only a cleanup with the tx's
 * real outcome may end it.
 *
 * Switches are coalesced per partition (coalesced-proposals.ts): while one switch command of the partition is being
 * replicated, the switches of the cleanups that arrive meanwhile wait and then go into one WriteIntentSwitchAll (at
 * most intentSwitchBatchMax txs; a lone one stays a WriteIntentSwitch), so that under load a tx costs a fraction of a
 * Raft entry per enlisted partition. Each cleanup of a committed tx releases its locks once the command that holds its
 * switch is proposed, so a hot key's next writer waits for one Raft round less (an abort's once it applied); the cleanup answers once that command applied,
 * and a failed proposal fails every cleanup it carried, as a single one would (the intents stay; whoever meets one
 * resolves it, as after lost locks).
 *
 * The commit partition's cleanup driver sends these requests after the finish was answered, so a request on this
 * primary may meet a finished tx's locks first: the cleanup then runs in line, as the request would (inline-cleanup.ts;
 * also for an intent whose locks were lost, handlers/read-write.ts), and the later request finds nothing left to do.
 */
import { BasaltError, invalidArgument } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import type { TxCleanupRequest } from '../../tx/core/messages.js';
import { coalescerOf, ProposalCoalescer } from '../partition/coalesced-proposals.js';
import type { IntentSwitch } from '../partition/commands.js';
import type { PartitionReplica } from '../partition/partition-replica.js';

/** One partition's cleanup on its primary (see the module header). */
export async function cleanupPartition(p: PartitionReplica, request: TxCleanupRequest): Promise<void> {
  const { txId } = request;
  if (request.unlockOnly && p.mv.rowsWrittenBy(txId).length > 0) {
    throw invalidArgument(`an unlock-only cleanup of ${txId} met its intents`, { txId, partitionId: p.partitionId });
  }
  const { outcome } = request;
  const commitTs = outcome.state === 'COMMITTED' ? outcome.commitTs : undefined;
  const absorbed = commitTs === undefined ? p.clock.now() : p.clock.update(commitTs);
  const now = await p.untilLeaseStart(absorbed);
  p.actingLease(now);
  p.operations.close(txId, p.deadlineOf(txId), now);
  p.pipeline.forget(txId);
  p.txStateMap.update(txId, { state: outcome.state, commitTimestamp: commitTs, reason: 'cleanup-request' });
  p.locks.failWaiters(txId);
  await p.operations.whenIdle(txId);
  if (!request.unlockOnly && p.mv.rowsWrittenBy(txId).length > 0) {
    // A commit's locks go as soon as its switch is in the log: every later write here is proposed after it, so it
    // applies after the switch, and a read under a later holder's lock reads through the intent of a tx COMMITTED
    // here (handlers/read-write.ts "Finished writers"). An abort keeps them until its switch applied (a read would
    // have to read below the intent). The cleanup answers once the switch applied.
    const commit = outcome.state === 'COMMITTED';
    const item = { txId, commit, commitTs: commitTs ?? null };
    await switchCoalescer(p).submit(item, commit ? () => p.locks.releaseAll(txId) : undefined);
  }
  p.locks.releaseAll(txId);
}

const switchCoalescers = new WeakMap<PartitionReplica, ProposalCoalescer<IntentSwitch>>();

/** The switch coalescer of a partition: one WriteIntentSwitch(All) in flight, the switches arriving meanwhile after it. */
function switchCoalescer(p: PartitionReplica): ProposalCoalescer<IntentSwitch> {
  return coalescerOf(switchCoalescers, p, () => {
    return new ProposalCoalescer<IntentSwitch>({
      batchMax: LIMITS.intentSwitchBatchMax,
      key: (one) => `${one.txId}/${one.commit}/${one.commitTs ?? ''}`,
      distinct: (one) => one.txId,
      propose: async (switches) => {
        const applied = await p.propose((proposal) =>
          switches.length === 1
            ? { kind: 'WriteIntentSwitch', ts: proposal.ts, proposalId: proposal.id, ...switches[0]! }
            : { kind: 'WriteIntentSwitchAll', ts: proposal.ts, proposalId: proposal.id, switches },
        );
        if (applied.kind !== 'SWITCHED') {
          const txIds = switches.map((one) => one.txId);
          throw new BasaltError('INTERNAL', `write-intent switch answered ${applied.kind}`, { txIds });
        }
      },
    });
  });
}
