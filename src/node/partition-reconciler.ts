/**
 * Brings the partitions a node runs in line with the metastorage: for the latest view it knows, every partition
 * assigned to this node runs, and no other. One reconciliation pass runs at a time and always works toward the newest
 * view (intermediate views seen while a pass runs are skipped). Each partition's start and stop are awaited one at a
 * time, so calls for one partition never overlap. A partition whose start failed is reported and left out until a
 * newer view arrives (no hot retry loop).
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

  constructor(
    private readonly self: NodeName,
    private readonly host: PartitionHost,
    private readonly onError: (error: unknown) => void,
  ) {}

  update(view: MetaView): void {
    if (this.halted || view.revision <= this.desiredRevision) return;
    this.desiredRevision = view.revision;
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
