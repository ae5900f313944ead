/**
 * A node's physical clock in a simulated world: virtual time seen through an offset and a drift rate, both settable at
 * any moment (skew tests shift one node's clock while the cluster runs). Model:
 *   nowMs = floor(virtual + offsetMs + driftAccumulatedMs), where the drift term grows by driftPpm millionths of every
 *   virtual millisecond since it was last set. Changing the drift never makes the clock jump; changing the offset
 *   does, in either direction, as an NTP step would. `monotonicMs` is the scheduler's virtual time and never goes back.
 */
import { invalidArgument } from '../core/errors.js';
import type { Clock } from '../env/clock.js';
import type { Scheduler } from './scheduler.js';

/** A drift must keep the clock moving forward. */
const DRIFT_PPM_MIN = -999_999;

export interface SimClockOptions {
  readonly offsetMs?: number;
  /** Parts per million: +100 = the clock gains 0.1 ms every virtual second. */
  readonly driftPpm?: number;
}

export class SimClock implements Clock {
  private offset: number;
  private drift = 0;
  private driftAnchorMs: number;
  private driftAccumulatedMs = 0;

  constructor(
    private readonly scheduler: Scheduler,
    options: SimClockOptions = {},
  ) {
    this.offset = options.offsetMs ?? 0;
    this.driftAnchorMs = scheduler.nowMs();
    if (options.driftPpm !== undefined) this.setDriftPpm(options.driftPpm);
  }

  nowMs(): number {
    return Math.floor(this.exactMs());
  }

  monotonicMs(): number {
    return this.scheduler.nowMs();
  }

  /** This clock's reading without rounding to a whole millisecond. */
  exactMs(): number {
    return this.scheduler.nowMs() + this.offset + this.driftMs();
  }

  get offsetMs(): number {
    return this.offset;
  }

  set offsetMs(offsetMs: number) {
    if (!Number.isFinite(offsetMs)) throw invalidArgument('clock offset must be finite', { offsetMs });
    this.offset = offsetMs;
  }

  get driftPpm(): number {
    return this.drift;
  }

  set driftPpm(driftPpm: number) {
    this.setDriftPpm(driftPpm);
  }

  /** Total error of this clock against virtual time right now (offset plus accumulated drift). */
  errorMs(): number {
    return this.offset + this.driftMs();
  }

  private setDriftPpm(driftPpm: number): void {
    if (!Number.isFinite(driftPpm) || driftPpm < DRIFT_PPM_MIN) {
      throw invalidArgument(`clock drift must be finite and at least ${DRIFT_PPM_MIN} ppm`, { driftPpm });
    }
    this.driftAccumulatedMs = this.driftMs();
    this.driftAnchorMs = this.scheduler.nowMs();
    this.drift = driftPpm;
  }

  private driftMs(): number {
    return this.driftAccumulatedMs + ((this.scheduler.nowMs() - this.driftAnchorMs) * this.drift) / 1_000_000;
  }
}
