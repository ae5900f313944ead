/**
 * Membership and liveness of one node's peers (DESIGN §2 "Membership / liveness", safety rule 17).
 *
 * A peer name has at most one *current* ephemeral id: the one of its latest handshake. For that id:
 *   - live: its connection is up and it was heard (handshake or heartbeat answer) within `timeoutMs`;
 *   - gone: it was not heard for `timeoutMs` (connection down or heartbeats unanswered that long);
 *   - suspect: neither (connection down, or answers late, for less than the timeout).
 * An id that was current and then replaced by a handshake under the same name with a different id is *superseded*:
 * gone for good, since an ephemeral id is never reused (a restarted node has a new one). Any other id this node never
 * saw since it started is *unknown*, not gone (rule 17: try the coordinator first) — with one exception that follows
 * from the same rule: when every other member of the (static) cluster is live under a current id and the unknown id
 * has stayed unknown for `timeoutMs` since it was first asked about, it belongs to no running process (a live
 * incarnation would have handshaken by then), so it is gone. Without this, intents of a coordinator that died before a
 * whole-cluster restart would never be recovered: no node alive after the restart ever saw its id. A timed-out id that is heard again
 * (a healed partition) is live again: a gone verdict from a timeout is an observation, not a fence; safety never rests
 * on it (recovery finishes a tx by compare-and-set, so a live coordinator and a recovery cannot both win).
 *
 * The class is a synchronous state machine over injected monotonic time; the node feeds it transport events and
 * heartbeat answers and calls `tick` periodically to get `gone` events for timeouts. Heartbeat answers also carry the
 * peer's physical time: the clock offsets measured from them (`clock-offsets.ts`) say whether this node's clock is
 * within `clockOffsetBoundMs` of the majority (rule 19); a superseded peer's samples are dropped.
 */
import { assert } from '../core/assert.js';
import type { NodeId, NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { ClockOffsets, type ClockSample, type ClockVerdict } from './clock-offsets.js';

export type Liveness = 'self' | 'live' | 'suspect' | 'gone' | 'unknown';

export type MembershipEvent =
  | { readonly kind: 'live'; readonly peer: NodeIdentity }
  | { readonly kind: 'gone'; readonly peer: NodeIdentity; readonly reason: 'superseded' | 'timeout' };

export type MembershipListener = (event: MembershipEvent) => void;

export interface MembershipOptions {
  readonly self: NodeIdentity;
  /** Monotonic milliseconds. */
  readonly nowMs: () => number;
  readonly timeoutMs?: number;
  readonly goneIdsMax?: number;
  /** Nodes in the cluster, this one included (enables the "unknown to a fully live cluster" verdict above). */
  readonly memberCount?: number;
  /** Rule 19: beyond this offset from a majority, the node stops acting as primary and coordinator. */
  readonly clockOffsetBoundMs?: number;
}

interface PeerRecord {
  readonly id: NodeId;
  connected: boolean;
  lastHeardMs: number;
  /** This incarnation announced a graceful stop: still live, but no successor for leases or leaderships. */
  leaving?: boolean;
  /** Whether the last event reported for this id was `gone` (so each change is reported once). */
  reportedGone: boolean;
}

export class Membership {
  readonly self: NodeIdentity;
  readonly timeoutMs: number;
  readonly clockOffsetBoundMs: number;
  readonly clockOffsets = new ClockOffsets();
  private readonly nowMs: () => number;
  private readonly goneIdsMax: number;
  private readonly peers = new Map<NodeName, PeerRecord>();
  /** Superseded ids, oldest first; bounded by goneIdsMax. */
  private readonly superseded = new Map<NodeId, NodeName>();
  /** When each unknown id was first asked about; bounded by goneIdsMax (oldest dropped). */
  private readonly unknownSince = new Map<NodeId, number>();
  private memberCount: number | undefined;
  private readonly listeners = new Set<MembershipListener>();
  private verdictCache: { readonly atMs: number; readonly verdict: ClockVerdict } | undefined;

  constructor(options: MembershipOptions) {
    this.self = options.self;
    this.nowMs = options.nowMs;
    this.timeoutMs = options.timeoutMs ?? LIMITS.peerLivenessTimeoutMsDefault;
    this.goneIdsMax = options.goneIdsMax ?? LIMITS.goneNodeIdsMax;
    this.memberCount = options.memberCount;
    this.clockOffsetBoundMs =
      options.clockOffsetBoundMs ?? LIMITS.maxClockSkewMsDefault * LIMITS.clockOffsetBoundFraction;
    assert(this.timeoutMs > 0 && this.goneIdsMax > 0, 'membership limits must be positive');
  }
  /** The cluster's member count changed (a node joined or was removed): see the "unknown to a fully live cluster" rule. */
  setMemberCount(count: number): void {
    assert(Number.isSafeInteger(count) && count > 0, 'a cluster has at least one member', count);
    this.memberCount = count;
  }

  /** A connection to `peer` completed its handshake. */
  peerUp(peer: NodeIdentity): void {
    if (peer.name === this.self.name) return;
    this.unknownSince.delete(peer.id);
    const now = this.nowMs();
    const record = this.peers.get(peer.name);
    if (record !== undefined && record.id !== peer.id) {
      this.supersede(peer.name, record);
    }
    const current = this.peers.get(peer.name);
    if (current?.id === peer.id) {
      const wasLive = this.isLiveRecord(current, now);
      current.connected = true;
      current.lastHeardMs = now;
      current.reportedGone = false;
      if (!wasLive) this.emit({ kind: 'live', peer });
      return;
    }
    this.peers.set(peer.name, { id: peer.id, connected: true, lastHeardMs: now, reportedGone: false });
    this.emit({ kind: 'live', peer });
  }

  /** The connection to `peer` went down (a stale id's down is ignored). */
  peerDown(peer: NodeIdentity): void {
    const record = this.peers.get(peer.name);
    if (record === undefined || record.id !== peer.id) return;
    record.connected = false;
  }

  /** `peer` announced a graceful stop (a stale id's notice is ignored; a restart comes back with a new id). */
  peerLeaving(peer: NodeIdentity): void {
    const record = this.peers.get(peer.name);
    if (record !== undefined && record.id === peer.id) record.leaving = true;
  }

  /**
   * Whether `name` can take over leases and leaderships: live, and not stopping. This node itself qualifies unless
   * it is stopping (its owner knows that).
   */
  canSucceed(name: NodeName): boolean {
    if (name === this.self.name) return true;
    const record = this.peers.get(name);
    return record !== undefined && record.leaving !== true && this.isLiveRecord(record, this.nowMs());
  }

  /** `peer` answered a heartbeat. */
  heard(peer: NodeIdentity): void {
    const record = this.peers.get(peer.name);
    if (record === undefined || record.id !== peer.id) return;
    const now = this.nowMs();
    const wasLive = this.isLiveRecord(record, now);
    record.lastHeardMs = now;
    if (record.connected) record.reportedGone = false;
    if (!wasLive && record.connected) this.emit({ kind: 'live', peer });
  }

  /** `peer` answered a heartbeat with its physical time: one clock offset sample (a stale id's is ignored). */
  clockSample(peer: NodeIdentity, sample: ClockSample): void {
    if (this.peers.get(peer.name)?.id !== peer.id) return;
    this.clockOffsets.record(peer.name, sample);
    this.verdictCache = undefined;
  }

  /** Rule 19: whether this node's clock is beyond the bound from a majority of the live nodes it measured. */
  clockVerdict(): ClockVerdict {
    // Asked on every primary request: computed at most once per whole millisecond (the monotonic clock has
    // fractions) and per new sample.
    const now = Math.floor(this.nowMs());
    if (this.verdictCache?.atMs !== now) {
      this.verdictCache = { atMs: now, verdict: this.clockOffsets.verdict(this.livePeers(), this.clockOffsetBoundMs) };
    }
    return this.verdictCache.verdict;
  }

  /** True while this node's clock is within the bound (it may act as primary and coordinator). */
  clockWithinBound(): boolean {
    return this.clockVerdict().kind === 'within';
  }

  /** Estimated offsets of the live peers' clocks from this node's (peer minus self), by name. */
  clockOffsetsMs(): Record<string, number> {
    return this.clockOffsets.offsets(this.livePeers());
  }

  /** Reports ids that timed out since the last call. */
  tick(): void {
    const now = this.nowMs();
    for (const [name, record] of this.peers) {
      if (record.reportedGone || now - record.lastHeardMs < this.timeoutMs) continue;
      record.reportedGone = true;
      this.emit({ kind: 'gone', peer: { name, id: record.id }, reason: 'timeout' });
    }
  }

  liveness(id: NodeId): Liveness {
    if (id === this.self.id) return 'self';
    if (this.superseded.has(id)) return 'gone';
    const now = this.nowMs();
    for (const record of this.peers.values()) {
      if (record.id !== id) continue;
      if (this.isLiveRecord(record, now)) return 'live';
      return now - record.lastHeardMs >= this.timeoutMs ? 'gone' : 'suspect';
    }
    return this.unknownVerdict(id, now);
  }

  /** An id no member ever presented: gone once the whole cluster is live and the id stayed unknown for the timeout. */
  private unknownVerdict(id: NodeId, now: number): Liveness {
    if (this.memberCount === undefined) return 'unknown';
    let since = this.unknownSince.get(id);
    if (since === undefined) {
      since = now;
      this.unknownSince.set(id, now);
      if (this.unknownSince.size > this.goneIdsMax) {
        const oldest = this.unknownSince.keys().next().value;
        if (oldest !== undefined) this.unknownSince.delete(oldest);
      }
    }
    if (now - since < this.timeoutMs || this.peers.size !== this.memberCount - 1) return 'unknown';
    for (const record of this.peers.values()) if (!this.isLiveRecord(record, now)) return 'unknown';
    return 'gone';
  }

  /** Rule 17: true only for a superseded id or one not heard for the timeout; never for an id never seen. */
  isGone(id: NodeId): boolean {
    return this.liveness(id) === 'gone';
  }

  /** The ephemeral id of `name` while it is live. */
  liveIdOf(name: NodeName): NodeId | undefined {
    if (name === this.self.name) return this.self.id;
    const record = this.peers.get(name);
    return record !== undefined && this.isLiveRecord(record, this.nowMs()) ? record.id : undefined;
  }

  /** The latest id a peer handshook with, live or not. */
  currentIdOf(name: NodeName): NodeId | undefined {
    return name === this.self.name ? this.self.id : this.peers.get(name)?.id;
  }

  /** Names of the live peers, sorted. */
  livePeers(): NodeName[] {
    const now = this.nowMs();
    return [...this.peers]
      .filter(([, r]) => this.isLiveRecord(r, now))
      .map(([name]) => name)
      .sort();
  }

  /** Peers whose connection is up (heartbeat targets). */
  connectedPeers(): NodeIdentity[] {
    return [...this.peers].filter(([, r]) => r.connected).map(([name, r]) => ({ name, id: r.id }));
  }

  onChange(listener: MembershipListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private isLiveRecord(record: PeerRecord, now: number): boolean {
    return record.connected && now - record.lastHeardMs < this.timeoutMs;
  }

  private supersede(name: NodeName, record: PeerRecord): void {
    this.peers.delete(name);
    this.clockOffsets.forget(name);
    this.superseded.set(record.id, name);
    if (this.superseded.size > this.goneIdsMax) {
      const oldest = this.superseded.keys().next().value;
      if (oldest !== undefined) this.superseded.delete(oldest);
    }
    this.emit({ kind: 'gone', peer: { name, id: record.id }, reason: 'superseded' });
  }

  private emit(event: MembershipEvent): void {
    for (const listener of [...this.listeners]) listener(event);
  }
}
