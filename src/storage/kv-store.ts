/**
 * The persistence seam of storage: a few named ordered tables of binary keys and values with synchronous reads and
 * writes, atomic groups of writes, consistent read views and a durability barrier. The MVCC and tx state logic is
 * written once against this interface; `MemoryKvStore` and `LmdbKvStore` are its two implementations, and both run
 * the same contract suites (through the partition storages built on them).
 *
 * Keys are never empty (LMDB refuses empty keys; every storage key starts with a partition prefix).
 * Ordering: `range` yields keys in ascending byte order (memcmp), start inclusive, end exclusive.
 * Atomicity: every write outside `atomically` is its own atomic step; inside, all writes commit together or not at all
 * (LMDB; the memory store is poisoned instead, see its header). Reads inside `atomically` see its own writes.
 */
export const TABLES = [
  'mv:rows',
  'mv:keys',
  'mv:txrows',
  'mv:gc',
  'mv:meta',
  'mv:attrs',
  'txstate:records',
  'txstate:pending',
  'txstate:meta',
  'txstate:attrs',
  'txstate:committing',
] as const;

export type TableName = (typeof TABLES)[number];

export interface KvEntry {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
}

export interface KvReader {
  get(table: TableName, key: Uint8Array): Uint8Array | undefined;
  /** Entries with `start <= key < end` (no end: to the last key), ascending, at most `limit` of them. */
  range(table: TableName, start: Uint8Array, end: Uint8Array | undefined, limit?: number): Iterable<KvEntry>;
}

/** A consistent view of every table as of one instant; `release` must be called when done. */
export interface KvView extends KvReader {
  release(): void;
}

export interface KvStore extends KvReader {
  put(table: TableName, key: Uint8Array, value: Uint8Array): void;
  delete(table: TableName, key: Uint8Array): void;
  /** Runs `fn` with all its writes in one atomic, isolated step; nested calls join the outer step. */
  atomically<T>(fn: () => T): T;
  /**
   * How many times writes were undone so far: an outermost atomic step that threw (its writes rolled back), or a
   * simulated crash. A cache of records read or written through this store is valid only while this is unchanged.
   */
  readonly rollbacks: number;
  view(): KvView;
  /** Resolves once every write made before the call is durable. */
  flush(): Promise<void>;
}
