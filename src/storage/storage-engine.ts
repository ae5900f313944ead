/**
 * A node's storage engine: hands out the MVCC storage and the tx state storage of each partition, all over one
 * `KvStore`, so every storage of a node shares one atomic scope and one durability barrier. The node layer creates
 * one engine per node: `MemoryStorageEngine` (simulator, tests, in-memory clusters) or `LmdbStorageEngine` over the
 * node's LMDB environment (which the engine does not own: the node closes it after Raft and storage are done).
 */

import type { RootDatabase } from 'lmdb';
import type { PartitionId } from '../core/ids.js';
import { KvMvPartition } from './kv-mv-partition.js';
import type { KvStore } from './kv-store.js';
import { KvTxState } from './kv-tx-state.js';
import { LmdbKvStore } from './lmdb-kv-store.js';
import { MemoryKvStore } from './memory-kv-store.js';
import type { MvPartitionStorage } from './mv-partition-storage.js';
import type { TxStateStorage } from './tx-state-storage.js';

export interface StorageEngine {
  /** The MVCC storage of a partition (created empty on first use; the same object until destroyed). */
  mvPartition(partitionId: PartitionId): MvPartitionStorage;
  /** The tx state storage of a partition acting as commit partition. */
  txStatePartition(partitionId: PartitionId): TxStateStorage;
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

  runConsistently<T>(fn: () => T): T {
    return this.store.atomically(fn);
  }

  flush(): Promise<void> {
    return this.store.flush();
  }
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
