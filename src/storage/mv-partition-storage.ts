/**
 * The MVCC partition storage contract (after Apache Ignite 3's `MvPartitionStorage`).
 *
 * Each row (a `RowId`, found through the key index) has a version chain, newest first: at most one *write intent* at
 * its head, tagged with the writing tx and its commit partition, then committed versions with strictly decreasing
 * commit timestamps. Invariant: an intent is newer than every committed version of its row, so if any committed
 * version is newer than a read timestamp the intent cannot be visible at it, and `read` returns the committed
 * version instead.
 *
 * Every operation is synchronous (the Raft state machine applies commands synchronously and deterministically).
 * Expected outcomes are result values; API misuse (oversized key or value, malformed key) throws a coded BasaltError;
 * a broken invariant is an assertion. `runConsistently` groups the writes of one Raft command, including
 * `setLastApplied`, into one atomic step, so after a crash the data and the applied position always agree.
 * `flush()` resolves once everything written before it is durable.
 */
import type { HybridTimestamp, PartitionId, RowId, TxId } from '../core/ids.js';
import type { ReplicatedStorage } from './replicated-storage.js';

/** A value as stored: JSON-compatible data or bytes (bytes come back as a fresh `Buffer`, a Uint8Array subclass). */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | { readonly [key: string]: JsonValue };
/** A value of a row: JSON-compatible data, or bytes. */
export type Value = JsonValue | Uint8Array;

/** Marks a removed row. A symbol, so that no user value (not even `null`) can be mistaken for it. */
export const TOMBSTONE: unique symbol = Symbol('basalt.tombstone');
export type Tombstone = typeof TOMBSTONE;
/** What one version holds: a value or a tombstone. */
export type RowValue = Value | Tombstone;

/**
 * When a written version stops being visible (DESIGN §4b "Expiry is part of a version"): `ttlMs` milliseconds after
 * its commit timestamp (fixed when it commits), or at the absolute HLC timestamp `at` (a lease's end). A read at T
 * sees a version iff commitTs ≤ T < expiry; at and above its expiry the version reads as a tombstone would.
 */
export type Expiry = { readonly ttlMs: number } | { readonly at: HybridTimestamp };

export interface CommittedRead {
  readonly kind: 'committed';
  readonly value: RowValue;
  readonly commitTs: HybridTimestamp;
  /** When the version read expires (set only for a version with an expiry that had not passed at the read). */
  readonly expiresAt?: HybridTimestamp;
}

export interface IntentRead {
  readonly kind: 'intent';
  readonly value: RowValue;
  readonly txId: TxId;
  readonly commitPartitionId: PartitionId;
  /** Commit timestamp of the row's newest committed version (the reader's fallback if the intent is not visible). */
  readonly newestCommitTimestamp: HybridTimestamp | undefined;
  /**
   * Value of that newest committed version (undefined when there is none), saving the reader a second lookup; a
   * tombstone when it has expired at the read's timestamp.
   */
  readonly newestCommittedValue: RowValue | undefined;
  /** The intent's expiry, when it was written with one (the reader applies it once it knows the commitTs). */
  readonly expiry?: Expiry;
}

export interface EmptyRead {
  readonly kind: 'empty';
}

export type ReadResult = CommittedRead | IntentRead | EmptyRead;

export type AddWriteResult =
  | { readonly status: 'SUCCESS' }
  | { readonly status: 'TX_MISMATCH'; readonly intentTxId: TxId };

export type CommitWriteResult =
  | { readonly status: 'SUCCESS' }
  | { readonly status: 'NO_WRITE_INTENT' }
  | { readonly status: 'TX_MISMATCH'; readonly intentTxId: TxId };

export type AbortWriteResult = CommitWriteResult;

export type AddWriteCommittedResult =
  | { readonly status: 'SUCCESS' }
  | { readonly status: 'WRITE_INTENT_EXISTS'; readonly intentTxId: TxId };

/** A scan range over keys in UTF-8 byte order: a prefix, or `[start, end)` with either bound optional. */
export type KeyRange =
  | { readonly kind: 'prefix'; readonly prefix: string }
  | { readonly kind: 'range'; readonly start?: string; readonly end?: string };

/** Where a scan reads: at a timestamp (like `read`), or the latest state (like `readLatest`, for RW scans). */
export type ReadAt = HybridTimestamp | 'latest';

export interface ScanRow {
  readonly key: string;
  readonly rowId: RowId;
  /** Never empty and never a committed tombstone: those rows are skipped. An intent may hold a tombstone. */
  readonly read: CommittedRead | IntentRead;
}

export interface ScanResult {
  readonly rows: readonly ScanRow[];
  /**
   * The first key in range that the scan did not look at because `limit` rows were returned, or undefined when the
   * range was exhausted. A scan that locks its range locks up to and including this key (DESIGN §2b rule 18), and the
   * next page starts at it.
   */
  readonly nextKey: string | undefined;
}

/** One committed version as a change read returns it. */
export interface ChangedVersion {
  readonly commitTs: HybridTimestamp;
  readonly value: RowValue;
}

/** A row with changes in a window: its committed versions there, oldest first, and its intent if it has one. */
export interface ChangeRow {
  readonly key: string;
  readonly rowId: RowId;
  readonly versions: readonly ChangedVersion[];
  /** The row's intent: its tx may have committed inside the window (the reader resolves it). */
  readonly intent?: IntentRead;
}

export interface ChangesResult {
  readonly rows: readonly ChangeRow[];
  /** The first key in range not looked at because the page was full, or undefined when the range was exhausted. */
  readonly nextKey: string | undefined;
}

export interface GcResult {
  /** Committed versions removed (a removed tombstone counts as one). */
  readonly versionsRemoved: number;
  /** Rows that ended empty and were removed with their key index entry. */
  readonly rowsRemoved: number;
  /** True if GC work at or below the watermark remains (the batch limit was reached). */
  readonly more: boolean;
}

export interface MvPartitionStorage extends ReplicatedStorage {
  /** The row id of `key`, if the key has a row. */
  rowIdOf(key: string): RowId | undefined;
  /** The row id of `key`, creating an empty row for it first if needed. Call it only to write the row next. */
  ensureRowId(key: string): RowId;
  /** The key of a row. */
  keyOf(rowId: RowId): string | undefined;

  /**
   * Adds a write intent for `txId`, or replaces that tx's own intent; a foreign intent yields TX_MISMATCH. With an
   * `expiry`, the version it commits into expires (a relative ttl is counted from its commit timestamp).
   */
  addWrite(rowId: RowId, value: RowValue, txId: TxId, commitPartitionId: PartitionId, expiry?: Expiry): AddWriteResult;
  /** Turns `txId`'s intent into a committed version at `commitTs` (> every committed version of the row). */
  commitWrite(rowId: RowId, commitTs: HybridTimestamp, txId: TxId): CommitWriteResult;
  /** Removes `txId`'s intent. A row left with no version at all is removed with its key index entry. */
  abortWrite(rowId: RowId, txId: TxId): AbortWriteResult;
  /** Adds a committed version directly (one-phase commit); refused while an intent exists. */
  addWriteCommitted(rowId: RowId, value: RowValue, commitTs: HybridTimestamp, expiry?: Expiry): AddWriteCommittedResult;

  /**
   * The newest committed version at or below `ts` (a tombstone if it expired at or below `ts`), or the intent if no
   * committed version is newer than `ts`.
   */
  read(rowId: RowId, ts: HybridTimestamp): ReadResult;
  /**
   * The intent if any, else the newest committed version (RW reads, under locks); with `now`, a committed version
   * expired at or below `now` reads as a tombstone.
   */
  readLatest(rowId: RowId, now?: HybridTimestamp): ReadResult;
  /**
   * Rows of `range` in key order as `read`/`readLatest` sees them at `at`, at most `limit` rows; `now` is the
   * expiry clock of a `'latest'` scan.
   */
  scan(range: KeyRange, at: ReadAt, limit: number, now?: HybridTimestamp): ScanResult;
  /**
   * Rows of `range` in key order with a committed version in `(from, to]` or an intent, each with those versions
   * oldest first (a row is never split). Stops after the row that brings the versions returned to `limit` or more,
   * or after LIMITS.storageChangeRowsExaminedMax rows looked at (then possibly with no row, but a next key).
   * Complete only while `from` is at or above the GC watermark (the caller checks it in the same synchronous step).
   */
  changes(range: KeyRange, from: HybridTimestamp, to: HybridTimestamp, limit: number): ChangesResult;
  /** Rows holding an intent of `txId` (for cleanup and recovery), in row id order. */
  rowsWrittenBy(txId: TxId): readonly RowId[];
  /**
   * Txs holding at least one intent here, in tx id order, the first `limit` after `after` (from the start when
   * undefined); a caller pages through them with the last id returned (the node's tx sweep does).
   */
  intentTxIds(after: TxId | undefined, limit: number): readonly TxId[];

  /**
   * Removes committed versions that no read at or above `lowWatermark` can see: for each row it keeps the newest
   * version at or below the watermark and everything newer; that version goes too if it is a tombstone, or expired at
   * or below the watermark, with nothing newer (no newer version, no intent). A version with an expiry is queued for
   * collection at its expiry timestamp, so it goes once the watermark passes its expiry. Processes at most `limit` queued rows (≤ LIMITS.storageGcBatchMax).
   */
  gc(lowWatermark: HybridTimestamp, limit?: number): GcResult;
}
