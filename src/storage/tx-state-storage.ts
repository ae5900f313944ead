/**
 * Durable tx state of a commit partition (after Ignite 3's `TxStatePartitionStorage`): txId → final outcome, the
 * enlisted partitions to clean up, and whether cleanup completed.
 *
 * Rules: only final states are stored; the first outcome wins (`compareAndSet` from "no record"), and a later
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

export type CompareAndSetResult =
  /** This call stored `meta`. */
  | { readonly status: 'SUCCESS'; readonly stored: StoredTxMeta }
  /** A record already existed (the first outcome won); `stored` is it, which may or may not equal `meta`. */
  | { readonly status: 'MISMATCH'; readonly stored: StoredTxMeta };

export type MarkCleanupCompletedResult = { readonly status: 'SUCCESS' } | { readonly status: 'NOT_FOUND' };

export interface TxStateStorage extends ReplicatedStorage {
  get(txId: TxId): StoredTxMeta | undefined;
  /** Stores `meta` if no record exists for `txId` (expected state: none). */
  compareAndSet(txId: TxId, expected: null, meta: TxMeta): CompareAndSetResult;
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
