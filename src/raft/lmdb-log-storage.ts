/**
 * LogStorage in the node's LMDB environment, which the caller opened and owns (MVCC storage lives in it too). Three
 * named sub-databases, all keyed by group first so that many groups share one environment and one group commit:
 *   raft:entries   [group, index] → { term, kind, data }
 *   raft:hard      group → { term, vote, commit }
 *   raft:snapshot  group → { index, term, data, voters?, learners? }
 *
 * Entry kinds are stored as their names, so a `conf` entry needs nothing new. A snapshot's configuration is stored
 * beside its index; a record written before configurations were recorded has none and loads without `conf`.
 *
 * Each save or compaction is one asynchronous LMDB transaction: writes queued in the same event turn, by any group,
 * commit together with one fsync. The promise resolves after the commit and `flushed`, so never before the data is
 * durable (unless the environment was opened without sync, which benchmarks must then state).
 */
import type { Database, RootDatabase } from 'lmdb';
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import { type LogIndex, logIndex, type NodeName, type PartitionId, partitionId, type Term } from '../core/ids.js';
import type { LogStorage, RaftLogUpdate, StoredRaftState } from './log-storage.js';
import type { Entry, EntryKind, HardState, Snapshot } from './types.js';

type EntryKey = [string, number];

interface StoredEntry {
  readonly term: number;
  readonly kind: EntryKind;
  readonly data: Uint8Array;
}

interface StoredHardState {
  readonly term: number;
  readonly vote: string | null;
  readonly commit: number;
}

interface StoredSnapshot {
  readonly index: number;
  readonly term: number;
  readonly data: Uint8Array;
  readonly voters?: readonly string[];
  readonly learners?: readonly string[];
}

/** Above every log index (2^53 - 1), for open-ended ranges. */
const INDEX_END = Number.MAX_SAFE_INTEGER;

export class LmdbLogStorage implements LogStorage {
  private readonly root: RootDatabase;
  private readonly entries: Database<StoredEntry, EntryKey>;
  private readonly hard: Database<StoredHardState, string>;
  private readonly snapshots: Database<StoredSnapshot, string>;

  constructor(root: RootDatabase) {
    this.root = root;
    this.entries = root.openDB<StoredEntry, EntryKey>({ name: 'raft:entries' });
    this.hard = root.openDB<StoredHardState, string>({ name: 'raft:hard' });
    this.snapshots = root.openDB<StoredSnapshot, string>({ name: 'raft:snapshot' });
  }

  async save(group: PartitionId, update: RaftLogUpdate): Promise<void> {
    await this.write(() => {
      if (update.snapshot !== null) {
        this.removeEntries(group, 0);
        this.snapshots.putSync(group, snapshotValue(update.snapshot));
      }
      const first = update.entries[0];
      if (first !== undefined) {
        this.checkContiguous(group, first.index);
        this.removeEntries(group, first.index);
        for (const e of update.entries) {
          this.entries.putSync([group, e.index], { term: e.term, kind: e.kind, data: e.data });
        }
      }
      if (update.hardState !== null) {
        const hs = update.hardState;
        this.hard.putSync(group, { term: hs.term, vote: hs.vote, commit: hs.commit });
      }
    });
  }

  async compact(group: PartitionId, snapshot: Snapshot): Promise<void> {
    await this.write(() => {
      const current = this.snapshots.get(group);
      if (current !== undefined && snapshot.index <= current.index) return;
      const last = this.lastStoredIndex(group);
      assert(snapshot.index <= last, 'compaction beyond the stored log', snapshot.index, last);
      for (const key of this.entries.getKeys({ start: [group, 0], end: [group, snapshot.index + 1] })) {
        this.entries.removeSync(key);
      }
      this.snapshots.putSync(group, snapshotValue(snapshot));
    });
  }

  load(group: PartitionId): StoredRaftState {
    const hs = this.hard.get(group);
    const s = this.snapshots.get(group);
    const snapshot: Snapshot | null = s === undefined ? null : loadSnapshot(s);
    const entries: Entry[] = [];
    let expected = (snapshot?.index ?? 0) + 1;
    for (const { key, value } of this.entries.getRange({ start: [group, 0], end: [group, INDEX_END] })) {
      const index = key[1];
      if (index !== expected) {
        throw new BasaltError('STORAGE_CORRUPTED', `raft log of ${group} has a hole at ${expected}`, { group, index });
      }
      entries.push({
        index: index as LogIndex,
        term: value.term as Term,
        kind: value.kind,
        data: new Uint8Array(value.data),
      });
      expected++;
    }
    const hardState: HardState | null =
      hs === undefined
        ? null
        : { term: hs.term as Term, vote: hs.vote as NodeName | null, commit: logIndex(hs.commit) };
    return { hardState, snapshot, entries };
  }

  groups(): PartitionId[] {
    const out = new Set<PartitionId>();
    for (const key of this.hard.getKeys()) out.add(partitionId(key));
    for (const key of this.snapshots.getKeys()) out.add(partitionId(key));
    // Skip-scan the entries: one seek per group, to the first key past the previous group's.
    let start: EntryKey = ['', 0];
    for (;;) {
      let next: EntryKey | undefined;
      for (const key of this.entries.getKeys({ start, limit: 1 })) next = key;
      if (next === undefined) break;
      out.add(partitionId(next[0]));
      start = [next[0], INDEX_END];
    }
    return [...out].sort();
  }

  async removeGroup(group: PartitionId): Promise<void> {
    await this.write(() => {
      this.removeEntries(group, 0);
      this.hard.removeSync(group);
      this.snapshots.removeSync(group);
    });
  }

  private async write(fn: () => void): Promise<void> {
    try {
      await this.root.transaction(fn);
      await this.root.flushed;
    } catch (error) {
      if (error instanceof Error && /closed/i.test(error.message)) {
        throw new BasaltError('STORAGE_CLOSED', 'the LMDB environment is closed', undefined, { cause: error });
      }
      throw error;
    }
  }

  private removeEntries(group: PartitionId, fromIndex: number): void {
    for (const key of this.entries.getKeys({ start: [group, fromIndex], end: [group, INDEX_END] })) {
      this.entries.removeSync(key);
    }
  }

  private lastStoredIndex(group: PartitionId): number {
    for (const key of this.entries.getKeys({ start: [group, INDEX_END], end: [group, 0], reverse: true, limit: 1 })) {
      return key[1];
    }
    return this.snapshots.get(group)?.index ?? 0;
  }

  private checkContiguous(group: PartitionId, first: number): void {
    const base = this.snapshots.get(group)?.index ?? 0;
    assert(first > base && first <= this.lastStoredIndex(group) + 1, 'an append leaves a gap', group, first);
  }
}

function snapshotValue(s: Snapshot): StoredSnapshot {
  const base = { index: s.index, term: s.term, data: s.data };
  return s.conf === undefined ? base : { ...base, voters: s.conf.voters, learners: s.conf.learners };
}

function loadSnapshot(s: StoredSnapshot): Snapshot {
  const base = { index: logIndex(s.index), term: s.term as Term, data: new Uint8Array(s.data) };
  if (s.voters === undefined) return base;
  const conf = { voters: s.voters as NodeName[], learners: (s.learners ?? []) as NodeName[] };
  return { ...base, conf };
}
