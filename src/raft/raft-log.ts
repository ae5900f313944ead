/**
 * The in-memory view of one Raft log: the latest snapshot (standing for every entry up to `snapshot.index`) followed
 * by the entries above it. The durable copy lives in a LogStorage written by the driver; this view knows how much of
 * it is durable (`stableIndex`), and which part is committed and applied.
 *
 * Invariants: snapshotIndex ≤ applied ≤ committed ≤ lastIndex (applied may lag behind a snapshot only while that
 * snapshot is pending, received but not yet restored); snapshotIndex ≤ stableIndex ≤ lastIndex; entry terms never
 * decrease; nothing at or below `committed` is ever truncated. `append` checks the batch it writes (contiguous, terms
 * not decreasing, above the commit index); `checkInvariants` checks the indexes, once per Ready.
 */
import { assert } from '../core/assert.js';
import { type LogIndex, logIndex, type Term, term as toTerm } from '../core/ids.js';
import { applyConfChange, type ConfState, decodeConfChange } from './conf-change.js';
import type { Entry, Snapshot } from './types.js';

const EMPTY = new Uint8Array(0);

export class RaftLog {
  /** Latest snapshot; an empty one at (0, 0), holding the group's initial configuration, before the first compaction. */
  private snap: Snapshot;
  /** entries[i].index === snap.index + 1 + i. */
  private entries: Entry[];
  /** Entries up to here are durable in LogStorage. */
  private stable: number;
  committed: number;
  applied: number;
  /** A snapshot received from a leader that the driver has not yet persisted and restored. */
  pendingSnapshot: Snapshot | null = null;

  constructor(
    snapshot: Snapshot | null,
    entries: readonly Entry[],
    committed: number,
    applied: number,
    initialConf: ConfState,
  ) {
    this.snap = snapshot ?? { index: logIndex(0), term: toTerm(0), data: EMPTY, conf: initialConf };
    this.entries = [...entries];
    for (let i = 0; i < this.entries.length; i++) {
      assert(this.entries[i]!.index === this.snap.index + 1 + i, 'restored entries must follow the snapshot');
    }
    this.stable = this.lastIndex();
    assert(committed <= this.lastIndex(), 'commit index beyond the restored log');
    assert(applied >= this.snap.index, 'the state machine must be restored from the snapshot first');
    assert(applied <= this.lastIndex(), 'the state machine applied entries the log does not hold');
    // Applied entries were committed, even if the persisted commit index lags behind them.
    this.committed = Math.max(committed, applied, this.snap.index);
    this.applied = applied;
  }

  snapshotIndex(): number {
    return this.snap.index;
  }
  snapshot(): Snapshot {
    return this.snap;
  }
  firstIndex(): number {
    return this.snap.index + 1;
  }
  lastIndex(): number {
    return this.snap.index + this.entries.length;
  }
  lastTerm(): number {
    return this.term(this.lastIndex()) ?? 0;
  }
  stableIndex(): number {
    return this.stable;
  }

  /** The term of the entry at `index`, or undefined when it was compacted away or is beyond the log. */
  term(index: number): number | undefined {
    if (index === this.snap.index) return this.snap.term;
    if (index < this.snap.index || index > this.lastIndex()) return undefined;
    return this.entries[index - this.snap.index - 1]!.term;
  }

  matchTerm(index: number, term: number): boolean {
    return this.term(index) === term;
  }

  entry(index: number): Entry {
    const e = this.entries[index - this.snap.index - 1];
    assert(e !== undefined && e.index === index, 'no entry at this index', index);
    return e;
  }

  /** Entries [lo, hi], at most `countMax` of them and about `bytesMax` of data (at least one). */
  slice(lo: number, hi: number, countMax = Number.POSITIVE_INFINITY, bytesMax = Number.POSITIVE_INFINITY): Entry[] {
    assert(lo > this.snap.index, 'slice from a compacted index', lo, this.snap.index);
    const end = Math.min(hi, this.lastIndex(), lo + countMax - 1);
    const out: Entry[] = [];
    let bytes = 0;
    for (let i = lo; i <= end; i++) {
      const e = this.entry(i);
      bytes += e.data.length;
      if (out.length > 0 && bytes > bytesMax) break;
      out.push(e);
    }
    return out;
  }

  /** The entries that are not yet durable. */
  unstableEntries(): Entry[] {
    return this.entries.slice(this.stable - this.snap.index);
  }

  /** Appends `entries`, replacing any suffix they conflict with; never touches committed entries. */
  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const first = entries[0]!.index;
    assert(first > this.committed, 'append would overwrite a committed entry', first, this.committed);
    assert(first <= this.lastIndex() + 1, 'append leaves a gap', first, this.lastIndex());
    // The whole batch is checked before the log changes.
    let previousTerm = this.term(first - 1) ?? 0;
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]!;
      assert(e.index === first + i, 'appended entries are contiguous', first, e.index);
      assert(e.term >= previousTerm, 'entry terms must not decrease', e.index, previousTerm, e.term);
      previousTerm = e.term;
    }
    this.entries.length = first - this.snap.index - 1;
    for (const e of entries) this.entries.push(e);
    this.stable = Math.min(this.stable, first - 1);
  }

  /**
   * The first index of `entries` whose term disagrees with this log (or that this log lacks), or 0 when all match.
   * Entries at or below the snapshot are committed, hence matching.
   */
  findConflict(entries: readonly Entry[]): number {
    for (const e of entries) {
      if (e.index <= this.snap.index) continue;
      if (!this.matchTerm(e.index, e.term)) return e.index;
    }
    return 0;
  }

  /** The largest index ≤ `index` whose term is ≤ `term` (a lower bound of where this log and another agree). */
  findConflictByTerm(index: number, term: number): { index: number; term: number } {
    let i = Math.min(index, this.lastIndex());
    for (;;) {
      const t = this.term(i);
      if (t === undefined) return { index: i, term: 0 };
      if (t <= term) return { index: i, term: t };
      i--;
    }
  }

  /** Marks entries up to `index` durable, unless they were replaced since the write began. */
  stableTo(index: number, term: number): void {
    if (this.matchTerm(index, term) && index > this.stable) this.stable = index;
  }

  commitTo(index: number): void {
    if (index <= this.committed) return;
    assert(index <= this.lastIndex(), 'commit beyond the last index', index, this.lastIndex());
    this.committed = index;
  }

  appliedTo(index: number): void {
    assert(index <= this.committed && index >= this.applied, 'applied out of [applied, commit]', index, this.applied);
    this.applied = index;
  }

  /** Committed entries not yet applied (none while a received snapshot waits to be restored). */
  nextCommitted(countMax: number, bytesMax: number): Entry[] {
    const from = Math.max(this.applied, this.snap.index) + 1;
    if (from > this.committed) return [];
    return this.slice(from, this.committed, countMax, bytesMax);
  }

  /** Replaces the whole log with a snapshot received from the leader. */
  restore(snapshot: Snapshot): void {
    assert(snapshot.index > this.committed, 'a snapshot below the commit index is never restored');
    this.snap = snapshot;
    this.entries = [];
    this.committed = snapshot.index;
    this.stable = snapshot.index;
    this.pendingSnapshot = snapshot;
  }

  /** Called once a restored snapshot is durable and in the state machine. */
  snapshotApplied(snapshot: Snapshot): void {
    if (this.pendingSnapshot === snapshot) this.pendingSnapshot = null;
    if (this.applied < snapshot.index) this.applied = snapshot.index;
  }

  /** The configuration after every entry up to `index`: the snapshot's, then each `conf` entry in order. */
  confAt(index: number): ConfState {
    assert(index >= this.snap.index && index <= this.lastIndex(), 'no configuration known at this index', index);
    let conf = this.snap.conf;
    assert(conf !== undefined, 'the log holds a snapshot without its configuration');
    for (let i = this.snap.index + 1; i <= index; i++) {
      const e = this.entry(i);
      if (e.kind === 'conf') conf = applyConf(conf, e);
    }
    return conf;
  }

  /** Whether an entry in [lo, hi] (clamped to the log) is a configuration change. */
  hasConfIn(lo: number, hi: number): boolean {
    for (let i = Math.max(lo, this.snap.index + 1); i <= Math.min(hi, this.lastIndex()); i++) {
      if (this.entry(i).kind === 'conf') return true;
    }
    return false;
  }

  /**
   * The header's index invariants: snapshotIndex ≤ applied ≤ committed ≤ lastIndex (applied below the snapshot only
   * while it is pending) and snapshotIndex ≤ stableIndex ≤ lastIndex. Cheap: a handful of comparisons.
   */
  checkInvariants(): void {
    const last = this.lastIndex();
    assert(
      this.applied <= this.committed && this.committed <= last,
      'applied ≤ committed ≤ last',
      this.applied,
      this.committed,
      last,
    );
    assert(
      this.snap.index <= this.stable && this.stable <= last,
      'snapshot ≤ stable ≤ last',
      this.snap.index,
      this.stable,
      last,
    );
    assert(
      this.applied >= this.snap.index || this.pendingSnapshot !== null,
      'applied lags the snapshot only while it is pending',
      this.applied,
      this.snap.index,
    );
  }

  /** Drops the entries up to `index`, which the state machine has captured in `data`. */
  compact(index: number, data: Uint8Array): Snapshot | null {
    if (index <= this.snap.index) return null;
    assert(index <= this.applied, 'compact beyond the applied index', index, this.applied);
    assert(index <= this.stable, 'compact beyond the durable log', index, this.stable);
    const term = this.term(index);
    assert(term !== undefined, 'compact index must be in the log');
    const conf = this.confAt(index);
    this.entries = this.entries.slice(index - this.snap.index);
    this.snap = { index: logIndex(index), term: toTerm(term), data, conf };
    return this.snap;
  }
}

/** Applies the change `e` carries; a committed change that does not apply is a bug (the leader checked it). */
export function applyConf(conf: ConfState, e: Entry): ConfState {
  const change = decodeConfChange(e.data);
  assert(change !== null, 'a conf entry carries a configuration change', e.index);
  const next = applyConfChange(conf, change);
  assert(!(next instanceof Error), 'a committed configuration change applies', e.index, String(next));
  return next as ConfState;
}

export function makeEntry(index: number, term: number, kind: Entry['kind'], data: Uint8Array): Entry {
  return { index: index as LogIndex, term: term as Term, kind, data };
}
