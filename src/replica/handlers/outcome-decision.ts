/**
 * The commit partition's one outcome decision (DESIGN §2 "Recovery"; rules 11, 13, 14, 15), used by the finish handler
 * (a coordinator's commit or rollback: tx-finish.ts) and by recovery (an abort of a tx whose coordinator is gone:
 * commit-partition-state.ts).
 *
 * The decision is the durable compare-and-set: FinishTx is proposed (switching the tx's intents on this partition in
 * the same entry) and the outcome is read from its apply result, i.e. what was *stored*: the first outcome wins, so
 * a recovery's abort may come back COMMITTED and a finish may come back with the other outcome (the caller answers
 * the mismatch). The primary's map then goes final with the stored outcome ('finish-marker'), retained until cleanup.
 * A tx at or below the vacuum horizon with no record left is not applied: 'vacuumed', and the map is left alone.
 */
import { assert } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { PartitionId, TxId } from '../../core/ids.js';
import type { HybridTimestamp } from '../../hlc/timestamp.js';
import type { InflightWrites } from '../../storage/tx-state-storage.js';
import type { TxOutcome } from '../../tx/core/messages.js';
import { isTimestamp } from '../../tx/core/outcome.js';
import type { ApplyResult, CarriedRefusal, TxOutcome as StoredOutcome } from '../partition/apply-result.js';
import type { CarriedWrites } from '../partition/commands.js';
import type { PartitionReplica } from '../partition/partition-replica.js';

/** What a party asks the compare-and-set to store. */
export interface OutcomeProposal {
  readonly txId: TxId;
  readonly commit: boolean;
  /** A commit's commitTs (rule 13: chosen once by the coordinator); none for an abort. */
  readonly commitTs: HybridTimestamp | undefined;
  readonly enlistedPartitions: readonly PartitionId[];
  /** A commit carrying writes here: `commitTs` is then its lower bound (commands.ts CarriedWrites). */
  readonly carried?: CarriedWrites;
  /** A parallel commit: store a committing record naming these in-flight writes (`stageCommit`). */
  readonly committing?: readonly InflightWrites[];
  /** The outcome of a committing tx, decided from its in-flight writes (committing-settle.ts). */
  readonly settled?: boolean;
}

/** Settles a committing record (committing-settle.ts): the outcome, decided from its in-flight writes. */
export type Settle = (p: PartitionReplica, txId: TxId) => Promise<Decided>;

/**
 * The stored outcome (with, for a carried commit that stored ABORTED instead, why), or 'vacuumed' when FinishTx was
 * refused below the vacuum horizon (rule 15).
 */
export type Decided = (TxOutcome & { readonly refused?: CarriedRefusal }) | 'vacuumed';

/**
 * Proposes the compare-and-set on commit partition `p` and answers with what it stored (module header). A tx with a
 * committing record is settled by `settle` (its writes checked) unless the proposal is a settled one.
 */
export async function decideOutcome(p: PartitionReplica, proposed: OutcomeProposal, settle?: Settle): Promise<Decided> {
  const applied = await proposeFinish(p, proposed);
  if (applied.kind === 'COMMITTING') {
    if (settle === undefined) {
      throw new BasaltError('INTERNAL', `tx ${proposed.txId} is committing and nothing here can settle it`);
    }
    return settle(p, proposed.txId);
  }
  return finished(p, proposed.txId, applied);
}

/** A parallel commit's first step: the committing record stored (its commitTs), or the outcome stored before it. */
export async function stageCommit(
  p: PartitionReplica,
  proposed: OutcomeProposal,
): Promise<Decided | { readonly committing: HybridTimestamp }> {
  assert(proposed.committing !== undefined && proposed.commit, 'a staged commit names its in-flight writes');
  const applied = await proposeFinish(p, proposed);
  if (applied.kind === 'COMMITTING') return { committing: applied.commitTs };
  return finished(p, proposed.txId, applied);
}

function proposeFinish(p: PartitionReplica, proposed: OutcomeProposal): Promise<ApplyResult> {
  const { txId } = proposed;
  assert(proposed.commit === (proposed.commitTs !== undefined), 'a commit carries its commitTs, an abort none', txId);
  return p.propose((proposal) => ({
    kind: 'FinishTx',
    ts: proposal.ts,
    proposalId: proposal.id,
    txId,
    commit: proposed.commit,
    commitTs: proposed.commitTs ?? null,
    enlistedPartitions: proposed.enlistedPartitions,
    switchIntents: true,
    ...(proposed.carried !== undefined && { carried: proposed.carried }),
    ...(proposed.committing !== undefined && { committing: { inflight: proposed.committing } }),
    ...(proposed.settled === true && { settled: true }),
  }));
}

function finished(p: PartitionReplica, txId: TxId, applied: ApplyResult): Decided {
  if (applied.kind === 'TX_OUTCOME_UNKNOWN') return 'vacuumed';
  if (applied.kind !== 'FINISHED') throw new BasaltError('INTERNAL', `FinishTx answered ${applied.kind}`);
  const outcome = storedOutcome(txId, applied.outcome);
  p.txStateMap.update(txId, {
    state: outcome.state,
    commitTimestamp: outcome.state === 'COMMITTED' ? outcome.commitTs : undefined,
    commitPartitionId: p.partitionId,
    reason: 'finish-marker',
    retainUntilCleanup: true,
  });
  return applied.refused === undefined ? outcome : { ...outcome, refused: applied.refused };
}

/** The outcome FinishTx stored, checked (a COMMITTED one carries its commitTs). */
function storedOutcome(txId: TxId, stored: StoredOutcome): TxOutcome {
  if (stored.state === 'ABORTED') return { state: 'ABORTED' };
  if (!isTimestamp(stored.commitTs)) throw new BasaltError('INTERNAL', `COMMITTED ${txId} applied without commitTs`);
  return { state: 'COMMITTED', commitTs: stored.commitTs };
}
