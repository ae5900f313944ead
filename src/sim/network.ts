/**
 * The simulated network. Every node gets an endpoint implementing the env `Transport`; messages travel as scheduler
 * events with delays drawn from the world's seeded random. Model:
 *   - a *connection* joins two open endpoints whose link is not cut in either direction; it has an epoch that changes
 *     whenever it goes up or down. A message carries the epoch it was sent in and is dropped on arrival if the epoch
 *     changed: a cut, a crash or a restart loses everything in flight, as a broken TCP connection does;
 *   - `up`/`down` are reported to each end after a connect/detection delay, on the same per-direction lane as the
 *     messages, so an endpoint never sees a message of a connection before its `up`, nor `up` before the earlier `down`;
 *   - by default each directed link is FIFO (a later message never overtakes an earlier one) and loses nothing while
 *     connected. Per-link faults (drop rate, duplicate rate, reorder) deliberately break the Transport promise of
 *     in-order, at-most-once delivery, for protocols that must survive it;
 *   - filters act at send time: `drop` rules lose matching messages, `hold` rules keep them until released (then they
 *     are transmitted in their original order, if their connection still exists); every send is logged for `count`.
 * Payloads are copied at send (structured clone by default, or through an injected codec) so that nodes never share
 * mutable objects and non-serialisable payloads fail at the sender.
 */
import { assert } from '../core/assert.js';
import { BasaltError, invalidArgument } from '../core/errors.js';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import type { PeerTraffic, Transport, TransportEvent, TransportHandler } from '../env/transport.js';
import type { SeededRandom } from './random.js';
import type { Scheduler } from './scheduler.js';

export type DelayModel =
  | { readonly kind: 'fixed'; readonly ms: number }
  | { readonly kind: 'uniform'; readonly minMs: number; readonly maxMs: number }
  /** `minMs` plus an exponential tail so that the mean delay is `meanMs`, capped at `maxMs` if given. */
  | { readonly kind: 'exponential'; readonly minMs: number; readonly meanMs: number; readonly maxMs?: number };

export interface LinkConfig {
  readonly delay: DelayModel;
  /** Probability that a message is lost. */
  readonly dropRate: number;
  /** Probability that a delivered message is delivered a second time. */
  readonly duplicateRate: number;
  /** Whether messages on this link may overtake each other. */
  readonly reorder: boolean;
}

export const DEFAULT_LINK: LinkConfig = {
  delay: { kind: 'uniform', minMs: 1, maxMs: 3 },
  dropRate: 0,
  duplicateRate: 0,
  reorder: false,
};

/** Selects messages. Missing fields match anything. */
export interface MessageFilter {
  readonly from?: string;
  readonly to?: string;
  readonly match?: (payload: unknown) => boolean;
}

/** Turns a payload into bytes and back; every sent payload makes the round trip when a codec is configured. */
export interface PayloadCodec {
  encode(payload: unknown): Uint8Array;
  decode(bytes: Uint8Array): unknown;
}

export interface SimNetworkOptions {
  /** Overrides of DEFAULT_LINK for every link. */
  readonly link?: Partial<LinkConfig>;
  /** How payloads are copied at send when no codec is given: structured clone (default) or not at all. */
  readonly copy?: 'clone' | 'none';
  readonly codec?: PayloadCodec;
  /** Delay before an `up` is reported to an end of a new connection. */
  readonly connectMs?: number;
  /** Delay before a `down` is reported to an end of a broken connection. */
  readonly detectDownMs?: number;
  /** Sends remembered for `count`; past this `count` refuses to answer rather than under-count. */
  readonly sentLogMax?: number;
  /**
   * The messages a payload carries as filters and `count` see them (default: the payload itself). A payload of
   * several goes whole unless a hold or drop rule catches one of them; then each goes on its own.
   */
  readonly split?: (payload: unknown) => readonly unknown[];
}

export type DropReason = 'disconnected' | 'unknown-peer' | 'filter' | 'random' | 'connection-lost' | 'no-handler';

export type NetObservation =
  | { readonly kind: 'send' | 'deliver' | 'hold' | 'duplicate'; readonly message: SimMessage }
  | { readonly kind: 'drop'; readonly message: SimMessage; readonly reason: DropReason };

export interface SimMessage {
  /** Send order over the whole network, from 1. Copies made by duplication keep the original's number. */
  readonly seq: number;
  readonly from: NodeIdentity;
  readonly to: NodeName;
  readonly payload: unknown;
}

export interface HoldHandle {
  /** Messages held and not yet released. */
  readonly heldCount: number;
  /** Transmits every held message in send order and stops holding. Returns how many were released. */
  release(): number;
  /** Transmits the first `count` held messages in send order and keeps holding. Returns how many were released. */
  releaseNext(count?: number): number;
}

export interface DropHandle {
  /** Messages this rule has dropped so far. */
  readonly droppedCount: number;
  undo(): void;
}

export interface NetworkStats {
  readonly sent: number;
  readonly delivered: number;
  readonly dropped: number;
  readonly duplicated: number;
  readonly held: number;
}

const SENT_LOG_MAX_DEFAULT = 200_000;
/** Messages one hold rule keeps; a test that holds more has forgotten to release. */
const HELD_MESSAGES_MAX = 1_000_000;
const CONNECT_MS_DEFAULT = 1;
const DETECT_DOWN_MS_DEFAULT = 5;

interface InFlight extends SimMessage {
  /** Epoch of the connection the message was sent on; -1 for loopback. */
  readonly epoch: number;
}

interface Pair {
  connected: boolean;
  epoch: number;
}

/** One direction between two names: delivery times for FIFO ordering and the time the current connection came up. */
interface Lane {
  readonly label: string;
  lastAtMs: number;
  upAtMs: number;
}

interface HoldRule {
  readonly filter: MessageFilter;
  readonly held: InFlight[];
  active: boolean;
}

interface DropRule {
  readonly filter: MessageFilter;
  dropped: number;
  active: boolean;
}

export function matchesFilter(filter: MessageFilter, from: string, to: string, payload: unknown): boolean {
  return (
    (filter.from === undefined || filter.from === from) &&
    (filter.to === undefined || filter.to === to) &&
    (filter.match === undefined || filter.match(payload))
  );
}

class SimEndpoint implements Transport {
  open = true;
  handler: TransportHandler | undefined;

  constructor(
    private readonly network: SimNetwork,
    readonly self: NodeIdentity,
  ) {}

  /** Payloads this endpoint sent (a simulated link has no socket writes to count). */
  private sent = 0;

  send(to: NodeName, payload: unknown): void {
    if (to !== this.self.name) this.sent += 1;
    this.network.sendFrom(this, to, payload);
  }

  traffic(): PeerTraffic {
    return { messagesSent: this.sent, writes: 0 };
  }

  setHandler(handler: TransportHandler): void {
    this.handler = handler;
  }

  close(): Promise<void> {
    this.network.closeEndpoint(this);
    return Promise.resolve();
  }
}

export class SimNetwork {
  private readonly endpoints = new Map<string, SimEndpoint>();
  private readonly pairs = new Map<string, Pair>();
  private readonly lanes = new Map<string, Lane>();
  private readonly cuts = new Set<string>();
  private readonly isolated = new Set<string>();
  private defaultLink: LinkConfig;
  private readonly linkOverrides = new Map<string, LinkConfig>();
  private readonly holdRules: HoldRule[] = [];
  private readonly dropRules: DropRule[] = [];
  private readonly observers: Array<(observation: NetObservation) => void> = [];
  private readonly sentLog: Array<{ readonly from: string; readonly to: string; readonly payload: unknown }> = [];
  private sentLogOverflow = false;
  private readonly sentLogMax: number;
  private readonly connectMs: number;
  private readonly detectDownMs: number;
  private readonly copy: (payload: unknown) => unknown;
  private readonly split: ((payload: unknown) => readonly unknown[]) | undefined;
  private seq = 0;
  private readonly counters = { sent: 0, delivered: 0, dropped: 0, duplicated: 0, held: 0 };

  constructor(
    private readonly scheduler: Scheduler,
    private readonly random: SeededRandom,
    options: SimNetworkOptions = {},
  ) {
    this.defaultLink = validLink({ ...DEFAULT_LINK, ...options.link });
    this.connectMs = options.connectMs ?? CONNECT_MS_DEFAULT;
    this.detectDownMs = options.detectDownMs ?? DETECT_DOWN_MS_DEFAULT;
    this.sentLogMax = options.sentLogMax ?? SENT_LOG_MAX_DEFAULT;
    this.copy = copierOf(options);
    this.split = options.split;
  }

  /** Opens the endpoint of `identity`; the name must not have another open endpoint. Peers connect to it. */
  endpoint(identity: NodeIdentity): Transport {
    const existing = this.endpoints.get(identity.name);
    if (existing?.open) throw invalidArgument(`node ${identity.name} already has an open endpoint`);
    const endpoint = new SimEndpoint(this, identity);
    this.endpoints.set(identity.name, endpoint);
    this.refresh();
    return endpoint;
  }

  /** Names that ever had an endpoint, in registration order. */
  names(): NodeName[] {
    return [...this.endpoints.keys()] as NodeName[];
  }

  isConnected(a: string, b: string): boolean {
    return this.pairs.get(pairKey(a, b))?.connected ?? false;
  }

  get stats(): NetworkStats {
    return { ...this.counters };
  }

  // --- link configuration -------------------------------------------------------------------------------------------

  /** Changes the configuration of every link without an override. */
  setDefaultLink(config: Partial<LinkConfig>): void {
    this.defaultLink = validLink({ ...this.defaultLink, ...config });
  }

  /** Overrides the configuration of the directed link `from → to` (pass undefined to go back to the default). */
  setLink(from: string, to: string, config: Partial<LinkConfig> | undefined): void {
    const key = laneKey(from, to);
    if (config === undefined) this.linkOverrides.delete(key);
    else this.linkOverrides.set(key, validLink({ ...this.link(from, to), ...config }));
  }

  /** The override of `from → to`, if any. */
  linkOverride(from: string, to: string): LinkConfig | undefined {
    return this.linkOverrides.get(laneKey(from, to));
  }

  link(from: string, to: string): LinkConfig {
    return this.linkOverrides.get(laneKey(from, to)) ?? this.defaultLink;
  }

  // --- partitions ---------------------------------------------------------------------------------------------------

  /** Cuts every link between the two sides, both ways. `sideB` defaults to every other known name. */
  partition(sideA: readonly string[], sideB?: readonly string[]): void {
    const other = sideB ?? this.names().filter((n) => !sideA.includes(n));
    for (const a of sideA) {
      for (const b of other) {
        if (a === b) continue;
        this.cuts.add(laneKey(a, b));
        this.cuts.add(laneKey(b, a));
      }
    }
    this.refresh();
  }

  /** Cuts `name` from every other node, including nodes added later, until healed. */
  isolate(name: string): void {
    this.isolated.add(name);
    this.refresh();
  }

  /** Cuts the one direction `from → to`; the connection between them goes down at both ends. */
  cut(from: string, to: string): void {
    this.cuts.add(laneKey(from, to));
    this.refresh();
  }

  /** Removes every cut and isolation. */
  heal(): void {
    this.cuts.clear();
    this.isolated.clear();
    this.refresh();
  }

  /** Removes the cuts between `a` and `b`, both ways (isolations stay). */
  healLink(a: string, b: string): void {
    this.cuts.delete(laneKey(a, b));
    this.cuts.delete(laneKey(b, a));
    this.refresh();
  }

  // --- filters ------------------------------------------------------------------------------------------------------

  hold(filter: MessageFilter): HoldHandle {
    const rule: HoldRule = { filter, held: [], active: true };
    this.holdRules.push(rule);
    const releaseNext = (count: number): number => {
      const batch = rule.held.splice(0, Math.max(0, count));
      for (const message of batch) this.transmit(message, true);
      return batch.length;
    };
    return {
      get heldCount() {
        return rule.held.length;
      },
      release: () => {
        rule.active = false;
        removeItem(this.holdRules, rule);
        return releaseNext(rule.held.length);
      },
      releaseNext: (count = 1) => releaseNext(count),
    };
  }

  drop(filter: MessageFilter): DropHandle {
    const rule: DropRule = { filter, dropped: 0, active: true };
    this.dropRules.push(rule);
    return {
      get droppedCount() {
        return rule.dropped;
      },
      undo: () => {
        rule.active = false;
        removeItem(this.dropRules, rule);
      },
    };
  }

  /** Messages sent so far (by open endpoints, whatever became of them) that match `filter`. */
  count(filter: MessageFilter = {}): number {
    if (this.sentLogOverflow) {
      throw new BasaltError('INVALID_ARGUMENT', `network count needs the send log, which overflowed`, {
        sentLogMax: this.sentLogMax,
      });
    }
    let n = 0;
    for (const sent of this.sentLog) if (matchesFilter(filter, sent.from, sent.to, sent.payload)) n++;
    return n;
  }

  /** Calls `observer` for every send, hold, drop, duplicate and delivery. Returns a function that unsubscribes. */
  observe(observer: (observation: NetObservation) => void): () => void {
    this.observers.push(observer);
    return () => removeItem(this.observers, observer);
  }

  // --- the data path (called by endpoints) --------------------------------------------------------------------------

  /** @internal */
  sendFrom(endpoint: SimEndpoint, to: NodeName, payload: unknown): void {
    if (!endpoint.open) return;
    const parts = this.split?.(payload);
    if (parts !== undefined && parts.length > 1) {
      const name = endpoint.self.name;
      if (parts.some((part) => this.caught(name, to, part))) {
        for (const part of parts) this.sendFrom(endpoint, to, part);
        return;
      }
      for (const part of parts) this.logSent(name, to, part);
      this.sendOne(endpoint, to, payload, false);
      return;
    }
    this.sendOne(endpoint, to, payload, true);
  }

  private caught(from: string, to: string, payload: unknown): boolean {
    const caught = (rule: { readonly filter: MessageFilter }): boolean => matchesFilter(rule.filter, from, to, payload);
    return this.dropRules.some(caught) || this.holdRules.some(caught);
  }

  private sendOne(endpoint: SimEndpoint, to: NodeName, payload: unknown, log: boolean): void {
    const from = endpoint.self;
    const pair = to === from.name ? undefined : this.pairs.get(pairKey(from.name, to));
    const message: InFlight = {
      seq: ++this.seq,
      from,
      to,
      payload: this.copy(payload),
      epoch: pair === undefined ? -1 : pair.epoch,
    };
    this.counters.sent++;
    if (log) this.logSent(from.name, to, message.payload);
    this.emit({ kind: 'send', message });
    if (to !== from.name) {
      if (!this.endpoints.has(to)) {
        this.dropped(message, 'unknown-peer');
        return;
      }
      if (!pair?.connected) {
        this.dropped(message, 'disconnected');
        return;
      }
    }
    for (const rule of this.dropRules) {
      if (matchesFilter(rule.filter, from.name, to, message.payload)) {
        rule.dropped++;
        this.dropped(message, 'filter');
        return;
      }
    }
    for (const rule of this.holdRules) {
      if (matchesFilter(rule.filter, from.name, to, message.payload)) {
        assert(rule.held.length < HELD_MESSAGES_MAX, 'a hold rule kept too many messages: release it');
        rule.held.push(message);
        this.counters.held++;
        this.emit({ kind: 'hold', message });
        return;
      }
    }
    this.transmit(message, false);
  }

  /** @internal */
  closeEndpoint(endpoint: SimEndpoint): void {
    if (!endpoint.open) return;
    endpoint.open = false;
    endpoint.handler = undefined;
    this.refresh();
  }

  private transmit(message: InFlight, released: boolean): void {
    const from = message.from.name;
    if (from === message.to) {
      this.schedule(message, this.lane(from, from), 0, false);
      return;
    }
    const pair = this.pairs.get(pairKey(from, message.to));
    if (pair === undefined || !pair.connected || pair.epoch !== message.epoch) {
      this.dropped(message, 'connection-lost');
      return;
    }
    const config = this.link(from, message.to);
    // A released message was already judged by the filters; random loss still applies, as on any link.
    if (this.random.chance(config.dropRate)) {
      this.dropped(message, 'random');
      return;
    }
    const lane = this.lane(from, message.to);
    this.schedule(message, lane, this.sampleDelay(config.delay), config.reorder);
    if (!released && this.random.chance(config.duplicateRate)) {
      this.counters.duplicated++;
      const copy: InFlight = { ...message, payload: this.copy(message.payload) };
      this.emit({ kind: 'duplicate', message: copy });
      this.schedule(copy, lane, this.sampleDelay(config.delay), config.reorder);
    }
  }

  private schedule(message: InFlight, lane: Lane, delayMs: number, reorder: boolean): void {
    let atMs = this.scheduler.nowMs() + delayMs;
    if (reorder) atMs = Math.max(atMs, lane.upAtMs);
    else {
      atMs = Math.max(atMs, lane.lastAtMs);
      lane.lastAtMs = atMs;
    }
    this.scheduler.scheduleAt(atMs, () => this.deliver(message), lane.label);
  }

  private deliver(message: InFlight): void {
    const endpoint = this.endpoints.get(message.to);
    if (message.epoch === -1) {
      // Loopback: still the same, open endpoint.
      if (endpoint?.self !== message.from || !endpoint.open) {
        this.dropped(message, 'connection-lost');
        return;
      }
    } else {
      const pair = this.pairs.get(pairKey(message.from.name, message.to));
      if (pair === undefined || !pair.connected || pair.epoch !== message.epoch) {
        this.dropped(message, 'connection-lost');
        return;
      }
    }
    assert(endpoint?.open === true, 'a connected pair has open endpoints');
    const handler = endpoint.handler;
    if (handler === undefined) {
      this.dropped(message, 'no-handler');
      return;
    }
    this.counters.delivered++;
    this.emit({ kind: 'deliver', message });
    handler({ kind: 'message', from: message.from, payload: message.payload });
  }

  private dropped(message: InFlight, reason: DropReason): void {
    this.counters.dropped++;
    this.emit({ kind: 'drop', message, reason });
  }

  // --- connections --------------------------------------------------------------------------------------------------

  /** Brings every pair's connection in line with open endpoints and cuts. */
  private refresh(): void {
    const names = [...this.endpoints.keys()];
    for (let i = 0; i < names.length; i++) {
      for (let j = i + 1; j < names.length; j++) this.refreshPair(names[i]!, names[j]!);
    }
  }

  private refreshPair(a: string, b: string): void {
    const key = pairKey(a, b);
    let pair = this.pairs.get(key);
    const endA = this.endpoints.get(a)!;
    const endB = this.endpoints.get(b)!;
    const shouldConnect = endA.open && endB.open && !this.isCut(a, b) && !this.isCut(b, a);
    if (pair === undefined) {
      if (!shouldConnect) return;
      pair = { connected: false, epoch: 0 };
      this.pairs.set(key, pair);
    }
    if (pair.connected === shouldConnect) return;
    pair.connected = shouldConnect;
    pair.epoch++;
    if (shouldConnect) {
      this.notify(endA, endB.self, 'up', this.connectMs);
      this.notify(endB, endA.self, 'up', this.connectMs);
    } else {
      // The identities are those of the connection that broke: an endpoint that closed is still the one in the map.
      this.notify(endA, endB.self, 'down', this.detectDownMs);
      this.notify(endB, endA.self, 'down', this.detectDownMs);
    }
  }

  /** Reports `kind` about `peer` to `target`, in order with the messages from `peer` to it. */
  private notify(target: SimEndpoint, peer: NodeIdentity, kind: 'up' | 'down', delayMs: number): void {
    if (!target.open) return;
    const lane = this.lane(peer.name, target.self.name);
    const atMs = Math.max(this.scheduler.nowMs() + delayMs, lane.lastAtMs);
    lane.lastAtMs = atMs;
    if (kind === 'up') lane.upAtMs = atMs;
    const event: TransportEvent = { kind, peer };
    this.scheduler.scheduleAt(
      atMs,
      () => {
        if (target.open) target.handler?.(event);
      },
      `${kind}:${peer.name}>${target.self.name}`,
    );
  }

  private isCut(from: string, to: string): boolean {
    return this.isolated.has(from) || this.isolated.has(to) || this.cuts.has(laneKey(from, to));
  }

  private lane(from: string, to: string): Lane {
    const key = laneKey(from, to);
    let lane = this.lanes.get(key);
    if (lane === undefined) {
      lane = { label: `msg:${key}`, lastAtMs: 0, upAtMs: 0 };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  private sampleDelay(delay: DelayModel): number {
    switch (delay.kind) {
      case 'fixed':
        return delay.ms;
      case 'uniform':
        return delay.minMs + this.random.next() * (delay.maxMs - delay.minMs);
      case 'exponential': {
        const tail = -Math.log(1 - this.random.next()) * (delay.meanMs - delay.minMs);
        return Math.min(delay.minMs + tail, delay.maxMs ?? Number.POSITIVE_INFINITY);
      }
    }
  }

  private logSent(from: string, to: string, payload: unknown): void {
    if (this.sentLog.length < this.sentLogMax) this.sentLog.push({ from, to, payload });
    else this.sentLogOverflow = true;
  }

  private emit(observation: NetObservation): void {
    for (const observer of this.observers) observer(observation);
  }
}

function laneKey(from: string, to: string): string {
  return `${from}>${to}`;
}

function pairKey(a: string, b: string): string {
  return a < b ? `${a}|${b}` : `${b}|${a}`;
}

function removeItem<T>(items: T[], item: T): void {
  const index = items.indexOf(item);
  if (index >= 0) items.splice(index, 1);
}

function copierOf(options: SimNetworkOptions): (payload: unknown) => unknown {
  const codec = options.codec;
  if (codec !== undefined) return (payload) => codec.decode(codec.encode(payload));
  if (options.copy === 'none') return (payload) => payload;
  return (payload) => structuredClone(payload);
}

function validLink(config: LinkConfig): LinkConfig {
  const rate = (r: number): boolean => r >= 0 && r <= 1;
  if (!rate(config.dropRate) || !rate(config.duplicateRate)) {
    throw invalidArgument('drop and duplicate rates must be probabilities', { ...config });
  }
  const d = config.delay;
  const ok =
    d.kind === 'fixed'
      ? d.ms >= 0
      : d.kind === 'uniform'
        ? d.minMs >= 0 && d.maxMs >= d.minMs
        : d.minMs >= 0 && d.meanMs >= d.minMs && (d.maxMs === undefined || d.maxMs >= d.minMs);
  if (!ok) throw invalidArgument('invalid delay model', { delay: d });
  return config;
}
