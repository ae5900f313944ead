/**
 * Brings the partitions a node runs in line with the metastorage: for the latest view it knows, every partition
 * assigned to this node runs, and no other. One reconciliation pass runs at a time and always works toward the newest
 * view (intermediate views seen while a pass runs are skipped). Each partition's start and stop are awaited one at a
 * time, so calls for one partition never overlap. A partition whose start failed is reported and left out until a
 * newer view arrives (no hot retry loop).
 *
 * Leftovers: on the first view the node's stored partitions (storage engine and Raft log) are listed once. One whose
 * table a view proves dropped (its id is below the view's next table id, which only grows and is never reused, yet
 * the table is absent) is stopped with `removed`, so state a crash left behind mid-removal is removed now. A view that
 * does not know the table yet (an older revision replayed at startup) decides nothing; a live table's partitions are
 * left to the assignments.
 */
import type { NodeName, PartitionId } from '../core/ids.js';
import type { MetaView } from './metastorage-state.js';
import type { PartitionHost } from './partition-host.js';

export class PartitionReconciler {
  private readonly runningSet = new Map<PartitionId, readonly NodeName[]>();
  private readonly failed = new Set<PartitionId>();
  private desired = new Map<PartitionId, readonly NodeName[]>();
  private desiredRevision = -1;
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
    /** The partitions this node holds stored state for (read once, on the first view). */
    private readonly stored: () => Iterable<PartitionId> = () => [],
  ) {}

  update(view: MetaView): void {
    if (this.halted || view.revision <= this.desiredRevision) return;
    this.desiredRevision = view.revision;
    this.classifyStored(view);
    const desired = new Map<PartitionId, readonly NodeName[]>();
    for (const [partition, replicas] of view.assignments) {
      if (replicas.includes(this.self)) desired.set(partition as PartitionId, replicas as NodeName[]);
    }
    this.desired = desired;
    this.failed.clear();
    this.dirty = true;
    this.pass ??= this.run();
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
  }

  /** Graceful shutdown: waits for the current pass, then stops every running partition, keeping its state. */
  async stopAll(): Promise<void> {
    this.halted = true;
    await this.settled();
    const partitions = [...this.runningSet.keys()];
    this.runningSet.clear();
    await Promise.all(
      partitions.map((p) => this.host.stop(p, 'node-stopping').catch((error: unknown) => this.onError(error))),
    );
  }

  /** Moves stored partitions the view proves dropped to `leftovers`, and forgets those it shows live. */
  private classifyStored(view: MetaView): void {
    this.undecided ??= new Set([...this.stored()].filter((p) => tableIdOf(p) !== undefined));
    for (const partition of this.undecided) {
      const tableId = tableIdOf(partition)!;
      if (tableId >= view.nextTableId) continue;
      this.undecided.delete(partition);
      if (!view.tables.some((t) => t.id === tableId)) this.leftovers.add(partition);
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

/** The table id of a table partition id `t<tableId>p<index>`; undefined for any other group (e.g. `meta`). */
function tableIdOf(partition: PartitionId): number | undefined {
  const match = /^t(\d+)p\d+$/.exec(partition);
  return match === null ? undefined : Number(match[1]);
}
