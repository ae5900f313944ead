/**
 * Binary keys of the storage tables. Every key starts with its partition's prefix, `utf8(partitionId) 0x00`, so that
 * many partitions share one table (one LMDB environment per node) and a partition is one contiguous key range.
 * Partition ids, tx ids and row ids never contain a NUL byte, which keeps every prefix unambiguous. After the prefix,
 * user keys are their raw UTF-8 bytes, so byte order (memcmp, as LMDB compares) is the order of keys by UTF-8 bytes.
 */
import { assert } from '../core/assert.js';
import type { HybridTimestamp, PartitionId, RowId, TxId } from '../core/ids.js';
import { utf8Bytes } from './codec.js';

export type KeyBytes = Uint8Array;

/** Keys are built as Buffers (pooled allocation, and LMDB takes them without wrapping). */
function concat(parts: readonly Uint8Array[]): KeyBytes {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = Buffer.allocUnsafe(length);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

const NUL = new Uint8Array([0]);

function idBytes(id: string, what: string): Uint8Array {
  assert(id.length > 0 && !id.includes('\0'), 'an id in a key is non-empty and free of NUL', what, id);
  return utf8Bytes(id);
}

/** `utf8(partitionId) 0x00`: the first bytes of every key of one partition. */
export function partitionPrefix(partition: PartitionId): KeyBytes {
  const bytes = idBytes(partition, 'partition id');
  // LMDB keys hold at most 1978 bytes: a prefix this short leaves room for the largest user key.
  assert(bytes.length <= PARTITION_ID_BYTES_MAX, 'a partition id fits its key prefix', bytes.length);
  return concat([bytes, NUL]);
}

const PARTITION_ID_BYTES_MAX = 256;

/** The smallest key greater than every key starting with `prefix` (undefined: no such key, the range is open). */
export function prefixEnd(prefix: KeyBytes): KeyBytes | undefined {
  const out = Uint8Array.from(prefix);
  for (let i = out.length - 1; i >= 0; i--) {
    if (out[i]! < 0xff) {
      out[i]! += 1;
      return out.subarray(0, i + 1);
    }
  }
  return undefined;
}

export function withSuffix(prefix: KeyBytes, ...parts: readonly Uint8Array[]): KeyBytes {
  return concat([prefix, ...parts]);
}

export function rowIdBytes(rowId: RowId): Uint8Array {
  return idBytes(rowId, 'row id');
}

export function txIdBytes(txId: TxId): Uint8Array {
  return idBytes(txId, 'tx id');
}

/** `txId 0x00`: the prefix of one tx's entries in a (txId, rowId) index. */
export function txIdPrefixBytes(txId: TxId): Uint8Array {
  return concat([txIdBytes(txId), NUL]);
}

/** A timestamp as 8 big-endian bytes, so byte order is timestamp order. */
export function timestampBytes(ts: HybridTimestamp): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, ts);
  return out;
}

export function readTimestampBytes(bytes: Uint8Array, offset: number): bigint {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(offset);
}

export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = a[i]! - b[i]!;
    if (d !== 0) return d;
  }
  return a.length - b.length;
}
