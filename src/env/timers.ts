/**
 * Timers, injected. The real implementation wraps the event loop's timers; the simulator fires them in virtual time, in
 * a deterministic order. A handle is opaque; cancelling a fired or cancelled timer is a no-op.
 */
export interface TimerHandle {
  readonly timerId: number;
}

export interface Timers {
  /** Calls `fn` once, `delayMs` milliseconds from now (0 = as soon as possible, after the current task). */
  setTimer(fn: () => void, delayMs: number): TimerHandle;
  clearTimer(handle: TimerHandle): void;
}

/** Resolves after `delayMs` on the given timers; rejects with `signal.reason` if aborted first. */
export function sleep(timers: Timers, delayMs: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      timers.clearTimer(handle);
      reject(signal?.reason);
    };
    const handle = timers.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, delayMs);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
