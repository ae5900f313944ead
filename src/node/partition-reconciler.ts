/**
 * Brings the partitions a node runs in line with the metastorage: for the latest view it knows, every partition
 * assigned to this node, or moving onto it (its target names this node), runs, and no other; a partition starts its
 * Raft group with the voters the group started with (the view's origins), whatever moves happened since. One reconciliation pass runs at a time and always works toward the newest
 * view (intermediate views seen while a pass runs are skipped). Each partition's start and stop are awaited one at a
 * time, so calls for one partition never overlap. A partition whose start failed is reported and left out until a
 * newer view arrives (no hot retry loop).
 *
 * Leftovers: on the first view the node's stored partitions (storage engine and Raft log) are listed once. One whose
 * table a view proves dropped (its id is below the view's next table id, which only grows and is never reused, yet
 * the table is absent) is stopped with `removed`, so state a crash left behind mid-removal is removed now. A view that
 * does not know the table yet (an older revision replayed at startup) decides nothing; a live table's partitions are
 * left to the assignments.
 *
 * Retiring tables (dropped, see metastorage-state): their partitions keep running here until the node's HLC passes
 * their `retireAfter`, so that txs that enlisted them can still finish and resolve; then they are stopped with
 * `removed`, like a dropped table's. A retiring table proves nothing dropped before its deadline either. The deadline
 * is checked on each view and by a timer armed for the earliest pending one (no view need arrive when it passes).
 */

import type { MetaView } from '../cluster/metastorage-state.js';
import type { HybridTimestamp, NodeName, PartitionId } from '../core/ids.js';
import { tableIdOf } from '../core/partitioning.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { minTimestamp, physicalMs } from '../hlc/timestamp.js';
import type { PartitionHost } from './partition-host.js';

/** What the reconciler reads the time from: the node's HLC and its timers. */
export interface ReconcilerTime {
  /** The node's HLC reading now (without ticking it). */
  readonly now: () => HybridTimestamp;
  readonly timers: Timers;
}

export class PartitionReconciler {
  private readonly runningSet = new Map<PartitionId, readonly NodeName[]>();
  private readonly failed = new Set<PartitionId>();
  private desired = new Map<PartitionId, readonly NodeName[]>();
  private desiredRevision = -1;
  private view: MetaView | undefined;
  private retireTimer: TimerHandle | undefined;
  private pass: Promise<void> | undefined;
  private dirty = false;
  private halted = false;
  /** Stored partitions of tables no view has yet shown live or dropped; undefined until the first view. */
  private undecided: Set<PartitionId> | undefined;
  /** Stored partitions of dropped tables, to be removed by the next pass. */
  private readonly leftovers = new Set<PartitionId>();

  constructor(
    private readonly self: NodeName,
    private readonly host: PartitionHost,
    private readonly onError: (error: unknown) => void,
    private readonly time: ReconcilerTime,
    /** The partitions this node holds stored state for (read once, on the first view). */
    private readonly stored: () => Iterable<PartitionId> = () => [],
  ) {}

  update(view: MetaView): void {
    if (this.halted || view.revision <= this.desiredRevision) return;
    this.desiredRevision = view.revision;
    this.view = view;
    this.failed.clear();
    this.refresh(view);
  }

  /** Recomputes the desired set from `view` at the present time and starts a pass; re-arms the retirement timer. */
  private refresh(view: MetaView): void {
    const now = this.time.now();
    const retired = retiredTableIds(view, now);
    this.classifyStored(view, retired);
    const desired = new Map<PartitionId, readonly NodeName[]>();
    const targets = new Map(view.targets ?? []);
    const origins = new Map(view.origins ?? view.assignments);
    for (const [partition, replicas] of view.assignments) {
      if (retired.has(tableIdOf(partition as PartitionId) ?? -1)) continue;
      // A partition moving onto this node runs here from the start of its move (as a learner, then a voter), and
      // one moving off it runs until the move is reported done; its group starts with the voters it started with.
      if (!replicas.includes(this.self) && !targets.get(partition)?.includes(this.self)) continue;
      desired.set(partition as PartitionId, (origins.get(partition) ?? replicas) as NodeName[]);
    }
    this.desired = desired;
    this.dirty = true;
    this.pass ??= this.run();
    this.armRetireTimer(view, now);
  }

  /** Fires once the earliest retiring table still served here is due (re-armed if the HLC is not there yet). */
  private armRetireTimer(view: MetaView, now: HybridTimestamp): void {
    this.clearRetireTimer();
    const pending = view.retiring.filter((r) => r.retireAfter >= now).map((r) => r.retireAfter);
    if (pending.length === 0) return;
    const next = pending.reduce(minTimestamp);
    const delayMs = Math.max(0, physicalMs(next) - physicalMs(now)) + 1;
    this.retireTimer = this.time.timers.setTimer(() => {
      this.retireTimer = undefined;
      if (!this.halted && this.view === view) this.refresh(view);
    }, delayMs);
  }

  running(): ReadonlyMap<PartitionId, readonly NodeName[]> {
    return this.runningSet;
  }

  /** Resolves when no pass is running and the running set matches the newest view. */
  async settled(): Promise<void> {
    while (this.pass !== undefined) await this.pass;
  }

  /** Stops reconciling (crash: nothing more is started or stopped). */
  halt(): void {
    this.halted = true;
    this.clearRetireTimer();
  }

  private clearRetireTimer(): void {
    if (this.retireTimer !== undefined) this.time.timers.clearTimer(this.retireTimer);
    this.retireTimer = undefined;
  }

  /** Graceful shutdown: waits for the current pass, then stops every running partition, keeping its state. */
  async stopAll(): Promise<void> {
    this.halted = true;
    this.clearRetireTimer();
    await this.settled();
    const partitions = [...this.runningSet.keys()];
    this.runningSet.clear();
    await Promise.all(
      partitions.map((p) => this.host.stop(p, 'node-stopping').catch((error: unknown) => this.onError(error))),
    );
  }

  /**
   * Moves stored partitions the view proves dropped to `leftovers`, and forgets those it shows live. A retiring table
   * not yet due is not proven dropped: its partitions stay undecided (a later check moves them).
   */
  private classifyStored(view: MetaView, retired: ReadonlySet<number>): void {
    this.undecided ??= new Set([...this.stored()].filter((p) => tableIdOf(p) !== undefined));
    for (const partition of this.undecided) {
      const tableId = tableIdOf(partition)!;
      if (tableId >= view.nextTableId) continue;
      if (view.tables.some((t) => t.id === tableId)) {
        this.undecided.delete(partition);
        continue;
      }
      if (view.retiring.some((r) => r.table.id === tableId) && !retired.has(tableId)) continue;
      this.undecided.delete(partition);
      this.leftovers.add(partition);
    }
  }

  private async run(): Promise<void> {
    try {
      while (this.dirty && !this.halted) {
        this.dirty = false;
        await this.reconcileOnce();
      }
    } finally {
      this.pass = undefined;
    }
  }

  private async reconcileOnce(): Promise<void> {
    for (const partition of [...this.leftovers]) {
      if (this.halted || this.dirty) return;
      this.leftovers.delete(partition);
      // A running one is stopped below, once.
      if (this.runningSet.has(partition)) continue;
      await this.host.stop(partition, 'removed').catch((error: unknown) => this.onError(error));
    }
    for (const partition of [...this.runningSet.keys()]) {
      if (this.halted || this.dirty) return;
      if (this.desired.has(partition)) continue;
      this.runningSet.delete(partition);
      await this.host.stop(partition, 'removed').catch((error: unknown) => this.onError(error));
    }
    for (const [partition, replicas] of this.desired) {
      if (this.halted || this.dirty) return;
      if (this.runningSet.has(partition) || this.failed.has(partition)) continue;
      try {
        await this.host.start(partition, replicas);
        this.runningSet.set(partition, replicas);
      } catch (error) {
        this.failed.add(partition);
        this.onError(error);
      }
    }
  }
}

/** Ids of the view's retiring tables whose deadline `now` has passed. */
function retiredTableIds(view: MetaView, now: HybridTimestamp): Set<number> {
  return new Set(view.retiring.filter((r) => now > r.retireAfter).map((r) => r.table.id));
}
