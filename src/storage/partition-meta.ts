/**
 * Named per-partition metadata records: small byte values that a layer above storage needs to persist atomically
 * with the partition's data and to carry in its snapshots (the replica keeps its current lease here). Each storage
 * keeps them in its own `*:attrs` table under the partition prefix, so clearing, snapshotting and restoring the
 * partition covers them like any other table.
 */
import { invalidArgument } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { utf8Bytes } from './codec.js';
import { withSuffix } from './keys.js';
import type { KvStore, TableName } from './kv-store.js';

const NAME_PATTERN = /^[A-Za-z0-9._-]+$/;

function metaKey(prefix: Uint8Array, name: string): Uint8Array {
  if (typeof name !== 'string' || name.length > LIMITS.storageMetaNameCharsMax || !NAME_PATTERN.test(name)) {
    throw invalidArgument(`a metadata name is 1..${LIMITS.storageMetaNameCharsMax} characters of [A-Za-z0-9._-]`, {
      name: String(name).slice(0, 100),
    });
  }
  return withSuffix(prefix, utf8Bytes(name));
}

export function readMeta(store: KvStore, table: TableName, prefix: Uint8Array, name: string): Uint8Array | undefined {
  return store.get(table, metaKey(prefix, name));
}

export function writeMeta(store: KvStore, table: TableName, prefix: Uint8Array, name: string, value: Uint8Array): void {
  const key = metaKey(prefix, name);
  if (!(value instanceof Uint8Array)) throw invalidArgument('a metadata value is a Uint8Array');
  if (value.length > LIMITS.storageMetaBytesMax) {
    throw invalidArgument(`metadata value is ${value.length} bytes, above ${LIMITS.storageMetaBytesMax}`, {
      bytes: value.length,
    });
  }
  // A copy, so that a caller mutating its array later can never reach the stored bytes.
  store.put(table, key, Uint8Array.from(value));
}
