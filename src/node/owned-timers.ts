/**
 * Timers owned by one node incarnation. `retire()` cancels every pending timer and makes later `setTimer` calls inert,
 * so that the leftover promise continuations of a crashed incarnation cannot schedule work (the real-time analog of
 * the simulator's `retireOwner`). The set of pending handles is bounded by what the node's components keep armed.
 */
import type { TimerHandle, Timers } from '../env/timers.js';

const INERT: TimerHandle = { timerId: -1 };

export class OwnedTimers implements Timers {
  private readonly pending = new Set<TimerHandle>();
  private retired = false;

  constructor(private readonly inner: Timers) {}

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    if (this.retired) return INERT;
    const handle = this.inner.setTimer(() => {
      this.pending.delete(handle);
      if (!this.retired) fn();
    }, delayMs);
    this.pending.add(handle);
    return handle;
  }

  clearTimer(handle: TimerHandle): void {
    if (!this.pending.delete(handle)) return;
    this.inner.clearTimer(handle);
  }

  get pendingCount(): number {
    return this.pending.size;
  }

  get isRetired(): boolean {
    return this.retired;
  }

  retire(): void {
    this.retired = true;
    for (const handle of this.pending) this.inner.clearTimer(handle);
    this.pending.clear();
  }
}
