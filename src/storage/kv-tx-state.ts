/**
 * `TxStateStorage` over a `KvStore` (memory or LMDB), one object per commit partition. Tables (keys start with the
 * partition prefix):
 *   txstate:records  txId → [state, commitTs | null, enlistedPartitions, cleanupCompleted]
 *   txstate:pending  txId → ∅    finished txs whose cleanup has not completed (recovery iterates these)
 *   txstate:meta     (prefix) → [appliedIndex, appliedTerm, appliedTs, vacuumHorizon]
 *   txstate:attrs    utf8(name) → bytes   named metadata records of layers above (see partition-meta.ts)
 *   txstate:committing txId → [commitTs, enlistedPartitions, [[partitionId, keys], ...]]   parallel commits not yet final
 * Invariants: a tx has a committing entry or a record, never both (storing the record deletes the entry); a record is final and never overwritten; a pending entry exists iff its record exists with
 * `cleanupCompleted` false; a record is removed only with `cleanupCompleted` true.
 */
import { assert } from '../core/assert.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import type { HybridTimestamp, LogIndex, PartitionId, Term, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { decode, encode, utf8Text } from './codec.js';
import { prefixEnd, txIdBytes, withSuffix } from './keys.js';
import { type KvPartitionLayout, KvReplicatedPartition } from './kv-replicated.js';
import type { KvStore, TableName } from './kv-store.js';
import type {
  CommittingRecord,
  CompareAndSetResult,
  InflightWrites,
  MarkCleanupCompletedResult,
  StoredTxMeta,
  TxMeta,
  TxStateStorage,
} from './tx-state-storage.js';

const TX_TABLES: readonly TableName[] = [
  'txstate:records',
  'txstate:pending',
  'txstate:meta',
  'txstate:attrs',
  'txstate:committing',
];

interface TxStateMeta {
  readonly index: LogIndex;
  readonly term: Term;
  readonly ts: HybridTimestamp;
  readonly vacuumHorizon: HybridTimestamp;
}

const INITIAL_META: TxStateMeta = {
  index: 0 as LogIndex,
  term: 0 as Term,
  ts: 0n as HybridTimestamp,
  vacuumHorizon: 0n as HybridTimestamp,
};

const EMPTY = new Uint8Array(0);

function corrupted(what: string): BasaltError {
  return new BasaltError('STORAGE_CORRUPTED', `malformed tx state ${what}`);
}

function validateMeta(meta: TxMeta): void {
  if (meta.state !== 'COMMITTED' && meta.state !== 'ABORTED') {
    throw invalidArgument(`only final states are stored, not ${String(meta.state)}`);
  }
  if ((meta.state === 'COMMITTED') !== (typeof meta.commitTs === 'bigint' && meta.commitTs > 0n)) {
    throw invalidArgument('a commit timestamp is set exactly when the state is COMMITTED');
  }
  if (!Array.isArray(meta.enlistedPartitions)) throw invalidArgument('enlistedPartitions must be an array');
}

function encodeRecord(meta: TxMeta, cleanupCompleted: boolean): Uint8Array {
  return encode([meta.state, meta.commitTs ?? null, [...meta.enlistedPartitions], cleanupCompleted]);
}

function decodeRecord(txId: TxId, bytes: Uint8Array): StoredTxMeta {
  const fields = decode(bytes);
  if (!Array.isArray(fields) || fields.length !== 4) throw corrupted('record');
  const [state, commitTs, enlisted, cleanupCompleted] = fields as [unknown, unknown, unknown, unknown];
  if (state !== 'COMMITTED' && state !== 'ABORTED') throw corrupted('record state');
  if (commitTs !== null && typeof commitTs !== 'bigint') throw corrupted('record commit timestamp');
  // Read back what validateMeta checked on write: a commit timestamp exactly with COMMITTED.
  if ((state === 'COMMITTED') !== (commitTs !== null && commitTs > 0n)) throw corrupted('record outcome');
  if (!Array.isArray(enlisted) || !enlisted.every((p) => typeof p === 'string')) throw corrupted('record partitions');
  if (typeof cleanupCompleted !== 'boolean') throw corrupted('record cleanup flag');
  return {
    txId,
    state,
    commitTs: commitTs === null ? undefined : (commitTs as HybridTimestamp),
    enlistedPartitions: enlisted as PartitionId[],
    cleanupCompleted,
  };
}

function encodeCommitting(record: CommittingRecord): Uint8Array {
  const inflight = record.inflight.map((w) => [w.partitionId, [...w.keys]]);
  return encode([record.commitTs, [...record.enlistedPartitions], inflight]);
}

function decodeCommitting(bytes: Uint8Array): CommittingRecord {
  const fields = decode(bytes);
  if (!Array.isArray(fields) || fields.length !== 3) throw corrupted('committing record');
  const [commitTs, enlisted, inflight] = fields as [unknown, unknown, unknown];
  if (typeof commitTs !== 'bigint' || commitTs <= 0n) throw corrupted('committing record commit timestamp');
  if (!Array.isArray(enlisted) || !enlisted.every((p) => typeof p === 'string'))
    throw corrupted('committing partitions');
  if (!Array.isArray(inflight)) throw corrupted('committing writes');
  const writes: InflightWrites[] = inflight.map((w: unknown) => {
    if (!Array.isArray(w) || w.length !== 2) throw corrupted('committing writes');
    const [partitionId, keys] = w as [unknown, unknown];
    if (typeof partitionId !== 'string' || !Array.isArray(keys) || !keys.every((k) => typeof k === 'string')) {
      throw corrupted('committing writes');
    }
    return { partitionId: partitionId as PartitionId, keys: keys as string[] };
  });
  return { commitTs: commitTs as HybridTimestamp, enlistedPartitions: enlisted as PartitionId[], inflight: writes };
}

const TX_LAYOUT: KvPartitionLayout<TxStateMeta> = {
  namespace: 'txstate',
  tables: TX_TABLES,
  metaTable: 'txstate:meta',
  attrsTable: 'txstate:attrs',
  what: 'tx state partition',
  initialMeta: INITIAL_META,
  extraFields: (meta) => [meta.vacuumHorizon],
  fromFields: (applied, [vacuumHorizon, ...rest]) =>
    typeof vacuumHorizon === 'bigint' && rest.length === 0
      ? { ...applied, vacuumHorizon: vacuumHorizon as HybridTimestamp }
      : undefined,
};

export class KvTxState extends KvReplicatedPartition<TxStateMeta> implements TxStateStorage {
  constructor(store: KvStore, partitionId: PartitionId, onDestroy: () => void = () => {}) {
    super(store, partitionId, onDestroy, TX_LAYOUT);
  }

  get(txId: TxId): StoredTxMeta | undefined {
    this.checkLive();
    const bytes = this.store.get('txstate:records', this.key(txId));
    return bytes === undefined ? undefined : decodeRecord(txId, bytes);
  }

  compareAndSet(txId: TxId, expected: null, meta: TxMeta): CompareAndSetResult {
    this.checkLive();
    assert(expected === null, 'tx state compare-and-set only supports "no record" as the expected state');
    validateMeta(meta);
    return this.store.atomically(() => {
      const existing = this.get(txId);
      if (existing !== undefined) return { status: 'MISMATCH', stored: existing };
      this.store.put('txstate:records', this.key(txId), encodeRecord(meta, false));
      this.store.put('txstate:pending', this.key(txId), EMPTY);
      this.store.delete('txstate:committing', this.key(txId));
      return { status: 'SUCCESS', stored: { ...meta, txId, cleanupCompleted: false } };
    });
  }

  committing(txId: TxId): CommittingRecord | undefined {
    this.checkLive();
    const bytes = this.store.get('txstate:committing', this.key(txId));
    return bytes === undefined ? undefined : decodeCommitting(bytes);
  }

  putCommitting(txId: TxId, record: CommittingRecord): void {
    this.checkLive();
    if (typeof record.commitTs !== 'bigint' || record.commitTs <= 0n) {
      throw invalidArgument('a committing record carries its commit timestamp');
    }
    this.store.atomically(() => {
      assert(this.get(txId) === undefined, 'a finished tx gets no committing record', txId);
      assert(this.committing(txId) === undefined, 'a tx gets one committing record', txId);
      this.store.put('txstate:committing', this.key(txId), encodeCommitting(record));
    });
  }

  markCleanupCompleted(txId: TxId): MarkCleanupCompletedResult {
    this.checkLive();
    return this.store.atomically(() => {
      const existing = this.get(txId);
      if (existing === undefined) return { status: 'NOT_FOUND' };
      if (!existing.cleanupCompleted) {
        assert(this.store.get('txstate:pending', this.key(txId)) !== undefined, 'a pending record is indexed', txId);
        this.store.put('txstate:records', this.key(txId), encodeRecord(existing, true));
        this.store.delete('txstate:pending', this.key(txId));
      }
      return { status: 'SUCCESS' };
    });
  }

  remove(txId: TxId): boolean {
    this.checkLive();
    return this.store.atomically(() => {
      const existing = this.get(txId);
      if (existing === undefined) return false;
      assert(existing.cleanupCompleted, 'a tx state record is removed only after its cleanup completed', txId);
      assert(
        this.store.get('txstate:pending', this.key(txId)) === undefined,
        'a cleaned-up record is not pending',
        txId,
      );
      this.store.delete('txstate:records', this.key(txId));
      return true;
    });
  }

  finishedNotCleanedUp(afterTxId: TxId | undefined, limit: number = LIMITS.txStateListMax): readonly StoredTxMeta[] {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.txStateListMax) {
      throw invalidArgument(`limit must be an integer in 1..${LIMITS.txStateListMax}`, { limit });
    }
    // Start just after `afterTxId`: its key followed by a zero byte is the smallest key greater than it.
    const start = afterTxId === undefined ? this.prefix : withSuffix(this.key(afterTxId), new Uint8Array([0]));
    const out: StoredTxMeta[] = [];
    for (const { key } of this.store.range('txstate:pending', start, prefixEnd(this.prefix), limit)) {
      const txId = utf8Text(key.subarray(this.prefix.length)) as TxId;
      const record = this.get(txId);
      assert(record !== undefined && !record.cleanupCompleted, 'the pending index names pending records', txId);
      out.push(record);
    }
    return out;
  }

  records(afterTxId: TxId | undefined, limit: number = LIMITS.txStateListMax): readonly StoredTxMeta[] {
    this.checkLive();
    if (!Number.isInteger(limit) || limit < 1 || limit > LIMITS.txStateListMax) {
      throw invalidArgument(`limit must be an integer in 1..${LIMITS.txStateListMax}`, { limit });
    }
    const start = afterTxId === undefined ? this.prefix : withSuffix(this.key(afterTxId), new Uint8Array([0]));
    const out: StoredTxMeta[] = [];
    for (const { key, value } of this.store.range('txstate:records', start, prefixEnd(this.prefix), limit)) {
      out.push(decodeRecord(utf8Text(key.subarray(this.prefix.length)) as TxId, value));
    }
    return out;
  }

  vacuumHorizon(): HybridTimestamp {
    this.checkLive();
    return this.meta().vacuumHorizon;
  }

  setVacuumHorizon(ts: HybridTimestamp): void {
    this.checkLive();
    this.store.atomically(() => {
      const meta = this.meta();
      if (ts > meta.vacuumHorizon) this.putMeta({ ...meta, vacuumHorizon: ts });
    });
  }

  private key(txId: TxId): Uint8Array {
    return withSuffix(this.prefix, txIdBytes(txId));
  }
}
