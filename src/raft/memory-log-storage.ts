/**
 * LogStorage in memory. Writes take effect at once and resolve on the next microtask; the object itself plays the
 * disk, so a simulated crash keeps it and throws away everything else.
 */
import { assert } from '../core/assert.js';
import type { PartitionId } from '../core/ids.js';
import type { LogStorage, RaftLogUpdate, StoredRaftState } from './log-storage.js';
import type { Entry, HardState, Snapshot } from './types.js';

interface GroupState {
  hardState: HardState | null;
  snapshot: Snapshot | null;
  entries: Entry[];
}

export class MemoryLogStorage implements LogStorage {
  private readonly state = new Map<PartitionId, GroupState>();

  async save(group: PartitionId, update: RaftLogUpdate): Promise<void> {
    const g = this.group(group);
    if (update.snapshot !== null) {
      g.snapshot = update.snapshot;
      g.entries = [];
    }
    const first = update.entries[0];
    if (first !== undefined) {
      const base = g.snapshot?.index ?? 0;
      assert(first.index > base && first.index <= base + g.entries.length + 1, 'an append leaves a gap', first.index);
      g.entries.length = first.index - base - 1;
      g.entries.push(...update.entries);
    }
    if (update.hardState !== null) g.hardState = update.hardState;
  }

  async compact(group: PartitionId, snapshot: Snapshot): Promise<void> {
    const g = this.group(group);
    if (g.snapshot !== null && snapshot.index <= g.snapshot.index) return;
    const base = g.snapshot?.index ?? 0;
    assert(snapshot.index <= base + g.entries.length, 'compaction beyond the stored log', snapshot.index);
    g.entries = g.entries.slice(snapshot.index - base);
    g.snapshot = snapshot;
  }

  load(group: PartitionId): StoredRaftState {
    const g = this.state.get(group);
    if (g === undefined) return { hardState: null, snapshot: null, entries: [] };
    return { hardState: g.hardState, snapshot: g.snapshot, entries: [...g.entries] };
  }

  groups(): PartitionId[] {
    return [...this.state.keys()].sort();
  }

  async removeGroup(group: PartitionId): Promise<void> {
    this.state.delete(group);
  }

  private group(group: PartitionId): GroupState {
    let g = this.state.get(group);
    if (g === undefined) {
      g = { hardState: null, snapshot: null, entries: [] };
      this.state.set(group, g);
    }
    return g;
  }
}
