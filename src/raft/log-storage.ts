/**
 * Durable Raft state of every group on one node: per group the hard state (term, vote, commit), the latest snapshot
 * and the log entries above it. Two implementations share one contract suite: in memory (simulator, unit tests) and
 * LMDB (one environment per node for the logs of all its groups).
 *
 * Contract:
 *   - `save` applies one Ready's durable part atomically, in this order: a received snapshot replaces the whole log;
 *     entries replace every stored entry at or above the first one's index; the hard state replaces the old one.
 *     Its promise resolves only once all of it is durable (fsynced): Raft acknowledges nothing before that.
 *   - `compact` stores a snapshot taken by the local state machine and drops the entries up to its index, atomically;
 *     an older snapshot than the stored one is ignored.
 *   - `load` returns exactly what the last resolved writes stored (restart recovery).
 *   - Entries of one group are contiguous and directly follow its snapshot; a write that would break this is a bug.
 */
import type { PartitionId } from '../core/ids.js';
import type { Entry, HardState, Snapshot } from './types.js';

export interface RaftLogUpdate {
  readonly hardState: HardState | null;
  readonly snapshot: Snapshot | null;
  readonly entries: readonly Entry[];
}

export interface StoredRaftState {
  readonly hardState: HardState | null;
  readonly snapshot: Snapshot | null;
  readonly entries: readonly Entry[];
}

export interface LogStorage {
  save(group: PartitionId, update: RaftLogUpdate): Promise<void>;
  compact(group: PartitionId, snapshot: Snapshot): Promise<void>;
  load(group: PartitionId): StoredRaftState;
  /** Every group with stored state. */
  groups(): PartitionId[];
  /** Drops everything stored for `group` (the replica was removed from this node). */
  removeGroup(group: PartitionId): Promise<void>;
}
