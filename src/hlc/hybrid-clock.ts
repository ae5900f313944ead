/**
 * Hybrid logical clock (Kulkarni et al.; Ignite 3 `HybridClockImpl`). Invariants, checked on every tick:
 *   - now() results are unique and strictly increasing, even when the physical clock goes backwards;
 *   - update(remote) returns a value > remote and > every value this clock returned or absorbed before;
 *   - current() never ticks and is >= every value returned before.
 * Peer timestamps are absorbed with update() once the messenger has checked them with beyondSkewMs() (a message whose
 * timestamp is beyond the bound is refused whole, never absorbed); a timestamp first supplied by a client goes through
 * checkUntrusted(). Either way a bogus far-future value cannot drag the cluster's clocks ahead of physical time.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import {
  addMs,
  formatTimestamp,
  type HybridTimestamp,
  hybridTimestamp,
  MAX_TIMESTAMP,
  maxTimestamp,
  physicalMs,
  tick,
} from './timestamp.js';

export interface HybridClockOptions {
  /** Largest clock offset tolerated between nodes (default LIMITS.maxClockSkewMsDefault). */
  readonly maxClockSkewMs?: number;
}

export type ClockListener = (ts: HybridTimestamp) => void;

export class HybridClock {
  readonly maxClockSkewMs: number;
  private latest: HybridTimestamp;
  private readonly listeners = new Set<ClockListener>();

  constructor(
    private readonly physical: Clock,
    options: HybridClockOptions = {},
  ) {
    this.maxClockSkewMs = options.maxClockSkewMs ?? LIMITS.maxClockSkewMsDefault;
    assert(this.maxClockSkewMs >= 0, 'maxClockSkewMs must be >= 0');
    this.latest = this.physicalNow();
  }

  /** A fresh timestamp: unique, strictly greater than every timestamp this clock returned or absorbed. */
  now(): HybridTimestamp {
    const next = maxTimestamp(this.physicalNow(), tick(this.latest));
    return this.advance(next);
  }

  /** The clock's present reading without ticking: max(latest, physical time). */
  current(): HybridTimestamp {
    return maxTimestamp(this.latest, this.physicalNow());
  }

  /** Absorbs a peer's timestamp; returns a value greater than both `remote` and the previous reading. */
  update(remote: HybridTimestamp): HybridTimestamp {
    assert(remote < MAX_TIMESTAMP, 'remote timestamp at maximum');
    const next = maxTimestamp(maxTimestamp(tick(this.latest), tick(remote)), this.physicalNow());
    assert(next > remote, 'an absorbed timestamp is passed', remote, next);
    return this.advance(next);
  }

  /**
   * The skew guard for client-supplied timestamps: throws INVALID_ARGUMENT when `ts` lies further than
   * maxClockSkewMs ahead of this node's physical time. It never moves the clock.
   */
  checkUntrusted(ts: HybridTimestamp, what = 'timestamp'): void {
    const limit = addMs(this.physicalNow(), this.maxClockSkewMs);
    if (ts > limit) {
      throw new BasaltError('INVALID_ARGUMENT', `${what} ${formatTimestamp(ts)} is beyond the clock skew bound`, {
        timestamp: formatTimestamp(ts),
        limit: formatTimestamp(limit),
        maxClockSkewMs: this.maxClockSkewMs,
      });
    }
  }

  /**
   * How far `ts` lies beyond this node's physical time + maxClockSkewMs, in ms (0 when within). Rule 8: a peer message
   * with a positive excess is refused, so that one runaway clock cannot drag every clock it talks to.
   */
  beyondSkewMs(ts: HybridTimestamp): number {
    return Math.max(0, physicalMs(ts) - (physicalMs(this.physicalNow()) + this.maxClockSkewMs));
  }

  /** Physical time as a timestamp with logical 0. */
  physicalNow(): HybridTimestamp {
    return hybridTimestamp(Math.max(0, Math.floor(this.physical.nowMs())));
  }

  /** Called with every new reading after now()/update(); used by safe-time waiters. */
  onAdvance(listener: ClockListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private advance(next: HybridTimestamp): HybridTimestamp {
    assert(next > this.latest && next <= MAX_TIMESTAMP, 'hybrid clock must move forward', this.latest, next);
    this.latest = next;
    for (const listener of this.listeners) listener(next);
    return next;
  }
}
