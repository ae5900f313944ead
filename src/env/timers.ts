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

/**
 * Work that runs every `intervalMs` on the injected timers. The next run is armed only once the previous one ended, so
 * a slow run never overlaps the next; `run` may return the delay before the next run (0 while work is left). A
 * failure, thrown or rejected, goes to `onError` and the task goes on. `start` is idempotent (the first run comes after
 * one interval); after `stop` nothing runs until `start` again. `runSoon` brings a waiting run forward to now (an
 * event made work likely); a run under way is left alone.
 */
export class PeriodicTask {
  private timer: TimerHandle | undefined;
  private running = false;

  constructor(
    private readonly timers: Timers,
    private readonly intervalMs: number,
    private readonly run: () => undefined | number | Promise<unknown>,
    private readonly onError: (error: unknown) => void = () => {},
  ) {}

  start(): void {
    if (this.running) return;
    this.running = true;
    this.arm(this.intervalMs);
  }

  stop(): void {
    this.running = false;
    if (this.timer !== undefined) this.timers.clearTimer(this.timer);
    this.timer = undefined;
  }

  runSoon(): void {
    if (!this.running || this.timer === undefined) return;
    this.timers.clearTimer(this.timer);
    this.arm(0);
  }

  private arm(delayMs: number): void {
    this.timer = this.timers.setTimer(() => {
      this.timer = undefined;
      if (!this.running) return;
      let next = this.intervalMs;
      try {
        const result = this.run();
        if (result instanceof Promise) {
          result.then(
            () => this.rearm(this.intervalMs),
            (error: unknown) => {
              this.onError(error);
              this.rearm(this.intervalMs);
            },
          );
          return;
        }
        if (typeof result === 'number') next = result;
      } catch (error) {
        this.onError(error);
      }
      this.rearm(next);
    }, delayMs);
  }

  private rearm(delayMs: number): void {
    if (this.running) this.arm(delayMs);
  }
}
