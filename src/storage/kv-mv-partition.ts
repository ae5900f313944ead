/**
 * `MvPartitionStorage` over a `KvStore` (memory or LMDB), one object per partition. Tables (all keys start with the
 * partition prefix):
 *   mv:rows     rowId → row record (key, intent, committed versions; see version-chain.ts)
 *   mv:keys     utf8(key) → rowId          the key index, in UTF-8 byte order, for point lookups and scans
 *   mv:txrows   txId 0x00 rowId → ∅        rows holding an intent of a tx (cleanup, recovery)
 *   mv:gc       ts(8 bytes BE) rowId → ∅   rows with versions that become garbage once the watermark reaches ts
 *   mv:meta     (prefix) → [appliedIndex, appliedTerm, appliedTs, nextRowId]
 *   mv:attrs    utf8(name) → bytes         named metadata records of layers above (see partition-meta.ts)
 * Invariants: a row's key index entry exists iff the row exists; a txrows entry exists iff the row's intent belongs to
 * that tx; a row whose chain has GC work at or below a watermark has a gc entry at or below it. Every mutating
 * method is one atomic step (joining the caller's `runConsistently` if any).
 *
 * Row ids come from a per-partition counter persisted in the meta record, so replicas applying the same commands
 * assign the same ids, but local-only operations (GC, write-intent switches) can make them differ: row ids are
 * replica-local and replicated commands should name keys.
 */
import { assert, unreachable } from '../core/assert.js';
import { invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, LogIndex, PartitionId, RowId, Term, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { MAX_TIMESTAMP, maxTimestamp } from '../hlc/timestamp.js';
import { utf8Bytes, utf8Text } from './codec.js';
import { prefixEnd, rowIdBytes, timestampBytes, txIdBytes, txIdPrefixBytes, withSuffix } from './keys.js';
import { type KvPartitionLayout, KvReplicatedPartition } from './kv-replicated.js';
import type { KvEntry, KvStore, TableName } from './kv-store.js';
import type {
  AbortWriteResult,
  AddWriteCommittedResult,
  AddWriteResult,
  ChangedVersion,
  ChangeRow,
  ChangesResult,
  CommitWriteResult,
  Expiry,
  GcResult,
  KeyRange,
  MvPartitionStorage,
  ReadAt,
  ReadResult,
  RowValue,
  ScanResult,
  ScanRow,
} from './mv-partition-storage.js';
import { TOMBSTONE } from './mv-partition-storage.js';
import {
  assertNewerThanChain,
  committedVersion,
  decodeRow,
  decodeValue,
  EMPTY_READ,
  encodeRow,
  encodeValue,
  type RowRecord,
  readAt,
  readLatest,
  trimRow,
  validateExpiry,
  validateKey,
} from './version-chain.js';

/** Sorts right after the 0x00 separator that ends a tx id in the (txId, rowId) index. */
const PAST_SEPARATOR = new Uint8Array([1]);
const MV_TABLES: readonly TableName[] = ['mv:rows', 'mv:keys', 'mv:txrows', 'mv:gc', 'mv:meta', 'mv:attrs'];

interface MvMeta {
  readonly index: LogIndex;
  readonly term: Term;
  readonly ts: HybridTimestamp;
  readonly nextRowId: number;
}

const INITIAL_META: MvMeta = { index: 0 as LogIndex, term: 0 as Term, ts: 0n as HybridTimestamp, nextRowId: 1 };

const MV_LAYOUT: KvPartitionLayout<MvMeta> = {
  namespace: 'mv',
  tables: MV_TABLES,
  metaTable: 'mv:meta',
  attrsTable: 'mv:attrs',
  what: 'MVCC partition',
  initialMeta: INITIAL_META,
  extraFields: (meta) => [meta.nextRowId],
  fromFields: (applied, [nextRowId, ...rest]) =>
    typeof nextRowId === 'number' && rest.length === 0 ? { ...applied, nextRowId } : undefined,
};

export class KvMvPartition extends KvReplicatedPartition<MvMeta> implements MvPartitionStorage {
  constructor(store: KvStore, partitionId: PartitionId, onDestroy: () => void = () => {}) {
    super(store, partitionId, onDestroy, MV_LAYOUT);
  }

  // ---- key index ----

  rowIdOf(key: string): RowId | undefined {
    this.checkLive();
    const value = this.store.get('mv:keys', withSuffix(this.prefix, validateKey(key)));
    return value === undefined ? undefined : (utf8Text(value) as RowId);
  }

  ensureRowId(key: string): RowId {
    this.checkLive();
    const keyBytes = validateKey(key);
    return this.store.atomically(() => {
      const existing = this.store.get('mv:keys', withSuffix(this.prefix, keyBytes));
      if (existing !== undefined) return utf8Text(existing) as RowId;
      const meta = this.meta();
      const rowId = String(meta.nextRowId) as RowId;
      this.putMeta({ ...meta, nextRowId: meta.nextRowId + 1 });
      this.store.put('mv:keys', withSuffix(this.prefix, keyBytes), utf8Bytes(rowId));
      this.putRow(rowId, { key, intent: undefined, versions: [] });
      return rowId;
    });
  }

  keyOf(rowId: RowId): string | undefined {
    this.checkLive();
    return this.row(rowId)?.key;
  }

  // ---- writes ----

  addWrite(rowId: RowId, value: RowValue, txId: TxId, commitPartitionId: PartitionId, expiry?: Expiry): AddWriteResult {
    this.checkLive();
    validateExpiry(expiry);
    const stored = encodeValue(value);
    return this.store.atomically(() => {
      const row = this.existingRow(rowId);
      if (row.intent !== undefined && row.intent.txId !== txId) {
        return { status: 'TX_MISMATCH', intentTxId: row.intent.txId };
      }
      if (row.intent === undefined) this.store.put('mv:txrows', this.txRowKey(txId, rowId), EMPTY);
      const intent = { txId, commitPartitionId, value: stored, ...(expiry !== undefined && { expiry }) };
      this.putRow(rowId, { ...row, intent });
      return { status: 'SUCCESS' };
    });
  }

  commitWrite(rowId: RowId, commitTs: HybridTimestamp, txId: TxId): CommitWriteResult {
    this.checkLive();
    return this.store.atomically(() => {
      const row = this.row(rowId);
      if (row?.intent === undefined) return { status: 'NO_WRITE_INTENT' };
      if (row.intent.txId !== txId) return { status: 'TX_MISMATCH', intentTxId: row.intent.txId };
      assertNewerThanChain(row, commitTs);
      this.store.delete('mv:txrows', this.txRowKey(txId, rowId));
      this.putCommitted(rowId, row, committedVersion(commitTs, row.intent.value, row.intent.expiry));
      return { status: 'SUCCESS' };
    });
  }

  abortWrite(rowId: RowId, txId: TxId): AbortWriteResult {
    this.checkLive();
    return this.store.atomically(() => {
      const row = this.row(rowId);
      if (row?.intent === undefined) return { status: 'NO_WRITE_INTENT' };
      if (row.intent.txId !== txId) return { status: 'TX_MISMATCH', intentTxId: row.intent.txId };
      this.store.delete('mv:txrows', this.txRowKey(txId, rowId));
      const aborted: RowRecord = { ...row, intent: undefined };
      const head = aborted.versions[0];
      if (head === undefined) {
        this.removeRow(rowId, aborted.key);
      } else {
        this.putRow(rowId, aborted);
        // A tombstone (or an expiring version) kept only because the intent was newer may now go entirely: queue it
        // for GC again.
        if (head.value === null) this.queueGc(head.commitTs, rowId);
        if (head.expiresAt !== undefined) this.queueGc(maxTimestamp(head.expiresAt, head.commitTs), rowId);
      }
      return { status: 'SUCCESS' };
    });
  }

  addWriteCommitted(
    rowId: RowId,
    value: RowValue,
    commitTs: HybridTimestamp,
    expiry?: Expiry,
  ): AddWriteCommittedResult {
    this.checkLive();
    validateExpiry(expiry);
    const stored = encodeValue(value);
    return this.store.atomically(() => {
      const row = this.existingRow(rowId);
      if (row.intent !== undefined) return { status: 'WRITE_INTENT_EXISTS', intentTxId: row.intent.txId };
      assertNewerThanChain(row, commitTs);
      this.putCommitted(rowId, row, committedVersion(commitTs, stored, expiry));
      return { status: 'SUCCESS' };
    });
  }

  private putCommitted(rowId: RowId, row: RowRecord, version: RowRecord['versions'][number]): void {
    const next: RowRecord = { key: row.key, intent: undefined, versions: [version, ...row.versions] };
    this.putRow(rowId, next);
    if (next.versions.length > 1 || version.value === null) this.queueGc(version.commitTs, rowId);
    // An expiring version is garbage once the watermark passes its expiry (if nothing newer came first), and not
    // before the watermark reaches the version itself (an absolute expiry may lie below its commit).
    if (version.expiresAt !== undefined) this.queueGc(maxTimestamp(version.expiresAt, version.commitTs), rowId);
  }

  // ---- reads ----

  read(rowId: RowId, ts: HybridTimestamp): ReadResult {
    this.checkLive();
    if (typeof ts !== 'bigint' || ts <= 0n) throw invalidArgument('a read timestamp must be a positive bigint');
    const row = this.row(rowId);
    return row === undefined ? EMPTY_READ : readAt(row, ts);
  }

  readLatest(rowId: RowId, now?: HybridTimestamp): ReadResult {
    this.checkLive();
    const row = this.row(rowId);
    return row === undefined ? EMPTY_READ : readLatest(row, now);
  }

  scan(range: KeyRange, at: ReadAt, limit: number, now?: HybridTimestamp): ScanResult {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.storageScanRowsMax) {
      throw invalidArgument(`scan limit must be an integer in 1..${LIMITS.storageScanRowsMax}`, { limit });
    }
    if (at !== 'latest' && (typeof at !== 'bigint' || at <= 0n)) {
      throw invalidArgument('a read timestamp must be a positive bigint');
    }
    const [start, end] = this.keyBounds(range);
    const rows: ScanRow[] = [];
    for (const { key, value } of this.store.range('mv:keys', start, end)) {
      const userKey = utf8Text(key.subarray(this.prefix.length));
      if (rows.length === limit) return { rows, nextKey: userKey };
      const rowId = utf8Text(value) as RowId;
      const row = this.row(rowId);
      // Read back: the key index and the rows agree (a key names one row, and that row holds the key).
      assert(row !== undefined && row.key === userKey, 'the key index names a row of its key', rowId, userKey);
      const read = at === 'latest' ? readLatest(row, now) : readAt(row, at);
      if (read.kind === 'empty' || (read.kind === 'committed' && read.value === TOMBSTONE)) continue;
      rows.push({ key: userKey, rowId, read });
    }
    return { rows, nextKey: undefined };
  }

  changes(range: KeyRange, from: HybridTimestamp, to: HybridTimestamp, limit: number): ChangesResult {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.storageScanRowsMax) {
      throw invalidArgument(`change limit must be an integer in 1..${LIMITS.storageScanRowsMax}`, { limit });
    }
    if (typeof from !== 'bigint' || typeof to !== 'bigint' || from < 0n || to <= from) {
      throw invalidArgument('a change window (from, to] needs 0 <= from < to');
    }
    const [start, end] = this.keyBounds(range);
    const rows: ChangeRow[] = [];
    let versionCount = 0;
    let examined = 0;
    for (const { key, value } of this.store.range('mv:keys', start, end)) {
      const userKey = utf8Text(key.subarray(this.prefix.length));
      if (versionCount >= limit || examined >= LIMITS.storageChangeRowsExaminedMax) return { rows, nextKey: userKey };
      examined += 1;
      const rowId = utf8Text(value) as RowId;
      const row = this.row(rowId);
      assert(row !== undefined && row.key === userKey, 'the key index names a row of its key', rowId, userKey);
      const changed = changedRow(row, rowId, from, to);
      if (changed === undefined) continue;
      rows.push(changed);
      versionCount += Math.max(1, changed.versions.length);
    }
    return { rows, nextKey: undefined };
  }

  private keyBounds(range: KeyRange): [Uint8Array, Uint8Array | undefined] {
    const partitionEnd = prefixEnd(this.prefix);
    switch (range.kind) {
      case 'prefix': {
        const start = withSuffix(this.prefix, validateKey(range.prefix));
        return [start, prefixEnd(start) ?? partitionEnd];
      }
      case 'range': {
        const start = withSuffix(this.prefix, validateKey(range.start ?? ''));
        const end = range.end === undefined ? partitionEnd : withSuffix(this.prefix, validateKey(range.end));
        return [start, end];
      }
      default:
        return unreachable(range, 'unknown key range kind');
    }
  }

  rowsWrittenBy(txId: TxId): readonly RowId[] {
    this.checkLive();
    const start = withSuffix(this.prefix, txIdPrefixBytes(txId));
    const rows: RowId[] = [];
    for (const { key } of this.store.range('mv:txrows', start, prefixEnd(start))) {
      rows.push(utf8Text(key.subarray(start.length)) as RowId);
    }
    return rows;
  }

  intentTxIds(after: TxId | undefined, limit: number): readonly TxId[] {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.txStateListMax) {
      throw invalidArgument(`intent tx listing limit must be an integer in 1..${LIMITS.txStateListMax}`, { limit });
    }
    const end = prefixEnd(this.prefix);
    const out: TxId[] = [];
    let start = after === undefined ? this.prefix : this.pastTx(after);
    // One range step per tx: the index holds one key per (tx, row), and a tx may own many rows.
    while (out.length < limit) {
      const first = firstOf(this.store.range('mv:txrows', start, end, 1));
      if (first === undefined) break;
      const rest = first.key.subarray(this.prefix.length);
      const separator = rest.indexOf(0);
      assert(separator > 0, 'a tx row key holds its tx id and a separator');
      const txId = utf8Text(rest.subarray(0, separator)) as TxId;
      out.push(txId);
      start = this.pastTx(txId);
    }
    return out;
  }

  /** The first index key after every (txId, row) key of `txId`: `txId 0x01` (the separator is 0x00). */
  private pastTx(txId: TxId): Uint8Array {
    return withSuffix(this.prefix, txIdBytes(txId), PAST_SEPARATOR);
  }

  // ---- applied position and atomicity ----

  // ---- GC ----

  gc(lowWatermark: HybridTimestamp, limit: number = LIMITS.storageGcBatchMax): GcResult {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.storageGcBatchMax) {
      throw invalidArgument(`gc limit must be an integer in 1..${LIMITS.storageGcBatchMax}`, { limit });
    }
    const start = withSuffix(this.prefix, GC_KEY_START);
    const end =
      lowWatermark >= MAX_TIMESTAMP
        ? prefixEnd(this.prefix)
        : withSuffix(this.prefix, timestampBytes((lowWatermark + 1n) as HybridTimestamp));
    // Nothing to collect (an idle partition, most rounds): no write transaction at all.
    for (const _ of this.store.range('mv:gc', start, end, 1)) {
      return this.store.atomically(() => this.gcWithin(start, end, lowWatermark, limit));
    }
    return { versionsRemoved: 0, rowsRemoved: 0, more: false };
  }

  private gcWithin(
    start: Uint8Array,
    end: Uint8Array | undefined,
    lowWatermark: HybridTimestamp,
    limit: number,
  ): GcResult {
    const entries = [...this.store.range('mv:gc', start, end, limit + 1)].map((e) => Uint8Array.from(e.key));
    let versionsRemoved = 0;
    let rowsRemoved = 0;
    for (const entryKey of entries.slice(0, limit)) {
      this.store.delete('mv:gc', entryKey);
      const rowId = utf8Text(entryKey.subarray(this.prefix.length + 8)) as RowId;
      const row = this.row(rowId);
      if (row === undefined) continue;
      const trimmed = trimRow(row, lowWatermark);
      versionsRemoved += trimmed.versionsRemoved;
      if (trimmed.row === undefined) {
        this.removeRow(rowId, row.key);
        rowsRemoved++;
      } else if (trimmed.versionsRemoved > 0) {
        this.putRow(rowId, trimmed.row);
      }
    }
    return { versionsRemoved, rowsRemoved, more: entries.length > limit };
  }

  // ---- whole partition ----

  // ---- helpers ----

  private row(rowId: RowId): RowRecord | undefined {
    const bytes = this.store.get('mv:rows', withSuffix(this.prefix, rowIdBytes(rowId)));
    return bytes === undefined ? undefined : decodeRow(bytes);
  }

  private existingRow(rowId: RowId): RowRecord {
    const row = this.row(rowId);
    if (row === undefined) throw invalidArgument(`no row ${rowId} in partition ${this.partitionId}`, { rowId });
    return row;
  }

  private putRow(rowId: RowId, row: RowRecord): void {
    this.store.put('mv:rows', withSuffix(this.prefix, rowIdBytes(rowId)), encodeRow(row));
  }

  private removeRow(rowId: RowId, key: string): void {
    this.store.delete('mv:rows', withSuffix(this.prefix, rowIdBytes(rowId)));
    this.store.delete('mv:keys', withSuffix(this.prefix, utf8Bytes(key)));
  }

  private txRowKey(txId: TxId, rowId: RowId): Uint8Array {
    return withSuffix(this.prefix, txIdPrefixBytes(txId), rowIdBytes(rowId));
  }

  private queueGc(ts: HybridTimestamp, rowId: RowId): void {
    this.store.put('mv:gc', withSuffix(this.prefix, timestampBytes(ts), rowIdBytes(rowId)), EMPTY);
  }
}

/** A row's versions in `(from, to]`, oldest first, with its intent; undefined when it has neither. */
/**
 * The row's changes in `(from, to]`, oldest first: each version committed there, and each expiry there (a version
 * that expired before a newer one replaced it) as a removal at its expiry timestamp, which is when every snapshot
 * stops seeing it.
 */
function changedRow(row: RowRecord, rowId: RowId, from: HybridTimestamp, to: HybridTimestamp): ChangeRow | undefined {
  const versions: ChangedVersion[] = [];
  // Stored newest first: `newer` is the commitTs of the version that replaced the one looked at.
  let newer: HybridTimestamp | undefined;
  for (const v of row.versions) {
    const { commitTs, expiresAt } = v;
    if (
      expiresAt !== undefined &&
      expiresAt > commitTs &&
      expiresAt > from &&
      expiresAt <= to &&
      (newer === undefined || newer > expiresAt)
    ) {
      versions.push({ commitTs: expiresAt, value: TOMBSTONE });
    }
    if (commitTs > from && commitTs <= to) versions.push({ commitTs, value: decodeValue(v.value) });
    newer = commitTs;
  }
  versions.sort((a, b) => (a.commitTs < b.commitTs ? -1 : a.commitTs > b.commitTs ? 1 : 0));
  const intent = row.intent === undefined ? undefined : readLatest(row);
  if (versions.length === 0 && intent === undefined) return undefined;
  assert(intent === undefined || intent.kind === 'intent', 'a row with an intent reads it latest');
  return { key: row.key, rowId, versions, ...(intent?.kind === 'intent' && { intent }) };
}

const EMPTY = new Uint8Array(0);
const GC_KEY_START = new Uint8Array(0);

/**
 * The first entry of a range, the iterator closed after it: an iterator left suspended would keep its LMDB read
 * transaction, and with it every page freed since, alive until a collection happens to reclaim it (the file grows).
 */
function firstOf(range: Iterable<KvEntry>): KvEntry | undefined {
  for (const entry of range) return entry;
  return undefined;
}
