/**
 * The messenger: one-way messages and request/response over any Transport, with the node's hybrid clock.
 *
 * Invariants:
 *   - every outgoing envelope is stamped with `clock.now()`; every received envelope is validated, then its timestamp
 *     is absorbed with `clock.update(ts)` before its handler runs or its response settles a request (DESIGN §2 HLC,
 *     safety rule 8);
 *   - each pending request settles exactly once: with the response body, with the remote error rethrown as a
 *     BasaltError carrying the remote code, with TIMEOUT, with CANCELLED (its AbortSignal), or with CONNECTION_CLOSED
 *     when the connection to its peer goes down (outcome unknown: the peer may have executed it);
 *   - at most `pendingRequestsMax` requests are pending; past it a request fails at once with OVERLOADED;
 *   - a request to a peer whose connection went down and has not come back up fails at once, unsent, with
 *     NODE_UNAVAILABLE (retryable; the caller may try another node) instead of waiting out its timeout; that and every
 *     other refusal before sending carry `executed: 'no'`, every failure after sending `'unknown'`;
 *   - rule 8: an envelope whose timestamp is more than maxClockSkew ahead of this node's physical clock is refused
 *     whole, never absorbed: a request is answered CLOCK_SKEW (`executed: 'no'`, with this node's physical time, so
 *     that the sender can measure its offset), a response fails its request with CLOCK_SKEW (`executed: 'unknown'`:
 *     the peer did act), a one-way message (Raft included: Raft tolerates loss) is dropped. Each refusal is counted
 *     (`onClockSkew`); a diagnostic is reported at most once per peer per `clockSkewReportIntervalMs`;
 *   - with `bodyChecks` (the node passes one check per kind it speaks, body-checks.ts), every body is checked before
 *     its timestamp is absorbed and before any handler sees it: a kind without a check is refused as UNKNOWN_MESSAGE,
 *     a body that fails its check as MALFORMED_MESSAGE; a timestamp the body carries for the receiver to absorb may
 *     lie at most maxClockSkew past the envelope's (body-checks.ts CheckContext). A refused request is answered with that code (`executed:
 *     'no'`), a refused response fails its request with it (`executed: 'unknown'`: the peer did act), a refused
 *     one-way message is dropped; each refusal, and each envelope refused as MALFORMED_FRAME, is counted
 *     (`onMalformed`). Handlers therefore trust the shape of what they are given;
 *   - one handler per message kind; a handler never crashes the node: a thrown BasaltError is answered as its error
 *     data, anything else as INTERNAL, an unknown kind as UNKNOWN_MESSAGE, a malformed request as MALFORMED_FRAME.
 * Messages to this node's own name are delivered locally on a microtask, through the same path as remote ones.
 * Only the injected timers and transport settle its promises, so it runs unchanged in the simulator.
 */
import { assert } from '../core/assert.js';
import { BasaltError, type ErrorData, toErrorData } from '../core/errors.js';
import type { HybridTimestamp, NodeId, NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { TimerHandle, Timers } from '../env/timers.js';
import type { PeerTraffic, Transport, TransportEvent } from '../env/transport.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import { addMs, physicalMs } from '../hlc/timestamp.js';
import type { BodyCheck } from './body-checks.js';
import { type DiagnosticListener, ignoreDiagnostics, type NetDiagnostic } from './diagnostics.js';
import {
  type Envelope,
  type MessageBody,
  parseEnvelope,
  type RequestEnvelope,
  type RequestId,
  type ResponseEnvelope,
  sameIdentity,
} from './envelope.js';

/** Answers one message kind. The result answers a request; for a one-way message it is ignored. */
export type MessageHandler<B extends MessageBody, K extends B['kind'] = B['kind']> = (
  body: Extract<B, { readonly kind: K }>,
  from: NodeIdentity,
) => B | undefined | Promise<B | undefined>;

export type PeerEvent = { readonly kind: 'up' | 'down'; readonly peer: NodeIdentity };
export type PeerListener = (event: PeerEvent) => void;

/** Sees every envelope just before it is handed to the transport (or delivered locally). */
export type SendObserver = (to: NodeName, envelope: Envelope) => void;

export interface RequestOptions {
  /** Fails the request with TIMEOUT after this long (default `requestTimeoutMsDefault`). */
  readonly timeoutMs?: number;
  /** Aborting fails the request with CANCELLED; the peer may still execute it. */
  readonly signal?: AbortSignal;
}

/** One envelope refused under rule 8. */
export interface ClockSkewRefusal {
  readonly peer: NodeName;
  readonly type: Envelope['type'];
  /** How far the envelope's timestamp was beyond this node's physical time + maxClockSkew. */
  readonly beyondMs: number;
}

/** One peer message refused at the receive edge, before any handler ran. */
export interface MalformedRefusal {
  readonly peer: NodeName;
  readonly code: 'MALFORMED_FRAME' | 'MALFORMED_MESSAGE' | 'UNKNOWN_MESSAGE';
  readonly reason: string;
}

export interface MessengerOptions {
  readonly transport: Transport;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly pendingRequestsMax?: number;
  readonly requestTimeoutMsDefault?: number;
  readonly onSend?: SendObserver;
  readonly onDiagnostic?: DiagnosticListener;
  /** Called for every envelope refused for its clock (rule 8); the node counts them. */
  readonly onClockSkew?: (refusal: ClockSkewRefusal) => void;
  readonly clockSkewReportIntervalMs?: number;
  /**
   * The check of every body kind this node speaks (absent: bodies are not checked, e.g. in tests of the messenger
   * alone). More kinds can be added with `addBodyCheck`.
   */
  readonly bodyChecks?: Readonly<Record<string, BodyCheck>>;
  /** Called for every peer message refused as malformed (its envelope or its body); the node counts them. */
  readonly onMalformed?: (refusal: MalformedRefusal) => void;
}

interface PendingRequest {
  readonly to: NodeName;
  readonly kind: string;
  readonly resolve: (body: MessageBody) => void;
  readonly reject: (error: BasaltError) => void;
  timer: TimerHandle | undefined;
  detachSignal: (() => void) | undefined;
}

type AnyHandler = (body: MessageBody, from: NodeIdentity) => MessageBody | undefined | Promise<MessageBody | undefined>;

export class Messenger<B extends MessageBody = MessageBody> {
  readonly self: NodeIdentity;
  private readonly transport: Transport;
  private readonly clock: HybridClock;
  private readonly timers: Timers;
  private readonly pendingRequestsMax: number;
  private readonly requestTimeoutMsDefault: number;
  private readonly onSend: SendObserver | undefined;
  private readonly diagnose: DiagnosticListener;
  private readonly onClockSkew: ((refusal: ClockSkewRefusal) => void) | undefined;
  private readonly clockSkewReportIntervalMs: number;
  /**
   * Peers whose clock refusal was reported within the interval, with the refusals since then. Bounded by the peers
   * this node has connections with (one entry per name, removed when its interval ends).
   */
  private readonly skewReported = new Map<NodeName, { suppressed: number }>();
  private readonly handlers = new Map<string, AnyHandler>();
  /** Undefined: bodies are not checked. */
  private readonly bodyChecks: Map<string, BodyCheck> | undefined;
  /** The context of the body being checked, reused for every message (set from its envelope before the check). */
  private readonly checkContext: { tsCeiling: bigint } = { tsCeiling: 0n };
  /** maxClockSkew in timestamp units: a body's absorbed timestamps lie at most this far past its envelope's. */
  private readonly skewUnits: bigint;
  private readonly onMalformed: ((refusal: MalformedRefusal) => void) | undefined;
  private readonly pending = new Map<RequestId, PendingRequest>();
  private readonly peerListeners = new Set<PeerListener>();
  /** Live ephemeral id of each peer whose connection is up. */
  private readonly live = new Map<NodeName, NodeId>();
  /** Peers whose connection went down and has not come back: requests to them fail at once, unsent. */
  private readonly lost = new Set<NodeName>();
  private nextRequestId: RequestId = 1;
  private closed = false;

  constructor(options: MessengerOptions) {
    this.transport = options.transport;
    this.self = options.transport.self;
    this.clock = options.clock;
    this.timers = options.timers;
    this.pendingRequestsMax = options.pendingRequestsMax ?? LIMITS.pendingRequestsMax;
    this.requestTimeoutMsDefault = options.requestTimeoutMsDefault ?? LIMITS.requestTimeoutMsDefault;
    this.onSend = options.onSend;
    this.diagnose = options.onDiagnostic ?? ignoreDiagnostics;
    this.onClockSkew = options.onClockSkew;
    this.clockSkewReportIntervalMs = options.clockSkewReportIntervalMs ?? LIMITS.clockSkewReportIntervalMs;
    this.bodyChecks = options.bodyChecks === undefined ? undefined : new Map(Object.entries(options.bodyChecks));
    this.onMalformed = options.onMalformed;
    this.skewUnits = addMs(0n as HybridTimestamp, this.clock.maxClockSkewMs);
    this.transport.setHandler((event) => this.onTransportEvent(event));
  }

  /** Sends a one-way message; it may be lost. */
  send(to: NodeName, body: B): void {
    if (this.closed) return;
    this.emit(to, { type: 'oneway', from: this.self, ts: this.clock.now(), body });
  }

  /**
   * Sends a request and resolves with the response body. The messenger checks only that the response is a body with
   * a kind; `R` is the caller's claim about which kind it is.
   */
  request<R extends B = B>(to: NodeName, body: B, options: RequestOptions = {}): Promise<R> {
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMsDefault;
    const refusal = this.refusal(to, body, timeoutMs, options.signal);
    if (refusal !== undefined) return Promise.reject(refusal);
    const requestId = this.nextRequestId++;
    return new Promise<R>((resolve, reject) => {
      const entry: PendingRequest = {
        to,
        kind: body.kind,
        resolve: resolve as (body: MessageBody) => void,
        reject,
        timer: undefined,
        detachSignal: undefined,
      };
      this.pending.set(requestId, entry);
      assert(this.pending.size <= this.pendingRequestsMax, 'at most pendingRequestsMax requests are pending');
      entry.timer = this.timers.setTimer(() => this.fail(requestId, this.timeoutError(entry, timeoutMs)), timeoutMs);
      entry.detachSignal = this.attachSignal(requestId, entry, options.signal);
      try {
        this.emit(to, { type: 'request', from: this.self, ts: this.clock.now(), requestId, body });
      } catch (error) {
        this.fail(requestId, asBasaltError(error));
      }
    });
  }

  /**
   * This messenger as one layer sees it: only that layer's message kinds, to send and to register. Bodies are checked
   * by kind on receipt (`bodyChecks`), whatever the view, so the view changes what the compiler lets a layer do, not
   * what the messenger does: it is the one place where a body type is narrowed.
   */
  as<C extends MessageBody>(): Messenger<C> {
    return this as unknown as Messenger<C>;
  }

  /** Registers the handler of one message kind; returns a function that unregisters it. */
  handle<K extends B['kind']>(kind: K, handler: MessageHandler<B, K>): () => void {
    if (this.handlers.has(kind)) throw new BasaltError('ALREADY_EXISTS', `a handler for ${kind} is registered`);
    this.handlers.set(kind, handler as unknown as AnyHandler);
    return () => {
      if (this.handlers.get(kind) === (handler as unknown)) this.handlers.delete(kind);
    };
  }

  /**
   * Adds the check of a body kind beyond those given at construction (a node service's own kinds); without it, a
   * messenger that checks bodies refuses that kind as UNKNOWN_MESSAGE.
   */
  addBodyCheck(kind: B['kind'], check: BodyCheck): void {
    if (this.bodyChecks === undefined) return;
    if (this.bodyChecks.has(kind)) throw new BasaltError('ALREADY_EXISTS', `a body check for ${kind} is registered`);
    this.bodyChecks.set(kind, check);
  }

  /** Subscribes to peer up/down events (membership); returns the unsubscribe function. */
  onPeer(listener: PeerListener): () => void {
    this.peerListeners.add(listener);
    return () => this.peerListeners.delete(listener);
  }

  /** The ephemeral id of `name` while its connection is up. */
  peerId(name: NodeName): NodeId | undefined {
    return this.live.get(name);
  }

  /** What the transport sent to peers so far, where it counts it. */
  traffic(): PeerTraffic | undefined {
    return this.transport.traffic?.();
  }

  get pendingCount(): number {
    return this.pending.size;
  }

  /** Fails every pending request with CONNECTION_CLOSED, stops handling, closes the transport. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [requestId, entry] of [...this.pending]) {
      this.fail(requestId, new BasaltError('CONNECTION_CLOSED', `messenger closed with ${entry.kind} pending`));
    }
    await this.transport.close();
  }

  /** Why a request cannot be sent at all; each such refusal proves it was not executed. */
  private refusal(to: NodeName, body: B, timeoutMs: number, signal?: AbortSignal): BasaltError | undefined {
    const unsent = UNSENT;
    if (this.closed) return new BasaltError('CONNECTION_CLOSED', 'messenger is closed', undefined, unsent);
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      return new BasaltError('INVALID_ARGUMENT', 'timeoutMs > 0', undefined, unsent);
    }
    if (signal?.aborted) {
      return new BasaltError('CANCELLED', `${body.kind} to ${to} cancelled before sending`, undefined, unsent);
    }
    if (this.lost.has(to)) {
      return new BasaltError('NODE_UNAVAILABLE', `no connection to ${to}: ${body.kind} was not sent`, { to }, unsent);
    }
    if (this.pending.size >= this.pendingRequestsMax) {
      const details = { pendingRequestsMax: this.pendingRequestsMax };
      return new BasaltError('OVERLOADED', `${this.pending.size} requests pending`, details, unsent);
    }
    return undefined;
  }

  private attachSignal(requestId: RequestId, entry: PendingRequest, signal?: AbortSignal): (() => void) | undefined {
    if (signal === undefined) return undefined;
    const onAbort = (): void =>
      this.fail(
        requestId,
        new BasaltError('CANCELLED', `${entry.kind} to ${entry.to} cancelled`, undefined, { cause: signal.reason }),
      );
    signal.addEventListener('abort', onAbort, { once: true });
    return () => signal.removeEventListener('abort', onAbort);
  }

  private timeoutError(entry: PendingRequest, timeoutMs: number): BasaltError {
    return new BasaltError('TIMEOUT', `${entry.kind} to ${entry.to} timed out after ${timeoutMs} ms`, {
      to: entry.to,
      kind: entry.kind,
      timeoutMs,
    });
  }

  /** Removes a pending request and releases its timer and signal listener; returns it, or undefined if settled. */
  private take(requestId: RequestId): PendingRequest | undefined {
    const entry = this.pending.get(requestId);
    if (entry === undefined) return undefined;
    this.pending.delete(requestId);
    if (entry.timer !== undefined) this.timers.clearTimer(entry.timer);
    entry.detachSignal?.();
    return entry;
  }

  private fail(requestId: RequestId, error: BasaltError): void {
    this.take(requestId)?.reject(error);
  }

  private emit(to: NodeName, envelope: Envelope): void {
    this.onSend?.(to, envelope);
    if (to === this.self.name) {
      queueMicrotask(() => this.receive(this.self, envelope));
    } else {
      this.transport.send(to, envelope);
    }
  }

  private onTransportEvent(event: TransportEvent): void {
    switch (event.kind) {
      case 'message':
        this.receive(event.from, event.payload);
        return;
      case 'up':
        this.live.set(event.peer.name, event.peer.id);
        this.lost.delete(event.peer.name);
        this.publish(event);
        return;
      case 'down':
        if (this.live.get(event.peer.name) === event.peer.id) {
          this.live.delete(event.peer.name);
          this.lost.add(event.peer.name);
        }
        this.failRequestsTo(event.peer);
        this.publish(event);
        return;
    }
  }

  private failRequestsTo(peer: NodeIdentity): void {
    for (const [requestId, entry] of [...this.pending]) {
      if (entry.to !== peer.name) continue;
      const message = `connection to ${peer.name} closed while ${entry.kind} was pending; outcome unknown`;
      this.fail(requestId, new BasaltError('CONNECTION_CLOSED', message, { to: peer.name, peerId: peer.id }));
    }
  }

  private publish(event: PeerEvent): void {
    for (const listener of [...this.peerListeners]) {
      try {
        listener({ kind: event.kind, peer: event.peer });
      } catch (error) {
        this.report({
          kind: 'handler-failed',
          message: `peer listener threw: ${String(error)}`,
          peer: event.peer.name,
        });
      }
    }
  }

  private receive(from: NodeIdentity, payload: unknown): void {
    if (this.closed) return;
    const parsed = parseEnvelope(payload);
    if (!parsed.ok) {
      this.rejectMalformed(from, payload, parsed.reason);
      return;
    }
    const envelope = parsed.envelope;
    if (!sameIdentity(envelope.from, from)) {
      const message = `envelope from ${envelope.from.name}/${envelope.from.id} on the connection of ${from.name}/${from.id}`;
      this.report({ kind: 'sender-mismatch', message, peer: from.name });
      return;
    }
    // This node's own envelopes carry its own clock: nothing to guard against.
    const beyondMs = from.name === this.self.name ? 0 : this.clock.beyondSkewMs(envelope.ts);
    if (beyondMs > 0) {
      this.refuseForClock(envelope, from, beyondMs);
      return;
    }
    // Before its timestamp is absorbed: a message refused whole is not processed (rule 8), and moves no clock.
    if (envelope.body !== undefined && this.bodyChecks !== undefined) {
      const refusal = this.bodyRefusal(envelope.body, envelope.ts);
      if (refusal !== undefined) {
        this.refuseBody(envelope, from, refusal.code, refusal.reason);
        return;
      }
    }
    this.clock.update(envelope.ts);
    switch (envelope.type) {
      case 'oneway':
        this.dispatchOneWay(envelope.body, from);
        return;
      case 'request':
        this.dispatchRequest(envelope, from);
        return;
      case 'response':
        this.settle(envelope, from);
        return;
    }
  }

  /** Rule 8: refuses an envelope whose timestamp is beyond the skew bound, without absorbing it. */
  private refuseForClock(envelope: Envelope, from: NodeIdentity, beyondMs: number): void {
    const details = {
      peer: from.name,
      beyondMs,
      maxClockSkewMs: this.clock.maxClockSkewMs,
      // The two physical clocks, so that either side can still measure the offset (rule 19) from a refusal.
      senderPhysicalMs: physicalMs(envelope.ts),
      receiverPhysicalMs: physicalMs(this.clock.physicalNow()),
    };
    const message = `${from.name}'s timestamp is ${beyondMs} ms beyond ${this.self.name}'s clock + the skew bound`;
    this.noteClockSkew(from.name, envelope.type, beyondMs, message);
    switch (envelope.type) {
      case 'oneway':
        return;
      case 'request':
        this.respond(from, envelope.requestId, {
          error: { code: 'CLOCK_SKEW', message: `${envelope.body.kind} refused: ${message}`, details, executed: 'no' },
        });
        return;
      case 'response': {
        const entry = this.pending.get(envelope.requestId);
        if (entry === undefined || entry.to !== from.name) return;
        // The peer acted on the request; only its answer is refused, so the outcome is unknown.
        this.fail(
          envelope.requestId,
          new BasaltError('CLOCK_SKEW', `${entry.kind} answer refused: ${message}`, details),
        );
        return;
      }
    }
  }

  private noteClockSkew(peer: NodeName, type: Envelope['type'], beyondMs: number, message: string): void {
    try {
      this.onClockSkew?.({ peer, type, beyondMs });
    } catch {
      // A failing counter must not take message handling down with it.
    }
    const reported = this.skewReported.get(peer);
    if (reported !== undefined) {
      reported.suppressed++;
      return;
    }
    this.skewReported.set(peer, { suppressed: 0 });
    this.report({ kind: 'clock-skew', message, peer, code: 'CLOCK_SKEW' });
    this.timers.setTimer(() => {
      const suppressed = this.skewReported.get(peer)?.suppressed ?? 0;
      this.skewReported.delete(peer);
      if (suppressed > 0 && !this.closed) {
        const more = `${suppressed} more messages from ${peer} refused for its clock in ${this.clockSkewReportIntervalMs} ms`;
        this.report({ kind: 'clock-skew', message: more, peer, code: 'CLOCK_SKEW' });
      }
    }, this.clockSkewReportIntervalMs);
  }

  /** Why `body` is refused, or undefined when it is a well-formed message of a kind this node speaks. */
  private bodyRefusal(
    body: MessageBody,
    ts: HybridTimestamp,
  ): { code: 'UNKNOWN_MESSAGE' | 'MALFORMED_MESSAGE'; reason: string } | undefined {
    const check = this.bodyChecks?.get(body.kind);
    if (check === undefined) {
      return { code: 'UNKNOWN_MESSAGE', reason: `unknown message kind ${JSON.stringify(body.kind.slice(0, 64))}` };
    }
    this.checkContext.tsCeiling = ts + this.skewUnits;
    const problem = check(body as unknown as Readonly<Record<string, unknown>>, this.checkContext);
    return problem === undefined ? undefined : { code: 'MALFORMED_MESSAGE', reason: `${body.kind}: ${problem}` };
  }

  /** Refuses a message whose body failed its check (see the module header): answered, failed or dropped; counted. */
  private refuseBody(
    envelope: Envelope,
    from: NodeIdentity,
    code: 'UNKNOWN_MESSAGE' | 'MALFORMED_MESSAGE',
    reason: string,
  ): void {
    this.noteMalformed(from.name, code, reason);
    switch (envelope.type) {
      case 'oneway':
        return;
      case 'request':
        this.respond(from, envelope.requestId, { error: { code, message: reason, executed: 'no' } });
        return;
      case 'response': {
        const entry = this.pending.get(envelope.requestId);
        if (entry === undefined || entry.to !== from.name) return;
        this.fail(envelope.requestId, new BasaltError(code, `${entry.kind} answer refused: ${reason}`));
        return;
      }
    }
  }

  private noteMalformed(peer: NodeName, code: MalformedRefusal['code'], reason: string): void {
    try {
      this.onMalformed?.({ peer, code, reason });
    } catch {
      // A failing counter must not take message handling down with it.
    }
    this.report({
      kind: code === 'MALFORMED_FRAME' ? 'malformed-frame' : 'malformed-message',
      message: reason,
      peer,
      code,
    });
  }

  /** A request whose envelope header is readable gets a MALFORMED_FRAME answer; anything else is only reported. */
  private rejectMalformed(from: NodeIdentity, payload: unknown, reason: string): void {
    this.noteMalformed(from.name, 'MALFORMED_FRAME', reason);
    if (typeof payload !== 'object' || payload === null) return;
    const { type, requestId } = payload as { type?: unknown; requestId?: unknown };
    if (type !== 'request' || typeof requestId !== 'number' || !Number.isSafeInteger(requestId) || requestId < 1)
      return;
    this.respond(from, requestId, { error: { code: 'MALFORMED_FRAME', message: reason } });
  }

  private dispatchOneWay(body: MessageBody, from: NodeIdentity): void {
    const handler = this.handlers.get(body.kind);
    if (handler === undefined) {
      this.report({ kind: 'unknown-message', message: `no handler for ${body.kind}`, peer: from.name });
      return;
    }
    try {
      const result = handler(body, from);
      if (isPromiseLike(result)) result.then(undefined, (error: unknown) => this.reportHandlerError(body, from, error));
    } catch (error) {
      this.reportHandlerError(body, from, error);
    }
  }

  private dispatchRequest(envelope: RequestEnvelope, from: NodeIdentity): void {
    const { body, requestId } = envelope;
    const handler = this.handlers.get(body.kind);
    if (handler === undefined) {
      const error: ErrorData = {
        code: 'UNKNOWN_MESSAGE',
        message: `${this.self.name} has no handler for ${body.kind}`,
      };
      this.respond(from, requestId, { error });
      return;
    }
    let result: ReturnType<AnyHandler>;
    try {
      result = handler(body, from);
    } catch (error) {
      this.respond(from, requestId, { error: this.handlerErrorData(body, from, error) });
      return;
    }
    if (isPromiseLike(result)) {
      result.then(
        (answer) => this.answer(from, requestId, body.kind, answer),
        (error: unknown) => this.respond(from, requestId, { error: this.handlerErrorData(body, from, error) }),
      );
    } else {
      this.answer(from, requestId, body.kind, result);
    }
  }

  private answer(to: NodeIdentity, requestId: RequestId, kind: string, answer: MessageBody | undefined): void {
    if (answer === undefined || typeof answer.kind !== 'string') {
      this.respond(to, requestId, {
        error: { code: 'INTERNAL', message: `the handler of ${kind} gave no response body` },
      });
      return;
    }
    this.respond(to, requestId, { body: answer });
  }

  /**
   * Answers the incarnation that asked: the response names it (`to`), and is not sent at all once the peer's name
   * belongs to a newer incarnation. A restarted requester numbers its requests from 1 again, so an answer meant for
   * its predecessor must never settle one of its own requests.
   */
  private respond(to: NodeIdentity, requestId: RequestId, result: { body: MessageBody } | { error: ErrorData }): void {
    if (this.closed) return;
    const live = this.live.get(to.name);
    if (live !== undefined && live !== to.id) return;
    const header = { type: 'response', from: this.self, to: to.id, ts: this.clock.now(), requestId } as const;
    const envelope: ResponseEnvelope =
      'body' in result ? { ...header, body: result.body } : { ...header, error: result.error };
    try {
      this.emit(to.name, envelope);
    } catch (error) {
      // The answer could not be encoded (not plain data, too large): answer that instead, then without details.
      if ('body' in result) {
        this.respond(to, requestId, { error: toErrorData(error) });
      } else if (result.error.details !== undefined) {
        this.respond(to, requestId, { error: { code: result.error.code, message: result.error.message } });
      } else {
        this.report({ kind: 'handler-failed', message: `cannot answer ${requestId}: ${String(error)}`, peer: to.name });
      }
    }
  }

  private settle(envelope: ResponseEnvelope, from: NodeIdentity): void {
    const entry = this.pending.get(envelope.requestId);
    if (entry === undefined || entry.to !== from.name || (envelope.to !== undefined && envelope.to !== this.self.id)) {
      const message = `response ${envelope.requestId} from ${from.name} matches no pending request`;
      this.report({ kind: 'unexpected-response', message, peer: from.name });
      return;
    }
    this.take(envelope.requestId);
    if (envelope.error !== undefined) entry.reject(BasaltError.fromData(envelope.error));
    else entry.resolve(envelope.body);
  }

  private handlerErrorData(body: MessageBody, from: NodeIdentity, error: unknown): ErrorData {
    if (!(error instanceof BasaltError)) this.reportHandlerError(body, from, error);
    return toErrorData(error);
  }

  private reportHandlerError(body: MessageBody, from: NodeIdentity, error: unknown): void {
    const code = error instanceof BasaltError ? error.code : 'INTERNAL';
    this.report({
      kind: 'handler-failed',
      message: `handler of ${body.kind} threw: ${String(error)}`,
      peer: from.name,
      code,
    });
  }

  private report(diagnostic: NetDiagnostic): void {
    try {
      this.diagnose(diagnostic);
    } catch {
      // A failing diagnostics sink must not take message handling down with it.
    }
  }
}

/** The options of every refusal before sending (one object: nothing is built for a request that is sent). */
const UNSENT = { executed: 'no' } as const;

function isPromiseLike<T>(value: T | Promise<T>): value is Promise<T> {
  return typeof (value as { then?: unknown } | undefined)?.then === 'function';
}

function asBasaltError(error: unknown): BasaltError {
  return error instanceof BasaltError ? error : new BasaltError('INTERNAL', String(error), undefined, { cause: error });
}
