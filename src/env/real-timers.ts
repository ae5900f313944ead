import type { TimerHandle, Timers } from './timers.js';

interface RealHandle extends TimerHandle {
  readonly timeout: ReturnType<typeof setTimeout>;
}

let nextTimerId = 1;

/** Timers of the Node event loop. With `unref`, pending timers do not keep the process alive. */
export class RealTimers implements Timers {
  constructor(private readonly unref = false) {}

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timeout = setTimeout(fn, Math.max(0, delayMs));
    if (this.unref) timeout.unref();
    const handle: RealHandle = { timerId: nextTimerId++, timeout };
    return handle;
  }

  clearTimer(handle: TimerHandle): void {
    clearTimeout((handle as RealHandle).timeout);
  }
}
