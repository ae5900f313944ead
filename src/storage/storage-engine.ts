/**
 * A node's storage engine: hands out the MVCC storage and the tx state storage of each partition, all over one
 * `KvStore`, so every storage of a node shares one atomic scope and one durability barrier. The node layer creates
 * one engine per node: `MemoryStorageEngine` (simulator, tests, in-memory clusters) or `LmdbStorageEngine` over the
 * node's LMDB environment (which the engine does not own: the node closes it after Raft and storage are done).
 *
 * Whole partitions: `partitions()` lists every partition with at least one record in any table (found by key prefix,
 * so it needs no catalogue that could disagree with the data), and `destroyPartition` removes every record of both
 * storages of a partition in one atomic step. Destroying is idempotent, so a caller that crashed half-way through
 * removing a partition (Raft log gone, storage not yet) simply destroys it again when it finds it listed.
 */

import type { RootDatabase } from 'lmdb';
import { assert } from '../core/assert.js';
import { type PartitionId, partitionId } from '../core/ids.js';
import { utf8Bytes, utf8Text } from './codec.js';
import { compareBytes, partitionPrefix, prefixEnd } from './keys.js';
import { KvMvPartition } from './kv-mv-partition.js';
import { type KvEntry, type KvStore, TABLES, type TableName } from './kv-store.js';
import { KvTxState } from './kv-tx-state.js';
import { LmdbKvStore } from './lmdb-kv-store.js';
import { MemoryKvStore } from './memory-kv-store.js';
import type { MvPartitionStorage } from './mv-partition-storage.js';
import { clearPartition } from './partition-tables.js';
import type { TxStateStorage } from './tx-state-storage.js';

export interface StorageEngine {
  /** The MVCC storage of a partition (created empty on first use; the same object until destroyed). */
  mvPartition(partitionId: PartitionId): MvPartitionStorage;
  /** The tx state storage of a partition acting as commit partition. */
  txStatePartition(partitionId: PartitionId): TxStateStorage;
  /**
   * Removes every record of the partition (MVCC rows and indexes, tx state records, applied positions, metadata
   * records) in one atomic step; storage objects handed out for it before then throw STORAGE_CLOSED, and the next
   * `mvPartition`/`txStatePartition` call finds it empty at applied index 0. A partition without records is a no-op.
   */
  destroyPartition(partitionId: PartitionId): void;
  /** Every partition with at least one record in this engine, in ascending byte order of their ids. */
  partitions(): PartitionId[];
  /** Runs `fn` as one atomic step over every storage of this engine. */
  runConsistently<T>(fn: () => T): T;
  /** Resolves once every write made before the call is durable. */
  flush(): Promise<void>;
}

class KvStorageEngine implements StorageEngine {
  private readonly store: KvStore;
  private readonly mv = new Map<PartitionId, MvPartitionStorage>();
  private readonly txState = new Map<PartitionId, TxStateStorage>();

  constructor(store: KvStore) {
    this.store = store;
  }

  mvPartition(partitionId: PartitionId): MvPartitionStorage {
    let storage = this.mv.get(partitionId);
    if (storage === undefined) {
      storage = new KvMvPartition(this.store, partitionId, () => this.mv.delete(partitionId));
      this.mv.set(partitionId, storage);
    }
    return storage;
  }

  txStatePartition(partitionId: PartitionId): TxStateStorage {
    let storage = this.txState.get(partitionId);
    if (storage === undefined) {
      storage = new KvTxState(this.store, partitionId, () => this.txState.delete(partitionId));
      this.txState.set(partitionId, storage);
    }
    return storage;
  }

  destroyPartition(partitionId: PartitionId): void {
    this.store.atomically(() => {
      // Open objects are destroyed through themselves so that they refuse further use; the final clear covers
      // records of storages never opened in this process (a partition left behind by an earlier incarnation).
      this.mv.get(partitionId)?.destroy();
      this.txState.get(partitionId)?.destroy();
      clearPartition(this.store, TABLES, partitionPrefix(partitionId));
    });
  }

  partitions(): PartitionId[] {
    const found = new Set<string>();
    for (const table of TABLES) for (const id of partitionIdsIn(this.store, table)) found.add(id);
    return [...found].sort(compareUtf8).map((id) => partitionId(id));
  }

  runConsistently<T>(fn: () => T): T {
    return this.store.atomically(fn);
  }

  flush(): Promise<void> {
    return this.store.flush();
  }
}

/**
 * The distinct partition ids of one table: each step reads the first key at or after the cursor, takes its prefix
 * (the bytes up to the first NUL) and jumps past every key of that partition, so the cost is one seek per partition.
 */
function* partitionIdsIn(store: KvStore, table: TableName): Generator<string> {
  let cursor: Uint8Array | undefined = FIRST_KEY;
  while (cursor !== undefined) {
    const first: KvEntry | undefined = firstOf(store.range(table, cursor, undefined, 1));
    if (first === undefined) return;
    const nul = first.key.indexOf(0);
    assert(nul > 0, 'every key starts with a partition prefix', table);
    const prefix = first.key.subarray(0, nul + 1);
    yield utf8Text(prefix.subarray(0, nul));
    cursor = prefixEnd(prefix);
  }
}

/** Every key is at least this (keys are never empty, and a partition id is never empty). */
const FIRST_KEY = new Uint8Array([0]);

function firstOf<T>(items: Iterable<T>): T | undefined {
  for (const item of items) return item;
  return undefined;
}

/** Byte order of UTF-8 encodings, as the tables order prefixes. */
function compareUtf8(a: string, b: string): number {
  return compareBytes(utf8Bytes(a), utf8Bytes(b));
}

export interface MemoryStorageEngineOptions {
  /** Keep what a crash would lose, so that `crash()` can drop it (simulator; costs memory until each flush). */
  readonly trackUnflushed?: boolean;
}

/** Storage held in process memory; durable for as long as this object lives. */
export class MemoryStorageEngine extends KvStorageEngine {
  private readonly memory: MemoryKvStore;

  constructor(options: MemoryStorageEngineOptions = {}) {
    const memory = new MemoryKvStore(options);
    super(memory);
    this.memory = memory;
  }

  /**
   * Simulates a process crash with a lazy disk: every write made since the last `flush()` call is undone, whole
   * atomic steps at a time. Storage objects handed out before stay usable and see the surviving state. Returns the
   * number of undone writes.
   */
  crash(): number {
    return this.memory.crash();
  }
}

/** Storage in a node's LMDB environment (sub-databases `mv:*` and `txstate:*`), opened by the caller. */
export class LmdbStorageEngine extends KvStorageEngine {
  constructor(root: RootDatabase) {
    super(new LmdbKvStore(root));
  }
}
