import type { TimerHandle, Timers } from './timers.js';

interface RealHandle extends TimerHandle {
  readonly timeout?: ReturnType<typeof setTimeout>;
  readonly immediate?: ReturnType<typeof setImmediate>;
}

let nextTimerId = 1;

/**
 * Timers of the Node event loop. With `unref`, pending timers do not keep the process alive. A delay of 0 runs in the
 * check phase of this event-loop iteration (`setImmediate`), after the I/O it polled, instead of a 1 ms `setTimeout`.
 */
export class RealTimers implements Timers {
  constructor(private readonly unref = false) {}

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    if (delayMs <= 0) {
      const immediate = setImmediate(fn);
      if (this.unref) immediate.unref();
      const handle: RealHandle = { timerId: nextTimerId++, immediate };
      return handle;
    }
    const timeout = setTimeout(fn, delayMs);
    if (this.unref) timeout.unref();
    const handle: RealHandle = { timerId: nextTimerId++, timeout };
    return handle;
  }

  clearTimer(handle: TimerHandle): void {
    const real = handle as RealHandle;
    if (real.timeout !== undefined) clearTimeout(real.timeout);
    if (real.immediate !== undefined) clearImmediate(real.immediate);
  }
}
