/**
 * What applying one partition command produced: every replica computes the same result for the same log position,
 * and the proposer answers from it, never from the proposal (rule 4). Every result carries `appliedTs`, the command's
 * effective timestamp `max(proposed, lastAppliedTs + 1)` (rule 9): the one-phase commit timestamp, the timestamp an
 * acknowledgement must carry, and the safe time it established.
 */
import type { HybridTimestamp, TxId } from '../../core/ids.js';
import type { TxFinalState } from '../../storage/tx-state-storage.js';
import type { Lease, LeaseChange, LeaseRejection } from './lease.js';

export type PrimaryMissReason =
  /** The token does not name the lease current at the command's log position. */
  | 'token-not-current'
  /** The effective timestamp reached the lease's expiration: the write would fall outside the lease. */
  | 'lease-expired'
  /** The per-lease sequence number is not above the last one applied under this lease. */
  | 'stale-sequence'
  /** A tx write whose effective timestamp would be above its proposal timestamp (an earlier entry's was higher). */
  | 'timestamp-moved';

export interface TxOutcome {
  readonly state: TxFinalState;
  readonly commitTs: HybridTimestamp | undefined;
}

export type ApplyResult =
  | {
      readonly kind: 'LEASE_APPLIED';
      readonly appliedTs: HybridTimestamp;
      readonly change: LeaseChange;
      readonly lease: Lease;
    }
  | {
      readonly kind: 'LEASE_REJECTED';
      readonly appliedTs: HybridTimestamp;
      readonly reason: LeaseRejection;
      readonly current: Lease | null;
    }
  /** Data command applied: intents written (or, when `full`, committed versions at `appliedTs`). */
  | { readonly kind: 'UPDATED'; readonly appliedTs: HybridTimestamp; readonly full: boolean; readonly rows: number }
  /** Data command not applied (deterministic no-op); `current` is the holder hint. */
  | {
      readonly kind: 'PRIMARY_MISS';
      readonly appliedTs: HybridTimestamp;
      readonly reason: PrimaryMissReason;
      readonly current: Lease | null;
    }
  /**
   * Data command not applied because a key holds an intent of another tx (or any intent, for one-phase): the
   * primary must resolve it before writing. Nothing of the command was applied.
   */
  | {
      readonly kind: 'WRITE_INTENT_CONFLICT';
      readonly appliedTs: HybridTimestamp;
      readonly key: string;
      readonly intentTxId: TxId;
    }
  /**
   * UpdateBatch: each item's own result (UPDATED, PRIMARY_MISS or WRITE_INTENT_CONFLICT), in item order, as its own
   * Update or UpdateAll command would have answered; each carries this entry's `appliedTs`.
   */
  | { readonly kind: 'UPDATED_BATCH'; readonly appliedTs: HybridTimestamp; readonly items: readonly DataResult[] }
  /**
   * FinishTx: `outcome` is what tx state storage holds after the compare-and-set (rule 14): `stored` says whether
   * this command stored it, `mismatch` whether it differs from what the command asked for.
   */
  | {
      readonly kind: 'FINISHED';
      readonly appliedTs: HybridTimestamp;
      readonly outcome: TxOutcome;
      readonly stored: boolean;
      readonly mismatch: boolean;
      /** A commit carrying writes that stored ABORTED instead (commands.ts CarriedWrites): why. */
      readonly refused?: CarriedRefusal;
    }
  /**
   * FinishTx met (or stored) a committing record (commands.ts FinishTxCommand `committing`): the tx commits at
   * `commitTs` iff every in-flight write applied; `stored` says whether this command stored the record.
   */
  | {
      readonly kind: 'COMMITTING';
      readonly appliedTs: HybridTimestamp;
      readonly commitTs: HybridTimestamp;
      readonly stored: boolean;
    }
  /** FinishTx for a tx at or below the vacuum horizon with no record left (rule 15): not applied. */
  | { readonly kind: 'TX_OUTCOME_UNKNOWN'; readonly appliedTs: HybridTimestamp }
  | { readonly kind: 'SWITCHED'; readonly appliedTs: HybridTimestamp; readonly rows: number }
  | { readonly kind: 'SAFE_TIME'; readonly appliedTs: HybridTimestamp }
  | { readonly kind: 'CLEANUP_MARKED'; readonly appliedTs: HybridTimestamp; readonly marked: number }
  | {
      readonly kind: 'VACUUMED';
      readonly appliedTs: HybridTimestamp;
      readonly removed: readonly TxId[];
      readonly horizon: HybridTimestamp;
    };

export type ApplyResultKind = ApplyResult['kind'];

/** What a data command (or one item of an UpdateBatch) applies as. */
export type DataResult = Extract<ApplyResult, { kind: 'UPDATED' | 'PRIMARY_MISS' | 'WRITE_INTENT_CONFLICT' }>;

/** Why a commit carrying writes stored ABORTED (commands.ts CarriedWrites; 'locks-lost' is the finish handler's). */
export type CarriedRefusal = 'lease-changed' | 'commit-bound' | 'write-intent' | 'locks-lost';
