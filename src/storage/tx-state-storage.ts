/**
 * Durable tx state of a commit partition (after Ignite 3's `TxStatePartitionStorage`): txId → final outcome, the
 * enlisted partitions to clean up, and whether cleanup completed.
 *
 * Rules: final states are stored as records; a parallel commit's committing record is kept apart (`committing`) until
 * a final record replaces it, so no reader of final records ever sees one; the first outcome wins (`compareAndSet` from "no record"), and a later
 * attempt gets the stored outcome back as a result value; a record is removed (vacuum) only after its cleanup
 * completed, which is asserted. The vacuum horizon (DESIGN §2b rule 15) is persisted: records of txs at or below it
 * may be gone, and the replica refuses to finish or recover such txs. Applied position, atomicity, snapshot and
 * restore work as for MVCC storage (see `ReplicatedStorage`).
 */
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import type { ReplicatedStorage } from './replicated-storage.js';

export type TxFinalState = 'COMMITTED' | 'ABORTED';

export interface TxMeta {
  readonly state: TxFinalState;
  /** Set exactly when COMMITTED. */
  readonly commitTs: HybridTimestamp | undefined;
  readonly enlistedPartitions: readonly PartitionId[];
}

export interface StoredTxMeta extends TxMeta {
  readonly txId: TxId;
  readonly cleanupCompleted: boolean;
}

/** Writes of a committing tx whose apply was not yet confirmed when its commit record was written. */
export interface InflightWrites {
  readonly partitionId: PartitionId;
  /** Distinct keys the tx wrote there, at most LIMITS.updateAllWritesMax of them. */
  readonly keys: readonly string[];
}

/**
 * A parallel commit's record (DESIGN §4b "Fewer rounds per commit"): the tx commits at `commitTs` iff every write of
 * `inflight` applied; until a final outcome replaces it, nobody may take the tx for aborted without checking them.
 */
export interface CommittingRecord {
  readonly commitTs: HybridTimestamp;
  readonly enlistedPartitions: readonly PartitionId[];
  readonly inflight: readonly InflightWrites[];
}

export type CompareAndSetResult =
  /** This call stored `meta`. */
  | { readonly status: 'SUCCESS'; readonly stored: StoredTxMeta }
  /** A record already existed (the first outcome won); `stored` is it, which may or may not equal `meta`. */
  | { readonly status: 'MISMATCH'; readonly stored: StoredTxMeta };

export type MarkCleanupCompletedResult = { readonly status: 'SUCCESS' } | { readonly status: 'NOT_FOUND' };

export interface TxStateStorage extends ReplicatedStorage {
  get(txId: TxId): StoredTxMeta | undefined;
  /**
   * Stores `meta` if no final record exists for `txId` (expected state: none); a committing record of the tx goes in
   * the same step.
   */
  compareAndSet(txId: TxId, expected: null, meta: TxMeta): CompareAndSetResult;
  /** The committing record of `txId`, if it has one (and no final record yet). */
  committing(txId: TxId): CommittingRecord | undefined;
  /** Stores a committing record; asserted: the tx has no record of either kind. */
  putCommitting(txId: TxId, record: CommittingRecord): void;
  /** Marks that every enlisted partition finished cleanup; idempotent. */
  markCleanupCompleted(txId: TxId): MarkCleanupCompletedResult;
  /** Removes a record whose cleanup completed (asserted); returns false if there was none. */
  remove(txId: TxId): boolean;
  /** Finished txs whose cleanup has not completed, in txId order, after `afterTxId`, at most `limit` of them. */
  finishedNotCleanedUp(afterTxId: TxId | undefined, limit?: number): readonly StoredTxMeta[];
  /**
   * Every record in txId order (= age order: the oldest tx, hence the earliest deadline, first), after `afterTxId`,
   * at most `limit` of them. Vacuum pages through the oldest records with it.
   */
  records(afterTxId: TxId | undefined, limit?: number): readonly StoredTxMeta[];
  /** Records of txs at or below the horizon may have been vacuumed; 0 at first. */
  vacuumHorizon(): HybridTimestamp;
  /** Raises the horizon (a lower value is ignored: the horizon never goes back). */
  setVacuumHorizon(ts: HybridTimestamp): void;
}
