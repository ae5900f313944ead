/**
 * An in-process network for real-time clusters without sockets: endpoints implementing the env Transport, driven by
 * injected timers. Model (the Transport guarantees of src/env/transport.ts):
 *   - every two open endpoints are connected; opening an endpoint reports `up` to it and to every peer, closing one
 *     reports `down` to every peer; a name reopened with a new id comes back `up` with that id;
 *   - each direction of a connection is one FIFO lane carrying messages and up/down notices in send order, so a peer
 *     never sees a message before the `up` of its sender nor after its `down`;
 *   - payloads go through the wire codec (exactly what TCP would deliver; a payload that is not plain data fails
 *     at the sender); a payload to a closed or unknown endpoint is lost.
 * Lanes are drained on a timer (delay `deliveryDelayMs`, default 0), so delivery is always asynchronous.
 */
import type { NodeIdentity, NodeName } from '../core/ids.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import type { Transport, TransportEvent, TransportHandler } from '../env/transport.js';
import { decode, encode } from '../net/codec.js';

export interface MemoryNetworkOptions {
  readonly timers: Timers;
  readonly deliveryDelayMs?: number;
}

type LaneItem = { readonly kind: 'message'; readonly bytes: Uint8Array } | { readonly kind: 'up' | 'down' };

/** One direction between two endpoint incarnations. */
interface Lane {
  readonly from: MemoryEndpoint;
  readonly to: MemoryEndpoint;
  readonly items: LaneItem[];
  timer: TimerHandle | undefined;
}

/** Items one lane holds before the oldest messages are dropped (a receiver that stopped draining). */
const LANE_ITEMS_MAX = 1_000_000;

class MemoryEndpoint implements Transport {
  open = true;
  handler: TransportHandler | undefined;
  readonly early: TransportEvent[] = [];

  constructor(
    private readonly network: MemoryNetwork,
    readonly self: NodeIdentity,
  ) {}

  send(to: NodeName, payload: unknown): void {
    this.network.send(this, to, payload);
  }

  setHandler(handler: TransportHandler): void {
    this.handler = handler;
    for (const event of this.early.splice(0)) handler(event);
  }

  close(): Promise<void> {
    this.network.close(this);
    return Promise.resolve();
  }

  receive(event: TransportEvent): void {
    if (!this.open) return;
    if (this.handler === undefined) this.early.push(event);
    else this.handler(event);
  }
}

export class MemoryNetwork {
  private readonly timers: Timers;
  private readonly deliveryDelayMs: number;
  private readonly endpoints = new Map<NodeName, MemoryEndpoint>();
  private readonly lanes = new Map<MemoryEndpoint, Map<MemoryEndpoint, Lane>>();

  constructor(options: MemoryNetworkOptions) {
    this.timers = options.timers;
    this.deliveryDelayMs = options.deliveryDelayMs ?? 0;
  }

  /** Opens the endpoint of `self`; the name must not have another open endpoint. */
  endpoint(self: NodeIdentity): Transport {
    const existing = this.endpoints.get(self.name);
    if (existing?.open) existing.close();
    const endpoint = new MemoryEndpoint(this, self);
    for (const peer of this.endpoints.values()) {
      if (!peer.open) continue;
      this.push(this.lane(peer, endpoint), { kind: 'up' });
      this.push(this.lane(endpoint, peer), { kind: 'up' });
    }
    this.endpoints.set(self.name, endpoint);
    return endpoint;
  }

  /** @internal */
  send(from: MemoryEndpoint, to: NodeName, payload: unknown): void {
    const bytes = encode(payload);
    if (!from.open) return;
    const target = this.endpoints.get(to);
    if (target === undefined || !target.open || target === from) return;
    this.push(this.lane(from, target), { kind: 'message', bytes });
  }

  /** @internal */
  close(endpoint: MemoryEndpoint): void {
    if (!endpoint.open) return;
    endpoint.open = false;
    for (const peer of this.endpoints.values()) {
      if (peer === endpoint || !peer.open) continue;
      this.push(this.lane(endpoint, peer), { kind: 'down' });
    }
    const outgoing = this.lanes.get(endpoint);
    for (const [to, lane] of outgoing ?? []) {
      // Lanes into the closed endpoint are dead; lanes out of it still carry the final `down` notices.
      if (lane.items.length === 0) outgoing!.delete(to);
    }
    for (const lanes of this.lanes.values()) {
      const lane = lanes.get(endpoint);
      if (lane === undefined) continue;
      if (lane.timer !== undefined) this.timers.clearTimer(lane.timer);
      lanes.delete(endpoint);
    }
  }

  /** Stops every delivery (the whole cluster is going away). */
  shutdown(): void {
    for (const endpoint of this.endpoints.values()) endpoint.open = false;
    for (const lanes of this.lanes.values()) {
      for (const lane of lanes.values()) if (lane.timer !== undefined) this.timers.clearTimer(lane.timer);
    }
    this.lanes.clear();
  }

  private lane(from: MemoryEndpoint, to: MemoryEndpoint): Lane {
    let lanes = this.lanes.get(from);
    if (lanes === undefined) {
      lanes = new Map();
      this.lanes.set(from, lanes);
    }
    let lane = lanes.get(to);
    if (lane === undefined) {
      lane = { from, to, items: [], timer: undefined };
      lanes.set(to, lane);
    }
    return lane;
  }

  private push(lane: Lane, item: LaneItem): void {
    if (lane.items.length >= LANE_ITEMS_MAX) {
      const i = lane.items.findIndex((x) => x.kind === 'message');
      if (i >= 0) lane.items.splice(i, 1);
    }
    lane.items.push(item);
    lane.timer ??= this.timers.setTimer(() => this.drain(lane), this.deliveryDelayMs);
  }

  private drain(lane: Lane): void {
    lane.timer = undefined;
    const items = lane.items.splice(0);
    const from = lane.from.self;
    for (const item of items) {
      if (item.kind === 'message') lane.to.receive({ kind: 'message', from, payload: decode(item.bytes) });
      else lane.to.receive({ kind: item.kind, peer: from });
    }
    // A closed endpoint's lanes carry nothing more once their last notices are out.
    if (!lane.from.open && lane.items.length === 0) {
      const outgoing = this.lanes.get(lane.from);
      outgoing?.delete(lane.to);
      if (outgoing?.size === 0) this.lanes.delete(lane.from);
    }
  }
}
