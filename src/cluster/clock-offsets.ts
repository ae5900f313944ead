/**
 * Clock offsets of this node's peers, measured from membership heartbeats (DESIGN §2b rule 19).
 *
 * Each heartbeat records this node's physical time when it was sent, and its answer carries the peer's physical time
 * when it answered. With the round trip `rtt` measured on the monotonic clock, the peer's offset from this node is
 * estimated as `remote − (sent + rtt/2)`: positive when the peer's clock is ahead. The error of one sample is at most
 * `rtt/2`, so of the latest `samplesMax` samples of a peer the one with the smallest round trip is the estimate (a
 * delayed answer cannot skew it, and a clock step is seen once the window has turned over).
 *
 * Verdict: this node is *beyond* the bound when the peers whose estimated offset exceeds the bound (in absolute value)
 * are a strict majority of the nodes it measures, itself included (it agrees with itself). So in a cluster where one
 * node is off, only that node is beyond; with a single peer neither side can tell who is wrong and neither steps down.
 * A pure state machine: the node feeds it samples and asks it for the verdict.
 */
import { assert } from '../core/assert.js';
import type { NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';

/** One heartbeat round trip to a peer. */
export interface ClockSample {
  /** This node's physical time when the heartbeat was sent. */
  readonly sentPhysicalMs: number;
  readonly sentMonotonicMs: number;
  /** The peer's physical time when it answered. */
  readonly remotePhysicalMs: number;
  readonly receivedMonotonicMs: number;
}

export interface OffsetEstimate {
  /** Peer clock minus this node's clock. */
  readonly offsetMs: number;
  readonly rttMs: number;
}

export type ClockVerdict =
  | { readonly kind: 'within'; readonly beyondPeers: number; readonly measuredPeers: number }
  | { readonly kind: 'beyond'; readonly beyondPeers: number; readonly measuredPeers: number };

export class ClockOffsets {
  private readonly samples = new Map<NodeName, OffsetEstimate[]>();
  private readonly samplesMax: number;

  constructor(samplesMax: number = LIMITS.clockOffsetSamplesMax) {
    assert(samplesMax > 0, 'clock offset window must hold a sample');
    this.samplesMax = samplesMax;
  }

  /** Records one round trip to `peer`; a sample whose round trip is negative (impossible) is ignored. */
  record(peer: NodeName, sample: ClockSample): void {
    const rttMs = sample.receivedMonotonicMs - sample.sentMonotonicMs;
    if (!(rttMs >= 0) || !Number.isFinite(sample.remotePhysicalMs)) return;
    const offsetMs = sample.remotePhysicalMs - (sample.sentPhysicalMs + rttMs / 2);
    const window = this.samples.get(peer) ?? [];
    window.push({ offsetMs, rttMs });
    if (window.length > this.samplesMax) window.shift();
    this.samples.set(peer, window);
  }

  /** Drops what was measured of `peer` (a new incarnation may run on another clock). */
  forget(peer: NodeName): void {
    this.samples.delete(peer);
  }

  /** The estimate for `peer`: the sample of smallest round trip among the latest ones. */
  estimate(peer: NodeName): OffsetEstimate | undefined {
    const window = this.samples.get(peer);
    if (window === undefined || window.length === 0) return undefined;
    return window.reduce((best, s) => (s.rttMs < best.rttMs ? s : best));
  }

  /** Estimated offsets of `peers` (those measured), by name. */
  offsets(peers: readonly NodeName[]): Record<string, number> {
    const out: Record<string, number> = {};
    for (const peer of peers) {
      const e = this.estimate(peer);
      if (e !== undefined) out[peer] = e.offsetMs;
    }
    return out;
  }

  /** Beyond when the peers measured beyond `boundMs` are a strict majority of the measured nodes, this one included. */
  verdict(livePeers: readonly NodeName[], boundMs: number): ClockVerdict {
    let measuredPeers = 0;
    let beyondPeers = 0;
    for (const peer of livePeers) {
      const e = this.estimate(peer);
      if (e === undefined) continue;
      measuredPeers++;
      if (Math.abs(e.offsetMs) > boundMs) beyondPeers++;
    }
    const kind = 2 * beyondPeers > measuredPeers + 1 ? 'beyond' : 'within';
    return { kind, beyondPeers, measuredPeers };
  }
}
