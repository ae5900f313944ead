/**
 * The transport seam: how a node exchanges messages with its peers. Two implementations: real TCP (src/net) and the
 * simulated network (src/sim). Guarantees, the same for both:
 *   - a payload sent to a peer is delivered at most once, and payloads on one connection arrive in send order;
 *   - payloads may be lost when a connection drops (the layer above retries; it never assumes delivery);
 *   - `up` is reported once a connection to a peer completed its handshake, with the peer's ephemeral id; a peer that
 *     restarted comes back `up` under the same name with a new id;
 *   - a malformed or oversized frame closes only the connection it arrived on.
 * Payloads are plain data (msgpack-encodable: objects, arrays, strings, numbers, bigint, Uint8Array, booleans, null).
 */
import type { NodeIdentity, NodeName } from '../core/ids.js';

export type TransportEvent =
  | { readonly kind: 'message'; readonly from: NodeIdentity; readonly payload: unknown }
  | { readonly kind: 'up'; readonly peer: NodeIdentity }
  | { readonly kind: 'down'; readonly peer: NodeIdentity };

export type TransportHandler = (event: TransportEvent) => void;

/** What a transport sent to peers so far: payloads queued, and the system calls that wrote them (batched per turn). */
export interface PeerTraffic {
  readonly messagesSent: number;
  readonly writes: number;
}

export interface Transport {
  readonly self: NodeIdentity;
  /** Queues `payload` for peer `to`. Never throws for an unreachable peer; the payload may be lost. */
  send(to: NodeName, payload: unknown): void;
  /** Installs the single receiver of transport events. */
  setHandler(handler: TransportHandler): void;
  /** Closes every connection; later sends are dropped. */
  close(): Promise<void>;
  /** Dials `name` at `address` from now on (transports that route by address; others need no call). */
  addPeer?(name: NodeName, address: string): void;
  /** Whether this transport already has an address for `name` (given by configuration or learned). */
  knowsPeer?(name: NodeName): boolean;
  /** Counts of what went to peers (transports over sockets; in-process ones have no writes to count). */
  traffic?(): PeerTraffic;
}
