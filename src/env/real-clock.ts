import type { Clock } from './clock.js';

/** Wall clock of this process, with an optional offset (skew tests on real clusters). */
export class RealClock implements Clock {
  offsetMs = 0;
  nowMs(): number {
    return Date.now() + this.offsetMs;
  }
  monotonicMs(): number {
    return performance.now();
  }
}
