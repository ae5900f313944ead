/**
 * One TCP connection, either end: framing, the hello exchange under a timeout, and merged writes. The socket is a
 * `net.Socket` or, with mutual TLS on the peer port, a `tls.TLSSocket` (a subclass) past its handshake or in it: writes
 * before the TLS handshake completes are buffered by node:tls, and nothing is read before it.
 *
 * Life cycle: `handshaking` (our hello is sent at once; the peer's must arrive within the handshake timeout) →
 * `open` (frames are payloads) → `closed`. Anything wrong on the wire (oversized length, bad msgpack, bad hello, a
 * hello from the wrong peer or from a node with other cluster members, a write buffer the peer does not drain)
 * closes this connection only, with one diagnostic (none for a refusal its owner reported before); nothing is thrown into the process. `onClose` runs exactly once, whatever ended the connection.
 * Writes issued during one iteration of the event loop go out as one `socket.write` (measured 5–9× the throughput of
 * one write per message on this machine, ecosystem.md §1): the flush runs in the loop's check phase (`setImmediate`),
 * after every socket read and disk completion of the iteration was handled, so the frames that all of them produced
 * for this peer share one system call; a microtask would flush after each callback instead.
 */
import type { Socket } from 'node:net';
import { assert } from '../core/assert.js';
import type { ErrorCode } from '../core/errors.js';
import { isBasaltError } from '../core/errors.js';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import { decode } from './codec.js';
import type { DiagnosticListener, NetDiagnosticKind } from './diagnostics.js';
import { encodeFrame, FrameDecoder } from './frame.js';
import { type Hello, type PeerHello, parseHello } from './handshake.js';

export interface ConnectionLimits {
  readonly handshakeTimeoutMs: number;
  readonly frameBytesMax: number;
  readonly writeBufferBytesMax: number;
}

/** Why a peer's hello is refused; `silent` closes without a diagnostic (the same refusal was reported before). */
export interface Refusal {
  readonly kind: 'handshake-failed' | 'member-mismatch' | 'peer-cert-mismatch';
  readonly message: string;
  readonly silent?: boolean;
  /** The diagnostic's code; HANDSHAKE_FAILED when absent. */
  readonly code?: ErrorCode;
}

export interface ConnectionEvents {
  /** Decides whether the peer's (well-formed) hello is acceptable; a refusal closes the connection. */
  readonly accept: (hello: PeerHello) => Refusal | undefined;
  readonly onOpen: (connection: TcpConnection) => void;
  readonly onPayload: (connection: TcpConnection, payload: unknown) => void;
  readonly onClose: (connection: TcpConnection) => void;
}

type ConnectionState = 'handshaking' | 'open' | 'closed';

export class TcpConnection {
  private state: ConnectionState = 'handshaking';
  private remote: NodeIdentity | undefined;
  private remoteMembers: readonly NodeName[] | undefined;
  private remoteAddress: string | undefined;
  /** The name a well-formed hello claimed, accepted or not: a refusal's diagnostic names the peer by it. */
  private claimed: NodeName | undefined;
  private readonly decoder: FrameDecoder;
  private handshakeTimer: TimerHandle | undefined;
  private batch: Buffer[] = [];
  private flushScheduled = false;

  constructor(
    private readonly socket: Socket,
    /** Our hello, sent at once. */
    greeting: Hello,
    private readonly timers: Timers,
    private readonly limits: ConnectionLimits,
    private readonly events: ConnectionEvents,
    private readonly diagnose: DiagnosticListener,
    /** Who we believe is at the other end, for diagnostics before the hello arrives. */
    private readonly label: string,
    /** The transport's traffic counts, which this connection's writes add to. */
    private readonly traffic: { writes: number } = { writes: 0 },
  ) {
    this.decoder = new FrameDecoder(limits.frameBytesMax);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (error: Error) => this.fail('connection-error', error.message));
    socket.on('close', () => this.onSocketClose());
    this.handshakeTimer = timers.setTimer(
      () => this.fail('handshake-failed', `no hello within ${limits.handshakeTimeoutMs} ms`, 'HANDSHAKE_FAILED'),
      limits.handshakeTimeoutMs,
    );
    const [header, body] = encodeFrame(greeting, limits.frameBytesMax);
    socket.write(Buffer.concat([header, body]));
  }

  /** The peer's identity, once its hello was accepted. */
  get peer(): NodeIdentity | undefined {
    return this.remote;
  }

  /** The member names the peer's hello listed, if it listed any. */
  /** Where the peer says it is dialed (its hello's address), once open. */
  get peerAddress(): string | undefined {
    return this.remoteAddress;
  }

  get peerMembers(): readonly NodeName[] | undefined {
    return this.remoteMembers;
  }

  /** The remote host as the socket sees it. */
  get remoteHost(): string {
    return this.socket.remoteAddress ?? '?';
  }

  get isOpen(): boolean {
    return this.state === 'open';
  }

  /** Queues an encoded frame; all frames of this event-loop iteration are written together. */
  write(frame: readonly Buffer[]): void {
    if (this.state === 'closed') return;
    // Frames queue only behind a scheduled flush: none waits for a later write to be sent.
    assert(this.flushScheduled || this.batch.length === 0, 'queued frames always have a flush scheduled');
    for (const part of frame) this.batch.push(part);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    this.timers.setTimer(this.flushNow, 0);
  }

  private readonly flushNow = (): void => this.flush();

  /** Closes the connection with a diagnostic (unless silent), as when its hello is refused. */
  refuse(refusal: Refusal): void {
    if (refusal.silent === true) this.close();
    else this.fail(refusal.kind, refusal.message, refusal.code ?? 'HANDSHAKE_FAILED');
  }

  /** Closes the connection; frames not yet written are lost. */
  close(): void {
    if (this.state === 'closed') return;
    this.socket.destroy();
    this.onSocketClose();
  }

  private isClosed(): boolean {
    return this.state === 'closed';
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.state === 'closed' || this.batch.length === 0) return;
    const bytes = this.batch.length === 1 ? this.batch[0]! : Buffer.concat(this.batch);
    this.batch = [];
    this.socket.write(bytes);
    this.traffic.writes += 1;
    if (this.socket.writableLength > this.limits.writeBufferBytesMax) {
      this.fail('connection-error', `peer does not drain: ${this.socket.writableLength} bytes buffered`);
    }
  }

  private onData(chunk: Buffer): void {
    if (this.state === 'closed') return;
    const output = this.decoder.push(chunk);
    for (const frame of output.frames) {
      // A frame's handler may have closed the connection; the frames after it are not delivered.
      if (this.isClosed()) return;
      this.onFrame(frame);
    }
    if (!output.ok) {
      const message = `frame of ${output.frameBytes} bytes exceeds ${this.limits.frameBytesMax}`;
      this.fail('frame-too-large', message, 'FRAME_TOO_LARGE');
    }
  }

  private onFrame(frame: Buffer): void {
    assert(this.state !== 'closed', 'no frame is delivered after the connection closed');
    let payload: unknown;
    try {
      payload = decode(frame);
    } catch (error) {
      const message = isBasaltError(error) ? error.message : String(error);
      this.fail(this.state === 'handshaking' ? 'handshake-failed' : 'malformed-frame', message, 'MALFORMED_FRAME');
      return;
    }
    if (this.state === 'handshaking') this.onHello(payload);
    else this.events.onPayload(this, payload);
  }

  private onHello(payload: unknown): void {
    assert(this.state === 'handshaking', 'a hello is read only while handshaking');
    const parsed = parseHello(payload);
    if (!parsed.ok) {
      this.fail('handshake-failed', parsed.reason, 'HANDSHAKE_FAILED');
      return;
    }
    this.claimed = parsed.peer.name;
    const refusal = this.events.accept(parsed);
    if (refusal !== undefined) {
      this.refuse(refusal);
      return;
    }
    this.clearHandshakeTimer();
    this.remote = parsed.peer;
    this.remoteMembers = parsed.members;
    this.remoteAddress = parsed.address;
    this.state = 'open';
    this.events.onOpen(this);
  }

  private fail(kind: NetDiagnosticKind, message: string, code?: ErrorCode): void {
    if (this.state === 'closed') return;
    const peer = this.remote?.name ?? this.claimed ?? this.label;
    try {
      this.diagnose({ kind, message, peer, code });
    } catch {
      // A failing diagnostics sink must not keep a bad connection open.
    }
    this.close();
  }

  private onSocketClose(): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.clearHandshakeTimer();
    this.batch = [];
    this.events.onClose(this);
  }

  private clearHandshakeTimer(): void {
    if (this.handshakeTimer === undefined) return;
    this.timers.clearTimer(this.handshakeTimer);
    this.handshakeTimer = undefined;
  }
}
