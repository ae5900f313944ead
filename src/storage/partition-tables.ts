/**
 * Whole-partition operations shared by both storages: a partition is the key range `[prefix, prefixEnd(prefix))` in
 * each of its tables, so clearing, snapshotting and restoring it are plain range operations.
 *
 * Snapshot chunk format (msgpack): `['basalt-snapshot', 1, kind, [[table, keySuffix, value], ...]]`, where
 * `keySuffix` is the key without the partition prefix. Every chunk is self-describing; a chunk is cut once its
 * entries reach LIMITS.storageSnapshotChunkBytes, so memory stays bounded by about one chunk while iterating.
 */
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { decode, encode } from './codec.js';
import { prefixEnd, withSuffix } from './keys.js';
import type { KvReader, KvStore, TableName } from './kv-store.js';

export type SnapshotKind = 'mv' | 'txstate';

const MAGIC = 'basalt-snapshot';
const FORMAT_VERSION = 1;

function partitionEnd(prefix: Uint8Array): Uint8Array {
  const end = prefixEnd(prefix);
  if (end === undefined) throw new BasaltError('INTERNAL', 'a partition prefix always has an end');
  return end;
}

/** Deletes every key of the partition in `tables`, in bounded batches (call inside `atomically`). */
export function clearPartition(store: KvStore, tables: readonly TableName[], prefix: Uint8Array): void {
  const end = partitionEnd(prefix);
  const batch = LIMITS.storageRangeDeleteBatch;
  for (const table of tables) {
    for (;;) {
      const keys = [...store.range(table, prefix, end, batch)].map((e) => Uint8Array.from(e.key));
      for (const key of keys) store.delete(table, key);
      if (keys.length < batch) break;
    }
  }
}

/** Chunks of the partition's entries in `tables`, read from `view` (released when iteration ends). */
export function* snapshotChunks(
  view: KvReader & { release(): void },
  kind: SnapshotKind,
  tables: readonly TableName[],
  prefix: Uint8Array,
): Generator<Uint8Array> {
  const end = partitionEnd(prefix);
  try {
    let entries: unknown[] = [];
    let bytes = 0;
    for (const table of tables) {
      for (const { key, value } of view.range(table, prefix, end)) {
        entries.push([table, key.subarray(prefix.length), value]);
        bytes += key.length + value.length + 16;
        if (bytes >= LIMITS.storageSnapshotChunkBytes) {
          yield encode([MAGIC, FORMAT_VERSION, kind, entries]);
          entries = [];
          bytes = 0;
        }
      }
    }
    // Always at least one chunk, so that even an empty partition's snapshot says what it is.
    if (entries.length > 0 || bytes === 0) yield encode([MAGIC, FORMAT_VERSION, kind, entries]);
  } finally {
    view.release();
  }
}

function malformed(what: string): BasaltError {
  return new BasaltError('STORAGE_CORRUPTED', `malformed snapshot chunk: ${what}`);
}

/** Replaces the partition's entries in `tables` with a snapshot's (call inside `atomically`). */
export function restoreChunks(
  store: KvStore,
  kind: SnapshotKind,
  tables: readonly TableName[],
  prefix: Uint8Array,
  chunks: Iterable<Uint8Array>,
): void {
  clearPartition(store, tables, prefix);
  let seen = 0;
  for (const chunk of chunks) {
    const fields = decode(chunk);
    if (!Array.isArray(fields) || fields[0] !== MAGIC) throw malformed('not a snapshot chunk');
    if (fields[1] !== FORMAT_VERSION) throw malformed(`unsupported format version ${String(fields[1])}`);
    if (fields[2] !== kind) throw malformed(`a ${String(fields[2])} snapshot cannot restore ${kind} storage`);
    const entries = fields[3];
    if (!Array.isArray(entries)) throw malformed('entries');
    for (const entry of entries) {
      if (!Array.isArray(entry) || entry.length !== 3) throw malformed('entry');
      const [table, suffix, value] = entry as [unknown, unknown, unknown];
      if (!tables.includes(table as TableName)) throw malformed(`table ${String(table)}`);
      if (!(suffix instanceof Uint8Array) || !(value instanceof Uint8Array)) throw malformed('entry bytes');
      store.put(table as TableName, withSuffix(prefix, suffix), value);
    }
    seen++;
  }
  if (seen === 0) throw malformed('a snapshot has at least one chunk');
}
