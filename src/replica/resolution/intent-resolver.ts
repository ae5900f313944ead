/**
 * Write intent resolution for RO reads, as the read handler needs it: given a foreign intent met at readTs, the
 * intent's tx's *true* state (rule 11). Visibility is the reader's decision: the intent's value is visible only when
 * the tx is COMMITTED with commitTs ≤ readTs; otherwise the reader takes the newest committed version ≤ readTs.
 *
 * The node's resolver is `TxStateResolver` (resolver.ts): the local map, then the coordinator path, then the commit
 * partition path, with shared requests, caching of final answers and the write-intent switch of the row (seed 001,
 * rules 11, 12, 16, 17). Handler tests that need no resolution plug in a local-only one (src/testing).
 */
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import type { TxOutcome, TxStateAnswer } from '../../tx/core/messages.js';

export interface IntentResolutionRequest {
  /** The tx owning the intent, and its commit partition (from the intent). */
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  readonly readTs: HybridTimestamp;
  /** Where the intent lives. */
  readonly partitionId: PartitionId;
  readonly key: string;
  /** Commit timestamp of the row's newest committed version, if any. */
  readonly newestCommitTs: HybridTimestamp | undefined;
}

/** A foreign intent met by a read-write request under its own lock: its writer lost its locks with a primary change. */
export interface LostLockRequest {
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  /** Where the intent lives (this primary's partition). */
  readonly partitionId: PartitionId;
  readonly key: string;
}

export interface IntentResolver {
  resolve(request: IntentResolutionRequest): Promise<TxStateAnswer>;
  /**
   * The final outcome of a tx whose intent a read-write request met without its lock, aborting it through its
   * coordinator or commit partition if it is still pending (resolution/lost-locks.ts); undefined while no outcome is
   * final yet. Absent: such intents are never resolved here (the request fails retryably).
   */
  resolveLostLock?(request: LostLockRequest): Promise<TxOutcome | undefined>;
}

/** The reader's visibility rule (rule 11): visible only when committed at or below readTs. */
export function isIntentVisible(answer: TxStateAnswer, readTs: HybridTimestamp): boolean {
  return answer.state === 'COMMITTED' && answer.commitTs <= readTs;
}
