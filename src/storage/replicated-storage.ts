/**
 * What every storage applied by a Raft state machine shares: the applied position persisted atomically with the data
 * it covers, a durability barrier, and snapshot / restore / destroy of the whole partition.
 */
import type { HybridTimestamp, LogIndex, PartitionId, Term } from '../core/ids.js';

export interface AppliedPosition {
  readonly index: LogIndex;
  readonly term: Term;
}

/** A partition snapshot: encoded chunks produced lazily from one consistent view, in memory bounded by a chunk. */
export type PartitionSnapshot = Iterable<Uint8Array>;

export interface ReplicatedStorage {
  readonly partitionId: PartitionId;

  /** Index and term of the last applied Raft command (0/0 before any). */
  lastApplied(): AppliedPosition;
  /** The effective timestamp of the last applied command (DESIGN §2b rule 9); 0 before any. */
  lastAppliedTs(): HybridTimestamp;
  /** Records the applied position; index and timestamp never go back. Call it inside `runConsistently`. */
  setLastApplied(index: LogIndex, term: Term, ts: HybridTimestamp): void;
  /**
   * Runs `fn` so that every write it makes is one atomic step, all or nothing across a crash (and undone if `fn`
   * throws). All storages handed out by one engine share this scope, so one Raft command's MVCC changes, tx state
   * changes and both applied positions can be a single step.
   */
  runConsistently<T>(fn: () => T): T;
  /** Resolves once every write made before the call is durable. */
  flush(): Promise<void>;

  /**
   * A named metadata record of this partition (e.g. the replica's current lease), or undefined if never set. Names
   * are 1..LIMITS.storageMetaNameCharsMax characters of [A-Za-z0-9._-]; each storage has its own namespace.
   */
  getMeta(name: string): Uint8Array | undefined;
  /**
   * Stores a named metadata record (at most LIMITS.storageMetaBytesMax bytes; a bad name or size is
   * INVALID_ARGUMENT). Call it inside `runConsistently` with the command it belongs to. Records are part of
   * `snapshot`/`restore` and are removed by `destroy`.
   */
  setMeta(name: string, value: Uint8Array): void;

  /** A consistent snapshot of the partition at its applied position. Iterate it to the end (or break) promptly. */
  snapshot(): PartitionSnapshot;
  /** Replaces the partition's whole content (data and applied position) with a snapshot, atomically. */
  restore(snapshot: Iterable<Uint8Array>): void;
  /** Removes every trace of the partition; the object then throws STORAGE_CLOSED. */
  destroy(): void;
}
