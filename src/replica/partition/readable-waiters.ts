/**
 * Reads waiting for their readTs to become readable on one partition replica (rules 9, 11): each waiter is re-checked
 * whenever the replica calls `wake` (after every apply) against the replica's readability predicate, and fails
 * TIMEOUT after its own timeout on the injected timers. At most `waitersMax` wait at once; more are refused
 * OVERLOADED. `failAll` ends every waiter (the replica stops).
 */
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId } from '../../core/ids.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { formatTimestamp } from '../../hlc/timestamp.js';

export interface ReadableWaitersOptions {
  readonly partitionId: PartitionId;
  readonly timers: Timers;
  readonly waitersMax: number;
  /** True once a read at `readTs` sees everything that will ever be visible at it. */
  readonly readable: (readTs: HybridTimestamp) => boolean;
  /** The applied safe time, for the timeout's details. */
  readonly appliedSafeTime: () => HybridTimestamp;
}

interface Waiter {
  readonly readTs: HybridTimestamp;
  readonly resolve: () => void;
  readonly reject: (error: BasaltError) => void;
  timer: TimerHandle | undefined;
}

export class ReadableWaiters {
  private readonly waiters = new Set<Waiter>();

  constructor(private readonly o: ReadableWaitersOptions) {}

  get size(): number {
    return this.waiters.size;
  }

  /** Waits until `readTs` is readable (the caller checked it is not yet); TIMEOUT after `timeoutMs`. */
  wait(readTs: HybridTimestamp, timeoutMs: number): Promise<void> {
    if (this.waiters.size >= this.o.waitersMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many reads waiting for safe time'));
    }
    const { partitionId, timers } = this.o;
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { readTs, resolve, reject, timer: undefined };
      this.waiters.add(waiter);
      waiter.timer = timers.setTimer(() => {
        if (!this.waiters.delete(waiter)) return;
        reject(
          new BasaltError('TIMEOUT', `safe time of ${partitionId} did not reach ${formatTimestamp(readTs)}`, {
            partitionId,
            readTs: formatTimestamp(readTs),
            safeTime: formatTimestamp(this.o.appliedSafeTime()),
            timeoutMs,
          }),
        );
      }, timeoutMs);
    });
  }

  /** Resolves every waiter whose readTs is readable now. */
  wake(): void {
    for (const waiter of [...this.waiters]) {
      if (!this.o.readable(waiter.readTs)) continue;
      this.waiters.delete(waiter);
      if (waiter.timer !== undefined) this.o.timers.clearTimer(waiter.timer);
      waiter.resolve();
    }
  }

  /** Rejects every waiter, each with an error of its own. */
  failAll(error: () => BasaltError): void {
    for (const waiter of [...this.waiters]) {
      this.waiters.delete(waiter);
      if (waiter.timer !== undefined) this.o.timers.clearTimer(waiter.timer);
      waiter.reject(error());
    }
  }
}
