/**
 * The real Transport: TCP with `node:net`, payloads encoded by the codec into length-prefixed frames.
 *
 * Model: each node dials each known peer and uses that *outbound* connection for everything it sends to the peer;
 * connections it accepts are *inbound* and used for receiving. Per peer, then, there is one ordered byte stream in
 * each direction, which gives the Transport guarantees (src/env/transport.ts): payloads to a peer arrive in send
 * order, at most once, and may be lost only when a connection drops.
 *   - `up(peer)` is emitted when the outbound connection to a peer completed its hello exchange, with the peer's
 *     ephemeral id; `down(peer)` when that connection closes. A restarted peer comes back `up` with its new id;
 *     an inbound hello from a known peer with a new id closes the stale outbound connection at once.
 *   - While a peer is not up its payloads wait in a queue bounded by `peerSendQueueMax` (the oldest are dropped);
 *     the queue is written first when the connection opens, so order holds across reconnects.
 *   - Reconnects back off exponentially between `reconnectBackoffMsMin` and `…Max`, with jitter from the injected
 *     Random, on the injected Timers (connect + hello share the handshake timeout).
 *   - A malformed frame, an oversized length or a bad hello closes that connection only, reported as a diagnostic.
 *   - With `members` (or after `setMembers`) every hello carries the cluster fingerprint (handshake.ts); a peer whose
 *     hello lists other members is refused in either direction and retried with backoff like an unreachable one.
 *     The `member-mismatch` diagnostic is reported once per peer and member set, not on every retry; an agreeing
 *     connection (or new members of our own) re-arms it.
 *   - With `tls` it listens and dials with mutual TLS 1.3 instead (peer-tls.ts), and a peer whose certificate does not
 *     name the member its hello claims is refused in either direction (`peer-cert-mismatch`, reported once per peer
 *     and certificate names until that peer connects properly); a failed inbound TLS handshake is a `tls-refused`
 *     diagnostic, once per reason until an inbound connection opens. Without `tls`, plain TCP.
 * `send` never throws for an unreachable peer; it throws MALFORMED_FRAME / FRAME_TOO_LARGE only for a payload that
 * is not plain data or too large (a bug in the caller).
 */
import type { Server, Socket } from 'node:net';
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Random } from '../env/random.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import type { PeerTraffic, Transport, TransportEvent, TransportHandler } from '../env/transport.js';
import { type DiagnosticListener, ignoreDiagnostics, type NetDiagnostic } from './diagnostics.js';
import { encodeFrame } from './frame.js';
import { hello, memberFingerprint, memberMismatch, type PeerHello, sameMembers } from './handshake.js';
import { certificateNameProblem, PeerSockets, type PeerTlsMaterial } from './peer-tls.js';
import { type ConnectionLimits, type Refusal, TcpConnection } from './tcp-connection.js';

export interface TcpTransportOptions {
  readonly self: NodeIdentity;
  readonly host: string;
  /** 0 picks an ephemeral port; read it back from `address`/`port`. */
  readonly port: number;
  /** Known peers: node name → 'host:port'. */
  readonly peers?: Readonly<Record<string, string>>;
  /**
   * The cluster's member names, this node's among them, sent in every hello; peers that send other ones are refused.
   * Absent: hellos carry none and nobody is refused for its members (set them later with `setMembers`).
   */
  readonly members?: readonly NodeName[];
  readonly timers: Timers;
  readonly random: Random;
  /** Mutual TLS on this port and on every dial (peer-tls.ts); absent: plain TCP. */
  readonly tls?: PeerTlsMaterial;
  readonly onDiagnostic?: DiagnosticListener;
  readonly handshakeTimeoutMs?: number;
  readonly reconnectBackoffMsMin?: number;
  readonly reconnectBackoffMsMax?: number;
  readonly frameBytesMax?: number;
  readonly peerSendQueueMax?: number;
  readonly peerWriteBufferBytesMax?: number;
  readonly inboundConnectionsMax?: number;
}

interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** Outbound state for one peer. Invariant: `up` is set iff `connection` is open and `up` was announced. */
interface PeerLink {
  readonly name: NodeName;
  readonly address: HostPort;
  connection: TcpConnection | undefined;
  up: NodeIdentity | undefined;
  /** Encoded frames waiting for the connection to open; at most `peerSendQueueMax`. */
  queue: Array<readonly Buffer[]>;
  droppedFrames: number;
  backoffMs: number;
  reconnectTimer: TimerHandle | undefined;
  removed: boolean;
}

export class TcpTransport implements Transport {
  readonly self: NodeIdentity;
  private readonly links = new Map<NodeName, PeerLink>();
  /** Open inbound connections by peer name (the newest per name); handshaking ones are only in `connections`. */
  private readonly inbound = new Map<NodeName, TcpConnection>();
  private readonly connections = new Set<TcpConnection>();
  /** Payloads sent to peers and socket writes, over every connection of this transport. */
  private readonly counts = { messagesSent: 0, writes: 0 };
  /** Accepted connections, handshaking or open; at most `inboundConnectionsMax`. */
  private readonly accepted = new Set<TcpConnection>();
  private handler: TransportHandler | undefined;
  private readonly early: TransportEvent[] = [];
  private readonly connectionLimits: ConnectionLimits;
  private readonly backoffMsMin: number;
  private readonly backoffMsMax: number;
  private readonly sendQueueMax: number;
  private readonly inboundMax: number;
  private readonly diagnose: DiagnosticListener;
  /** Our member fingerprint (sorted, distinct), undefined while unknown. */
  private members: readonly NodeName[] | undefined;
  /** Where peers dial this node, sent in every hello (`setAdvertised`); peers that know no address use it. */
  private advertised: string | undefined;
  /** Peer name → the member list last reported as differing from ours; at most `clusterMembersMax` entries. */
  private readonly reportedMismatches = new Map<NodeName, string>();
  /** Peer name → the certificate problem last reported for it; at most `clusterMembersMax` entries. */
  private readonly reportedCertProblems = new Map<NodeName, string>();
  /**
   * Reasons of failed inbound TLS handshakes reported since the last good inbound connection; at most
   * `inboundConnectionsMax`. Keyed by reason alone: node:tls no longer knows the remote address when it reports one.
   */
  private readonly reportedTlsRefusals = new Map<string, string>();
  private server: Server | undefined;
  private closed = false;

  private constructor(
    private readonly sockets: PeerSockets,
    private readonly options: TcpTransportOptions,
  ) {
    this.self = options.self;
    this.connectionLimits = {
      handshakeTimeoutMs: options.handshakeTimeoutMs ?? LIMITS.handshakeTimeoutMs,
      frameBytesMax: options.frameBytesMax ?? LIMITS.frameBytesMax,
      writeBufferBytesMax: options.peerWriteBufferBytesMax ?? LIMITS.peerWriteBufferBytesMax,
    };
    this.backoffMsMin = options.reconnectBackoffMsMin ?? LIMITS.reconnectBackoffMsMin;
    this.backoffMsMax = options.reconnectBackoffMsMax ?? LIMITS.reconnectBackoffMsMax;
    this.sendQueueMax = options.peerSendQueueMax ?? LIMITS.peerSendQueueMax;
    this.inboundMax = options.inboundConnectionsMax ?? LIMITS.inboundConnectionsMax;
    this.members = options.members === undefined ? undefined : this.fingerprint(options.members);
    const diagnose = options.onDiagnostic ?? ignoreDiagnostics;
    this.diagnose = (d) => {
      try {
        diagnose(d);
      } catch {
        // A failing diagnostics sink must not break the transport.
      }
    };
  }

  /** Listens on host:port, then dials every known peer. */
  static async start(options: TcpTransportOptions): Promise<TcpTransport> {
    const sockets = new PeerSockets(options.tls, options.handshakeTimeoutMs ?? LIMITS.handshakeTimeoutMs);
    const transport = new TcpTransport(sockets, options);
    const server = sockets.listen(
      (socket) => transport.onInbound(socket),
      (message) => transport.onTlsRefused(message),
      transport.inboundMax,
    );
    transport.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.port, options.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', (error) =>
      transport.diagnose({ kind: 'connection-error', message: `server: ${error.message}` }),
    );
    for (const [name, address] of Object.entries(options.peers ?? {})) transport.addPeer(name as NodeName, address);
    return transport;
  }

  /** The address this transport listens on, as 'host:port'. */
  get address(): string {
    return formatHostPort(this.options.host, this.port);
  }

  get port(): number {
    const address = this.server?.address();
    return typeof address === 'object' && address !== null ? address.port : this.options.port;
  }

  setHandler(handler: TransportHandler): void {
    this.handler = handler;
    for (const event of this.early.splice(0)) this.emit(event);
  }

  send(to: NodeName, payload: unknown): void {
    const frame = encodeFrame(payload, this.connectionLimits.frameBytesMax);
    if (this.closed) return;
    const link = this.links.get(to);
    if (link === undefined) {
      this.diagnose({ kind: 'payload-dropped', message: `no address known for ${to}`, peer: to });
      return;
    }
    this.counts.messagesSent += 1;
    if (link.up !== undefined) {
      assert(link.connection?.isOpen === true, 'a peer is up only while its outbound connection is open');
      link.connection.write(frame);
    } else this.enqueue(link, frame);
  }

  traffic(): PeerTraffic {
    return { messagesSent: this.counts.messagesSent, writes: this.counts.writes };
  }

  /** Renewed peer certificates or CA (peer-tls.ts `update`): new connections use them, open ones keep theirs. */
  updateTls(material: PeerTlsMaterial): void {
    this.sockets.update(material);
  }

  knowsPeer(name: NodeName): boolean {
    return this.links.has(name);
  }

  /** The address later hellos name for this node (its advertised peer address). */
  setAdvertised(address: string): void {
    parseHostPort(address);
    this.advertised = address;
  }

  /** Adds or re-addresses a peer and starts dialing it. */
  addPeer(name: NodeName, address: string): void {
    if (this.closed || name === this.self.name) return;
    const parsed = parseHostPort(address);
    const existing = this.links.get(name);
    if (existing !== undefined) {
      if (existing.address.host === parsed.host && existing.address.port === parsed.port) return;
      this.removePeer(name);
    }
    const link: PeerLink = {
      name,
      address: parsed,
      connection: undefined,
      up: undefined,
      queue: [],
      droppedFrames: 0,
      backoffMs: this.backoffMsMin,
      reconnectTimer: undefined,
      removed: false,
    };
    this.links.set(name, link);
    this.dial(link);
  }

  /** Forgets a peer: closes its outbound connection (emitting `down` if it was up) and drops its queue. */
  removePeer(name: NodeName): void {
    const link = this.links.get(name);
    if (link === undefined) return;
    link.removed = true;
    this.links.delete(name);
    if (link.reconnectTimer !== undefined) this.options.timers.clearTimer(link.reconnectTimer);
    link.queue = [];
    link.connection?.close();
  }

  /**
   * Sets the member names this node runs with (a node learns them after its transport listens: `basalt start` probes
   * its peers first). Later hellos carry them; open connections whose peer listed other members are refused now.
   * Throws INVALID_ARGUMENT for a list without this node or past the limits.
   */
  setMembers(names: readonly NodeName[]): void {
    const members = this.fingerprint(names);
    if (this.members !== undefined && sameMembers(this.members, members)) return;
    this.members = members;
    this.reportedMismatches.clear();
    for (const connection of [...this.connections]) {
      const peer = connection.peer;
      if (peer === undefined || !connection.isOpen) continue;
      const refusal = this.refuseMembers({ peer, members: connection.peerMembers }, this.whereIs(connection));
      if (refusal !== undefined) connection.refuse(refusal);
    }
  }

  /** Names of the peers whose outbound connection is up, with their ids. */
  livePeers(): NodeIdentity[] {
    return [...this.links.values()].flatMap((link) => (link.up === undefined ? [] : [link.up]));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const link of this.links.values()) {
      link.removed = true;
      if (link.reconnectTimer !== undefined) this.options.timers.clearTimer(link.reconnectTimer);
    }
    for (const connection of [...this.connections]) connection.close();
    const server = this.server;
    if (server !== undefined) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private enqueue(link: PeerLink, frame: readonly Buffer[]): void {
    link.queue.push(frame);
    if (link.queue.length <= this.sendQueueMax) return;
    link.queue.shift();
    assert(link.queue.length === this.sendQueueMax, 'a send queue holds at most peerSendQueueMax frames');
    link.droppedFrames++;
    if (link.droppedFrames === 1) {
      const message = `send queue of ${link.name} is full (${this.sendQueueMax}); dropping the oldest payloads`;
      this.diagnose({ kind: 'payload-dropped', message, peer: link.name, code: 'OVERLOADED' });
    }
  }

  private dial(link: PeerLink): void {
    link.reconnectTimer = undefined;
    if (this.closed || link.removed) return;
    const socket = this.sockets.dial(link.address.host, link.address.port);
    const where = `at ${formatHostPort(link.address.host, link.address.port)}`;
    const connection = this.track(socket, link.name, {
      accept: (h) =>
        h.peer.name === link.name
          ? (this.refuseCertificate(socket, h, where) ?? this.refuseMembers(h, where))
          : { kind: 'handshake-failed', message: `expected ${link.name}, the peer says it is ${h.peer.name}` },
      onOpen: (c) => this.onOutboundOpen(link, c),
      onPayload: (c, payload) => this.deliver(c, payload),
      onClose: (c) => this.onOutboundClose(link, c),
    });
    link.connection = connection;
  }

  private onOutboundOpen(link: PeerLink, connection: TcpConnection): void {
    if (link.connection !== connection || connection.peer === undefined) return;
    link.backoffMs = this.backoffMsMin;
    this.agreed(connection);
    this.reportedCertProblems.delete(connection.peer.name);
    link.up = connection.peer;
    for (const frame of link.queue) connection.write(frame);
    link.queue = [];
    link.droppedFrames = 0;
    this.emit({ kind: 'up', peer: link.up });
  }

  private onOutboundClose(link: PeerLink, connection: TcpConnection): void {
    this.connections.delete(connection);
    if (link.connection !== connection) return;
    link.connection = undefined;
    const wasUp = link.up;
    link.up = undefined;
    if (wasUp !== undefined && !this.closed) this.emit({ kind: 'down', peer: wasUp });
    if (this.closed || link.removed) return;
    const halfMs = link.backoffMs / 2;
    const delayMs = Math.round(halfMs + this.options.random.next() * halfMs);
    link.backoffMs = Math.min(this.backoffMsMax, link.backoffMs * 2);
    link.reconnectTimer = this.options.timers.setTimer(() => this.dial(link), delayMs);
  }

  private onInbound(socket: Socket): void {
    const remote = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
    if (this.closed || this.accepted.size >= this.inboundMax) {
      this.diagnose({ kind: 'connection-error', message: `refused inbound connection from ${remote}`, peer: remote });
      socket.destroy();
      return;
    }
    const connection = this.track(socket, remote, {
      accept: (h) =>
        h.peer.name === this.self.name
          ? { kind: 'handshake-failed', message: `the peer claims this node's name ${h.peer.name}` }
          : (this.refuseCertificate(socket, h, `from ${socket.remoteAddress ?? '?'}`) ??
            this.refuseMembers(h, `from ${socket.remoteAddress ?? '?'}`)),
      onOpen: (c) => this.onInboundOpen(c),
      onPayload: (c, payload) => this.deliver(c, payload),
      onClose: (c) => {
        this.connections.delete(c);
        this.accepted.delete(c);
        if (c.peer !== undefined && this.inbound.get(c.peer.name) === c) this.inbound.delete(c.peer.name);
      },
    });
    this.accepted.add(connection);
  }

  /** The newest inbound connection of a peer supersedes older ones; a new id means the outbound one is stale. */
  private onInboundOpen(connection: TcpConnection): void {
    const peer = connection.peer;
    if (peer === undefined) return;
    this.agreed(connection);
    this.reportedCertProblems.delete(peer.name);
    this.reportedTlsRefusals.clear();
    const previous = this.inbound.get(peer.name);
    this.inbound.set(peer.name, connection);
    previous?.close();
    const link = this.links.get(peer.name);
    if (link?.up !== undefined && link.up.id !== peer.id) link.connection?.close();
    // A peer this node has no address for (one that joined the cluster after it started) is dialed where it says.
    const address = connection.peerAddress;
    if (link === undefined && address !== undefined && !this.closed) this.addPeer(peer.name, address);
  }

  /** A refusal when the peer's hello lists other members than ours; silent when reported before for that list. */
  private refuseMembers(peerHello: PeerHello, where: string): Refusal | undefined {
    const message = memberMismatch(this.members, peerHello, where);
    if (message === undefined) return undefined;
    const name = peerHello.peer.name;
    const theirs = (peerHello.members ?? []).join(',');
    const silent = this.reportedMismatches.get(name) === theirs;
    if (!silent) {
      this.reportedMismatches.delete(name);
      if (this.reportedMismatches.size >= LIMITS.clusterMembersMax) {
        // Forgetting the oldest only means that peer's mismatch is reported once more.
        const oldest = this.reportedMismatches.keys().next().value;
        if (oldest !== undefined) this.reportedMismatches.delete(oldest);
      }
      this.reportedMismatches.set(name, theirs);
    }
    return { kind: 'member-mismatch', message, silent };
  }

  /**
   * A refusal when the peer's TLS certificate does not name the member its hello claims (none over plain TCP);
   * silent when reported before for that peer and problem.
   */
  private refuseCertificate(socket: Socket, peerHello: PeerHello, where: string): Refusal | undefined {
    const problem = certificateNameProblem(socket, peerHello.peer.name);
    if (problem === undefined) return undefined;
    const message = `${problem} (${where})`;
    const silent = !reportOnce(this.reportedCertProblems, peerHello.peer.name, problem, LIMITS.clusterMembersMax);
    return { kind: 'peer-cert-mismatch', message, silent, code: 'PEER_CERT_MISMATCH' };
  }

  /** A failed inbound TLS handshake, reported once per reason until an inbound connection opens. */
  private onTlsRefused(message: string): void {
    if (this.closed || !reportOnce(this.reportedTlsRefusals, message, message, this.inboundMax)) return;
    const diagnostic: NetDiagnostic = {
      kind: 'tls-refused',
      message: `refused an inbound TLS handshake (a peer without a certificate of this cluster's CA?): ${message}`,
      code: 'HANDSHAKE_FAILED',
    };
    this.diagnose(diagnostic);
  }

  /** A connection on which both ends listed the same members: a later mismatch of that peer is news again. */
  private agreed(connection: TcpConnection): void {
    if (connection.peer !== undefined && connection.peerMembers !== undefined && this.members !== undefined) {
      this.reportedMismatches.delete(connection.peer.name);
    }
  }

  /** Where a peer is, for a reason: the address we dialed, or the host an inbound connection came from. */
  private whereIs(connection: TcpConnection): string {
    const link = connection.peer === undefined ? undefined : this.links.get(connection.peer.name);
    if (link?.connection === connection) return `at ${formatHostPort(link.address.host, link.address.port)}`;
    return `from ${connection.remoteHost}`;
  }

  /** The cluster's founding members: a node that joined later carries them too, without its own name. */
  private fingerprint(names: readonly NodeName[]): readonly NodeName[] {
    return memberFingerprint(names);
  }

  private track(socket: Socket, label: string, events: ConstructorParameters<typeof TcpConnection>[4]): TcpConnection {
    const connection = new TcpConnection(
      socket,
      hello(this.self, this.members, this.advertised),
      this.options.timers,
      this.connectionLimits,
      events,
      this.diagnose,
      label,
      this.counts,
    );
    this.connections.add(connection);
    return connection;
  }

  private deliver(connection: TcpConnection, payload: unknown): void {
    const from = connection.peer;
    if (from === undefined || this.closed) return;
    this.emit({ kind: 'message', from, payload });
  }

  private emit(event: TransportEvent): void {
    if (this.handler === undefined) {
      // Events before the receiver is installed wait for it, within the same bound as a peer's send queue.
      if (this.early.length < this.sendQueueMax) this.early.push(event);
      return;
    }
    try {
      this.handler(event);
    } catch (error) {
      const diagnostic: NetDiagnostic = {
        kind: 'handler-failed',
        message: `transport handler threw: ${String(error)}`,
      };
      this.diagnose(diagnostic);
    }
  }
}

/**
 * Whether `key`'s `value` is news (and records it): false when it was the last one reported for that key. The map
 * keeps at most `entriesMax` keys; forgetting the oldest only means that one is reported once more.
 */
function reportOnce(reported: Map<string, string>, key: string, value: string, entriesMax: number): boolean {
  if (reported.get(key) === value) return false;
  reported.delete(key);
  if (reported.size >= entriesMax) {
    const oldest = reported.keys().next().value;
    if (oldest !== undefined) reported.delete(oldest);
  }
  reported.set(key, value);
  return true;
}

/** Parses 'host:port' or '[v6host]:port'. Throws INVALID_ARGUMENT. */
export function parseHostPort(address: string): HostPort {
  const colon = address.lastIndexOf(':');
  const port = Number(address.slice(colon + 1));
  let host = address.slice(0, colon);
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
  if (colon <= 0 || host.length === 0 || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new BasaltError('INVALID_ARGUMENT', `not a host:port address: ${address}`);
  }
  return { host, port };
}

function formatHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
