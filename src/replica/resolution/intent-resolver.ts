/**
 * Write intent resolution for RO reads, as the read handler needs it: given a foreign intent met at readTs, the
 * intent's tx's *true* state (rule 11). Visibility is the reader's decision: the intent's value is visible only when
 * the tx is COMMITTED with commitTs ≤ readTs; otherwise the reader takes the newest committed version ≤ readTs.
 *
 * `LocalIntentResolver` is the default until the resolution issue brings the full resolver (local map → coordinator
 * path → commit partition path, shared requests, caching, write-intent switch of the row). It looks only at this
 * node's tx state map and answers PENDING ("not visible") for anything not final here.
 *
 * NOT SAFE YET for fresh reads of commits in flight: a tx this node still sees as PENDING (or has no entry for) may
 * already have chosen a commitTs ≤ readTs on its coordinator (FINISHING) or have it stored on its commit partition,
 * and then the older version this default returns is wrong. Only final local states are trustworthy (rule 11); the
 * coordinator and commit partition paths (rules 12, 16) come with the resolution issue.
 */
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import type { TxOutcome, TxStateAnswer } from '../../tx/core/messages.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';

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

/** Local-only default: final states of this node's map; PENDING (not visible) otherwise. See the module header. */
export class LocalIntentResolver implements IntentResolver {
  constructor(private readonly map: TxStateMap) {}

  resolve(request: IntentResolutionRequest): Promise<TxStateAnswer> {
    return Promise.resolve(localAnswer(this.map, request.txId));
  }
}

export function localAnswer(map: TxStateMap, txId: TxId): TxStateAnswer {
  const entry = map.entry(txId);
  if (entry?.state === 'COMMITTED' && entry.commitTimestamp !== undefined) {
    return { state: 'COMMITTED', commitTs: entry.commitTimestamp };
  }
  if (entry?.state === 'ABORTED') return { state: 'ABORTED' };
  return { state: 'PENDING' };
}
