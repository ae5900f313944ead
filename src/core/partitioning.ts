/**
 * How keys map to partitions, shared by everything that routes a key (coordinator, harness placement, CLI):
 * partition index = FNV-1a (32 bits) of the key's UTF-8 bytes, modulo the table's partition count. The hash is part of
 * the data layout: changing it moves every key, so it is pinned by a test with fixed vectors.
 * Partition ids are `t<tableId>p<index>`; the metastorage group is `meta`.
 */
import { assert } from './assert.js';
import { type PartitionId, partitionId } from './ids.js';

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

/** FNV-1a over the UTF-8 bytes of `key`, as an unsigned 32-bit integer. */
export function keyHash(key: string): number {
  let hash = FNV_OFFSET;
  for (const byte of utf8.encode(key)) hash = Math.imul(hash ^ byte, FNV_PRIME);
  return hash >>> 0;
}

/** The index of the partition holding `key` in a table of `partitions` partitions. */
export function partitionIndexOf(key: string, partitions: number): number {
  assert(Number.isSafeInteger(partitions) && partitions > 0, 'partitions must be a positive integer');
  return keyHash(key) % partitions;
}

/** The id of partition `index` of table `tableId`. */
export function tablePartitionId(tableId: number, index: number): PartitionId {
  return partitionId(`t${tableId}p${index}`);
}

/** The table id of a table partition id `t<tableId>p<index>`; undefined for any other group (e.g. `meta`). */
export function tableIdOf(partition: PartitionId): number | undefined {
  const match = /^t(\d+)p\d+$/.exec(partition);
  return match === null ? undefined : Number(match[1]);
}

/** The Raft group of the metastorage. */
export const META_GROUP: PartitionId = partitionId('meta');
