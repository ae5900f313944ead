/**
 * What the MVCC storage and the tx state storage of a partition share over a `KvStore`: the applied position kept in
 * one meta record per partition (index, term and effective timestamp never go back), named metadata records, the
 * atomic scope and durability barrier of the store, snapshot / restore / destroy of every table of the partition, and
 * the "destroyed" state after which every call throws STORAGE_CLOSED. Subclasses add their own fields to the meta
 * record (encoded after the applied position) and their own data tables.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import type { HybridTimestamp, LogIndex, PartitionId, Term } from '../core/ids.js';
import { decode, encode } from './codec.js';
import { partitionPrefix } from './keys.js';
import type { KvStore, TableName } from './kv-store.js';
import { readMeta, writeMeta } from './partition-meta.js';
import { clearPartition, restoreChunks, snapshotChunks } from './partition-tables.js';
import type { AppliedPosition, PartitionSnapshot, ReplicatedStorage } from './replicated-storage.js';

export interface AppliedMeta {
  readonly index: LogIndex;
  readonly term: Term;
  readonly ts: HybridTimestamp;
}

export interface KvPartitionLayout<M extends AppliedMeta> {
  /** Table namespace: `mv` or `txstate`. */
  readonly namespace: 'mv' | 'txstate';
  /** Every table holding this partition's records (cleared by destroy, copied by snapshot). */
  readonly tables: readonly TableName[];
  readonly metaTable: TableName;
  readonly attrsTable: TableName;
  /** How the partition names itself in errors. */
  readonly what: string;
  readonly initialMeta: M;
  /** The subclass's meta fields after [index, term, ts]. */
  readonly extraFields: (meta: M) => readonly unknown[];
  /** Rebuilds the meta record from the applied position and the extra fields, or undefined if they are malformed. */
  readonly fromFields: (applied: AppliedMeta, extra: readonly unknown[]) => M | undefined;
}

export abstract class KvReplicatedPartition<M extends AppliedMeta> implements ReplicatedStorage {
  readonly partitionId: PartitionId;
  protected readonly store: KvStore;
  protected readonly prefix: Uint8Array;
  private readonly onDestroy: () => void;
  private readonly layout: KvPartitionLayout<M>;
  private destroyed = false;
  /**
   * The meta record as last read or written here, valid while the store's `rollbacks` equals `cachedAt`: this object
   * is the only writer of its meta record (restore and destroy drop the cache), so the applied position is not read
   * back and decoded on every apply.
   */
  private cachedMeta: M | undefined;
  private cachedAt = -1;

  protected constructor(store: KvStore, partitionId: PartitionId, onDestroy: () => void, layout: KvPartitionLayout<M>) {
    this.store = store;
    this.partitionId = partitionId;
    this.prefix = partitionPrefix(partitionId);
    this.onDestroy = onDestroy;
    this.layout = layout;
  }

  lastApplied(): AppliedPosition {
    this.checkLive();
    const { index, term } = this.meta();
    return { index, term };
  }

  lastAppliedTs(): HybridTimestamp {
    this.checkLive();
    return this.meta().ts;
  }

  setLastApplied(index: LogIndex, term: Term, ts: HybridTimestamp): void {
    this.checkLive();
    this.store.atomically(() => {
      const meta = this.meta();
      assert(index >= meta.index, 'the applied index never goes back', meta.index, index);
      assert(ts >= meta.ts, 'the applied timestamp never goes back', meta.ts, ts);
      this.putMeta({ ...meta, index, term, ts });
    });
  }

  runConsistently<T>(fn: () => T): T {
    this.checkLive();
    return this.store.atomically(fn);
  }

  flush(): Promise<void> {
    return this.store.flush();
  }

  getMeta(name: string): Uint8Array | undefined {
    this.checkLive();
    return readMeta(this.store, this.layout.attrsTable, this.prefix, name);
  }

  setMeta(name: string, value: Uint8Array): void {
    this.checkLive();
    writeMeta(this.store, this.layout.attrsTable, this.prefix, name, value);
  }

  snapshot(): PartitionSnapshot {
    this.checkLive();
    const { store, prefix } = this;
    const { namespace, tables } = this.layout;
    return { [Symbol.iterator]: () => snapshotChunks(store.view(), namespace, tables, prefix) };
  }

  restore(snapshot: Iterable<Uint8Array>): void {
    this.checkLive();
    const { namespace, tables } = this.layout;
    this.cachedMeta = undefined;
    this.store.atomically(() => restoreChunks(this.store, namespace, tables, this.prefix, snapshot));
  }

  destroy(): void {
    this.checkLive();
    this.cachedMeta = undefined;
    this.store.atomically(() => clearPartition(this.store, this.layout.tables, this.prefix));
    this.destroyed = true;
    this.onDestroy();
  }

  protected checkLive(): void {
    if (this.destroyed)
      throw new BasaltError('STORAGE_CLOSED', `${this.layout.what} ${this.partitionId} was destroyed`);
  }

  protected meta(): M {
    if (this.cachedMeta !== undefined && this.cachedAt === this.store.rollbacks) return this.cachedMeta;
    const meta = this.readMeta();
    this.cachedMeta = meta;
    this.cachedAt = this.store.rollbacks;
    return meta;
  }

  private readMeta(): M {
    const bytes = this.store.get(this.layout.metaTable, this.prefix);
    if (bytes === undefined) return this.layout.initialMeta;
    const fields = decode(bytes);
    const corrupted = () => new BasaltError('STORAGE_CORRUPTED', `malformed ${this.layout.namespace} meta`);
    if (!Array.isArray(fields) || fields.length < 3) throw corrupted();
    const [index, term, ts, ...extra] = fields as unknown[];
    if (typeof index !== 'number' || typeof term !== 'number' || typeof ts !== 'bigint') throw corrupted();
    const meta = this.layout.fromFields(
      { index: index as LogIndex, term: term as Term, ts: ts as HybridTimestamp },
      extra,
    );
    if (meta === undefined) throw corrupted();
    return meta;
  }

  protected putMeta(meta: M): void {
    const fields = [meta.index, meta.term, meta.ts, ...this.layout.extraFields(meta)];
    this.store.put(this.layout.metaTable, this.prefix, encode(fields));
    this.cachedMeta = meta;
    this.cachedAt = this.store.rollbacks;
  }
}
