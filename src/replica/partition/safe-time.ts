/**
 * Safe time (DESIGN §2 "Safe time", rules 9 and 11).
 *
 * - *Applied safe time* of a replica is the effective timestamp of the last command it applied. Effective timestamps
 *   rise strictly along the log, so every command applied later has a larger one: a replica whose applied safe time
 *   is ≥ readTs has applied everything that can ever be visible at readTs. It is advanced only after the applied
 *   state is visible to reads (after the storage step returned), never before.
 * - *Primary readable safe time*: the primary also knows the timestamps of its own proposals not yet applied. With
 *   none in flight every later proposal takes a larger timestamp than `now`, so it may serve at `now`; otherwise just
 *   below the smallest in-flight timestamp. Never below the applied safe time, since every later command's effective
 *   timestamp exceeds that. "In flight" means "may still apply", not "its proposer awaits it": a proposal whose
 *   entry left the local log was answered already (its outcome unknown) but stays in flight until no later leader can
 *   commit it (proposals.ts), since one that did would apply at or above its timestamp.
 *
 * `AppliedSafeTime` is a synchronous core with bounded waiters; `waitForSafeTime` wraps it in a promise with injected
 * timers and a timeout.
 */
import { assert } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Timers } from '../../env/timers.js';
import { formatTimestamp, maxTimestamp, minTimestamp } from '../../hlc/timestamp.js';

export type SafeTimeWait =
  /** Already reached: nothing was registered and the callback will not run. */
  | { readonly kind: 'reached' }
  /** Registered; `cancel()` unregisters (true if it was still waiting). */
  | { readonly kind: 'waiting'; readonly cancel: () => boolean }
  | { readonly kind: 'refused'; readonly code: 'OVERLOADED' };

interface Waiter {
  readonly ts: HybridTimestamp;
  readonly callback: () => void;
  cancelled: boolean;
}

export class AppliedSafeTime {
  private value: HybridTimestamp;
  /** Waiters sorted by target timestamp (stable: equal targets in registration order). */
  private waiters: Waiter[] = [];
  private live = 0;

  constructor(
    initial: HybridTimestamp,
    private readonly waitersMax: number = LIMITS.safeTimeWaitersMax,
  ) {
    this.value = initial;
  }

  current(): HybridTimestamp {
    return this.value;
  }

  get waiterCount(): number {
    return this.live;
  }

  /** Raises safe time (never lowers it) and runs, in target order, the waiters it reached. */
  advance(ts: HybridTimestamp): void {
    if (ts <= this.value) return;
    this.value = ts;
    let reached = 0;
    while (reached < this.waiters.length && this.waiters[reached]!.ts <= ts) reached++;
    if (reached === 0) return;
    const due = this.waiters.slice(0, reached);
    this.waiters = this.waiters.slice(reached);
    for (const w of due) {
      if (w.cancelled) continue;
      w.cancelled = true;
      this.live--;
      w.callback();
    }
  }

  /** Calls `callback` once safe time reaches `ts`; if it already has, returns `reached` and never calls it. */
  waitFor(ts: HybridTimestamp, callback: () => void): SafeTimeWait {
    if (ts <= this.value) return { kind: 'reached' };
    if (this.live >= this.waitersMax) return { kind: 'refused', code: 'OVERLOADED' };
    const waiter: Waiter = { ts, callback, cancelled: false };
    this.waiters.splice(upperBound(this.waiters, ts), 0, waiter);
    this.live++;
    return { kind: 'waiting', cancel: () => this.cancel(waiter) };
  }

  private cancel(waiter: Waiter): boolean {
    if (waiter.cancelled) return false;
    waiter.cancelled = true;
    this.live--;
    const at = this.waiters.indexOf(waiter);
    assert(at >= 0, 'a live safe-time waiter is queued');
    this.waiters.splice(at, 1);
    return true;
  }
}

/** Index of the first waiter whose target is > ts (so equal targets keep registration order). */
function upperBound(waiters: readonly Waiter[], ts: HybridTimestamp): number {
  let lo = 0;
  let hi = waiters.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (waiters[mid]!.ts <= ts) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Resolves once `safeTime` reaches `ts`; rejects with TIMEOUT after `timeoutMs` (the waiter is cancelled), with
 * OVERLOADED when the waiter table is full, and with the signal's reason if aborted.
 */
export function waitForSafeTime(
  safeTime: AppliedSafeTime,
  ts: HybridTimestamp,
  timers: Timers,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    let timer: ReturnType<Timers['setTimer']> | undefined;
    const onAbort = (): void => {
      if (wait.kind === 'waiting') wait.cancel();
      if (timer !== undefined) timers.clearTimer(timer);
      reject(signal?.reason);
    };
    const wait = safeTime.waitFor(ts, () => {
      if (timer !== undefined) timers.clearTimer(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    if (wait.kind === 'reached') {
      resolve();
      return;
    }
    if (wait.kind === 'refused') {
      reject(new BasaltError('OVERLOADED', 'too many safe-time waiters', { ts: formatTimestamp(ts) }));
      return;
    }
    timer = timers.setTimer(() => {
      wait.cancel();
      signal?.removeEventListener('abort', onAbort);
      reject(
        new BasaltError('TIMEOUT', `safe time did not reach ${formatTimestamp(ts)} within ${timeoutMs} ms`, {
          ts: formatTimestamp(ts),
          safeTime: formatTimestamp(safeTime.current()),
        }),
      );
    }, timeoutMs);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The primary's readable safe time: `now` with nothing in flight, else just below the smallest in-flight proposal
 * timestamp (every later proposal takes a larger one), and never below the applied safe time.
 */
export function primarySafeTime(
  applied: HybridTimestamp,
  now: HybridTimestamp,
  smallestInFlight: HybridTimestamp | undefined,
): HybridTimestamp {
  const bound = smallestInFlight === undefined ? now : minTimestamp(now, (smallestInFlight - 1n) as HybridTimestamp);
  return maxTimestamp(applied, bound);
}
