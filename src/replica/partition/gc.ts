/**
 * The storage GC driver of one node (DESIGN §2b rule 10): in rounds on the injected timers, each hosted partition's
 * MVCC storage drops the committed versions no read at or above the node's low watermark can see
 * (`gc(lowWatermark, rowsPerRound)`: per row it keeps the newest version at or below the watermark and everything
 * newer).
 *
 * GC is local, never replicated: replicas may hold different amounts of old history, which no read can tell, since
 * every RO read checks readTs ≥ the watermark of the node whose storage it reads (handlers/read-only.ts), and the
 * watermark never goes back (tx/core/low-watermark.ts). Bounded work: one gc() call of at most rowsPerRound rows per
 * partition per round; while a partition reports more work the next round follows after a 0 ms timer (other work
 * runs in between), else after intervalMs. A partition whose storage fails (destroyed under the round) is reported
 * through onError and skipped; the others go on.
 */
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { PeriodicTask, type Timers } from '../../env/timers.js';
import type { GcResult } from '../../storage/mv-partition-storage.js';

/** What GC needs of one hosted partition (a PartitionReplica's `mv` fits with its partitionId). */
export interface GcPartition {
  readonly partitionId: PartitionId;
  gc(lowWatermark: HybridTimestamp, limit?: number): GcResult;
}

export interface StorageGcDriverOptions {
  readonly timers: Timers;
  /** The partitions hosted now (read at every round). */
  readonly partitions: () => Iterable<GcPartition>;
  /** The node's low watermark (the same function the RO read check uses). */
  readonly lowWatermark: () => HybridTimestamp;
  readonly intervalMs?: number;
  readonly rowsPerRound?: number;
  readonly onError?: (error: unknown, partitionId: PartitionId) => void;
}

export interface GcRound {
  readonly watermark: HybridTimestamp;
  readonly partitions: number;
  readonly versionsRemoved: number;
  readonly rowsRemoved: number;
  /** Some partition has GC work left at or below the watermark. */
  readonly more: boolean;
}

export class StorageGcDriver {
  readonly intervalMs: number;
  readonly rowsPerRound: number;
  /** Versions removed since the driver was created. */
  versionsRemoved = 0;
  private readonly options: StorageGcDriverOptions;
  private readonly task: PeriodicTask;

  constructor(options: StorageGcDriverOptions) {
    this.options = options;
    this.intervalMs = options.intervalMs ?? LIMITS.storageGcIntervalMsDefault;
    this.rowsPerRound = options.rowsPerRound ?? LIMITS.storageGcRowsPerRoundMax;
    if (!(this.intervalMs > 0) || !Number.isInteger(this.rowsPerRound) || this.rowsPerRound < 1) {
      throw invalidArgument('GC interval and rows per round must be positive', {
        intervalMs: this.intervalMs,
        rowsPerRound: this.rowsPerRound,
      });
    }
    // While a partition reports more work, the next round follows at once.
    this.task = new PeriodicTask(
      options.timers,
      this.intervalMs,
      () => (this.runRound().more ? 0 : this.intervalMs),
      (error) => {
        // A partition's failure is reported by the round itself; anything else here is a bug: let it surface.
        throw error;
      },
    );
  }

  /** Starts the rounds (the first after intervalMs). */
  start(): void {
    this.task.start();
  }

  stop(): void {
    this.task.stop();
  }

  /** One round over every hosted partition at the current watermark (synchronous). */
  runRound(): GcRound {
    const watermark = this.options.lowWatermark();
    let partitions = 0;
    let versionsRemoved = 0;
    let rowsRemoved = 0;
    let more = false;
    for (const partition of this.options.partitions()) {
      partitions += 1;
      try {
        const result = partition.gc(watermark, this.rowsPerRound);
        versionsRemoved += result.versionsRemoved;
        rowsRemoved += result.rowsRemoved;
        more ||= result.more;
      } catch (error) {
        this.options.onError?.(error, partition.partitionId);
      }
    }
    this.versionsRemoved += versionsRemoved;
    return { watermark, partitions, versionsRemoved, rowsRemoved, more };
  }
}
