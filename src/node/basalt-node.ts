/**
 * One node incarnation: the parts the composition root (compose.ts) built, and what the node itself does with them.
 * One incarnation = one BasaltNode with a fresh ephemeral id (the transport's identity); a restart builds a new
 * BasaltNode on the same durable storage. Parts: the hybrid clock, the messenger over the transport, membership and
 * liveness (transport up/down plus heartbeats, DESIGN §2 and rule 17), one Raft driver for all groups, the node-level
 * state machine multiplexer, the volatile tx state map, the metastorage service, the partition host that runs the
 * replicas the metastorage assigns to this node, and the services built on it (the transaction coordinator first).
 *
 * Owned here: heartbeats (with the clock offset samples rule 19 uses), metrics, and the incarnation's end.
 * Stopping: `stop()` is graceful (services stopped, leases handed over, partitions stopped, storage closed by its
 * owner's `close`); `kill()` models a crash: it synchronously retires every timer, stops Raft and closes the transport
 * so that nothing of this incarnation acts again, and leaves storage as it is (the harness decides what a crash keeps).
 */
import { setMaxListeners } from 'node:events';
import type { GroupStateMachines } from '../cluster/group-state-machines.js';
import type { Membership, MembershipListener } from '../cluster/membership.js';
import type { NodeMessage } from '../cluster/messages.js';
import type { Metastorage } from '../cluster/metastorage.js';
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { HistogramSnapshot } from '../core/histogram.js';
import type { NodeId, NodeIdentity, NodeName, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { PeerTraffic } from '../env/transport.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import type { MessageBody } from '../net/envelope.js';
import type { Messenger } from '../net/messenger.js';
import type { LeaderChange, RaftCoreOptions, RaftDriver } from '../raft/driver.js';
import type { LogStorage } from '../raft/log-storage.js';
import { LEASE_COUNTERS } from '../replica/partition/lease-metrics.js';
import type { StorageEngine } from '../storage/storage-engine.js';
import type { TxStateMap, TxStateView } from '../tx/core/tx-state-map.js';
import type { OwnedTimers } from './owned-timers.js';
import type { PartitionHost } from './partition-host.js';
import type { PartitionReconciler } from './partition-reconciler.js';

/** What the node persists to, opened by its owner; `close` runs after a graceful stop. */
export interface NodeStorage {
  readonly engine: StorageEngine;
  readonly log: LogStorage;
  close?(): Promise<void>;
}

/** Tuning of a node's runtime: liveness, Raft, clocks and request timeouts (defaults in LIMITS). */
export interface NodeTuning {
  /** A node sends a heartbeat to each connected peer this often (default 500 ms). */
  readonly heartbeatIntervalMs?: number;
  /** A peer down or silent this long is gone: its transactions may be recovered (default 2 s). */
  readonly peerTimeoutMs?: number;
  /** Period of a Raft group's tick (default 50 ms). */
  readonly raftTickIntervalMs?: number;
  /** Options of every Raft group (`electionTicks`, `heartbeatTicks`, …, in ticks of `raftTickIntervalMs`). */
  readonly raft?: RaftCoreOptions;
  /** Applied entries a Raft log keeps before it is compacted into a snapshot (tests make followers install one). */
  readonly raftCompactEntriesMin?: number;
  /** The bound on clock skew between nodes (default 500 ms); a message timestamped further ahead is refused. */
  readonly maxClockSkewMs?: number;
  /** Default timeout of a request between nodes (default 10 s). */
  readonly requestTimeoutMs?: number;
  /** A metastorage watch from a non-member waits at most this long for a newer revision (default 1 s). */
  readonly metaWatchWaitMs?: number;
  /** Raft messages of one turn to one peer travel as one batch (default true; compose.ts `raftTransport`). */
  readonly raftBatching?: boolean;
  /**
   * The committed entries of every Raft group handed over in one turn apply in one storage transaction, not one per
   * group (default false; group-state-machines.ts "Applying together").
   */
  readonly batchApply?: boolean;
}

export interface NodeStopOptions {
  /** Hand leases and leaderships over before stopping (default true; false when the whole cluster stops). */
  readonly handOver?: boolean;
}

/** A service running on one node incarnation; `stop` runs on a graceful stop (a crash just drops it). */
export interface NodeService {
  /** Runs on a graceful stop of the node. */
  stop?(): void | Promise<void>;
}

/** Builds a service for each incarnation, before the node takes part in the cluster (handlers go in here). */
export interface NodeServiceFactory {
  /** The service's name, in logs and errors. */
  readonly name: string;
  /** Builds the service on a node's new incarnation. */
  create(node: BasaltNode): NodeService;
}

/** Counters the node itself bumps. */
export const NODE_COUNTERS = {
  /** Peer envelopes refused because their timestamp was beyond the clock skew bound (rule 8). */
  clockSkewRefusals: 'clock.skewRefusals',
  /** Peer messages refused at the receive edge: a malformed envelope, or a body not well-formed for its kind. */
  malformedPeerMessages: 'net.malformedPeerMessages',
} as const;

/** Counters other layers bump (e.g. the resolver's resolution paths), reported by `metrics()`. */
export class NodeCounters {
  private readonly values = new Map<string, number>();
  add(name: string, n = 1): void {
    this.values.set(name, (this.values.get(name) ?? 0) + n);
  }
  get(name: string): number {
    return this.values.get(name) ?? 0;
  }
  /** Every counter by name, sorted. */
  snapshot(): Readonly<Record<string, number>> {
    return Object.fromEntries([...this.values].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}

/** What `cluster.node(n).metrics()` reports of one node's running incarnation (also on its `/metrics`). */
export interface NodeMetrics {
  /** Write intents this node resolved, by the path that answered (docs/concepts/write-intent-resolution.md). */
  readonly resolution: {
    /** Answered by this node's tx state map. */
    readonly local: number;
    /** Answered by the transaction's coordinator. */
    readonly coordinator: number;
    /** Answered by the transaction's commit partition. */
    readonly commitPartition: number;
  };
  /** Txs this node's commit partitions decided by recovery (their coordinator was gone). */
  readonly recoveries: number;
  /** Raft groups running on this node. */
  readonly raftGroups: number;
  /** Raft groups this node leads. */
  readonly raftLeaderships: number;
  /** Raft groups quiet on this node (idle: no ticks, no heartbeats; raft.ts "Quiescence"). */
  readonly raftQuietGroups: number;
  /** Milliseconds from propose to committed and applied, of this node's proposals as Raft leader (all groups). */
  readonly raftCommitLatencyMs: HistogramSnapshot;
  /**
   * Lease changes as this node's replicas applied them (`lease.*` counters, bumped by the replica host): holder
   * changes summed over hosted partitions, leases this node's replicas acquired and lost; and the hosted partitions
   * whose current lease (started, unexpired) names this node, as `primaryOf` reads it.
   */
  readonly leases: {
    /** Holder changes, summed over the hosted partitions. */
    readonly changes: number;
    /** Leases this node's replicas acquired. */
    readonly acquired: number;
    /** Leases this node's replicas lost. */
    readonly lost: number;
    /** Hosted partitions whose current lease names this node. */
    readonly primaryPartitions: number;
  };
  /** The peers this node counts as live. */
  readonly livePeers: readonly NodeName[];
  /** Rule 19: live peers' measured clock offsets (peer minus this node, ms), and whether this node is beyond the bound. */
  readonly clock: {
    /** Each live peer's clock minus this node's, in ms. */
    readonly offsetsMs: Readonly<Record<string, number>>;
    /** The bound on offsets this node holds itself to. */
    readonly boundMs: number;
    /** Whether this node's clock is within the bound of its peers'. */
    readonly withinBound: boolean;
  };
  /** The metastorage revision this node has applied. */
  readonly metaRevision: number;
  /** Partitions with a replica on this node. */
  readonly hostedPartitions: number;
  /** Entries of this node's tx state map. */
  readonly txStateEntries: number;
  /** Requests to peers awaiting an answer. */
  readonly pendingRequests: number;
  /** Messages sent to peers and the socket writes that carried them (absent on in-process transports). */
  readonly peerTraffic: PeerTraffic | undefined;
  /** Every counter of this incarnation (resolution outcomes and latency totals, recoveries, background failures). */
  readonly counters: Readonly<Record<string, number>>;
}

export const META_MEMBERS_MAX = 3;

/** Every client call in flight listens for the end of its node's incarnation: no listener-count warning. */
function lifetimeController(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}

/**
 * Background failures of one incarnation, reported while it runs: a dead incarnation's leftover continuations may
 * fail against closed storage, and that is not news. Built first, so that every part reports through it.
 */
export class IncarnationErrors {
  private running = true;

  constructor(private readonly sink: (error: unknown) => void = () => {}) {}

  readonly report = (error: unknown): void => {
    if (this.running) this.sink(error);
  };

  /** The incarnation stops acting: nothing is reported from here on. */
  end(): void {
    this.running = false;
  }
}

/** Leader changes of every Raft group on the node, fanned out to its listeners. */
export class LeaderChanges {
  private readonly listeners = new Set<(change: LeaderChange) => void>();

  /** Adds a listener; returns the function that removes it. */
  listen(listener: (change: LeaderChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  readonly emit = (change: LeaderChange): void => {
    for (const listener of [...this.listeners]) listener(change);
  };
}

/** The parts of one incarnation, built by the composition root (compose.ts) in its order. */
export type BasaltNodeParts = Pick<
  BasaltNode,
  | 'self'
  | 'clock'
  | 'hlc'
  | 'timers'
  | 'random'
  | 'messenger'
  | 'membership'
  | 'stateMachines'
  | 'raft'
  | 'txStates'
  | 'metastorage'
  | 'partitions'
  | 'counters'
> & {
  readonly storage: NodeStorage;
  readonly reconciler: PartitionReconciler;
  readonly errors: IncarnationErrors;
  readonly leaders: LeaderChanges;
  readonly heartbeatIntervalMs: number;
};

export class BasaltNode {
  readonly self: NodeIdentity;
  readonly clock: Clock;
  readonly hlc: HybridClock;
  readonly timers: OwnedTimers;
  readonly random: Random;
  readonly messenger: Messenger<MessageBody>;
  readonly membership: Membership;
  readonly stateMachines: GroupStateMachines;
  readonly raft: RaftDriver;
  readonly storage: StorageEngine;
  readonly logStorage: LogStorage;
  readonly txStates: TxStateMap;
  readonly metastorage: Metastorage;
  readonly partitions: PartitionHost;
  readonly counters: NodeCounters;
  private readonly nodeStorage: NodeStorage;
  private readonly reconciler: PartitionReconciler;
  private readonly leaders: LeaderChanges;
  private readonly heartbeatIntervalMs: number;
  private readonly heartbeatsInFlight = new Set<NodeName>();
  private readonly errors: IncarnationErrors;
  private readonly services = new Map<string, NodeService>();
  private state: 'running' | 'stopping' | 'stopped' = 'running';
  private storageClosed = false;
  private readonly lifetimeController = lifetimeController();

  constructor(parts: BasaltNodeParts) {
    this.self = parts.self;
    this.clock = parts.clock;
    this.hlc = parts.hlc;
    this.timers = parts.timers;
    this.random = parts.random;
    this.messenger = parts.messenger;
    this.membership = parts.membership;
    this.stateMachines = parts.stateMachines;
    this.raft = parts.raft;
    this.nodeStorage = parts.storage;
    this.storage = parts.storage.engine;
    this.logStorage = parts.storage.log;
    this.txStates = parts.txStates;
    this.metastorage = parts.metastorage;
    this.partitions = parts.partitions;
    this.reconciler = parts.reconciler;
    this.counters = parts.counters;
    this.errors = parts.errors;
    this.leaders = parts.leaders;
    this.heartbeatIntervalMs = parts.heartbeatIntervalMs;
  }

  /** Adds a service of this incarnation (names are unique); services stop in reverse order on a graceful stop. */
  addService(name: string, service: NodeService): void {
    if (this.services.has(name)) throw new BasaltError('ALREADY_EXISTS', `service ${name} is registered twice`);
    this.services.set(name, service);
  }

  /** Takes part in the cluster: starts the metastorage (and with it partition hosting) and the heartbeats. */
  async start(): Promise<void> {
    await this.metastorage.start();
    this.armHeartbeat();
  }

  /** Aborted once this incarnation stops acting (a crash, or the start of a graceful stop). */
  get lifetime(): AbortSignal {
    return this.lifetimeController.signal;
  }

  /** Reports a failure of background work (a service's), like the node's own: fatal under the simulator. */
  reportError(error: unknown): void {
    this.errors.report(error);
  }

  /** The service built by the factory named `name` for this incarnation. */
  service<T extends NodeService>(name: string): T | undefined {
    return this.services.get(name) as T | undefined;
  }

  get name(): NodeName {
    return this.self.name;
  }

  get ephemeralId(): NodeId {
    return this.self.id;
  }

  get running(): boolean {
    return this.state === 'running';
  }

  /** Rule 19: false while this node's clock is beyond the bound from a majority (it must not act as primary). */
  clockWithinBound(): boolean {
    return this.membership.clockWithinBound();
  }

  /** Rule 17: a superseded id, or one unheard for the liveness timeout. Never true for an id never seen. */
  isGone(id: NodeId): boolean {
    return this.membership.isGone(id);
  }

  liveIdOf(name: NodeName): NodeId | undefined {
    return this.membership.liveIdOf(name);
  }

  onMembershipChange(listener: MembershipListener): () => void {
    return this.membership.onChange(listener);
  }

  onLeaderChange(listener: (change: LeaderChange) => void): () => void {
    return this.leaders.listen(listener);
  }

  /** Partitions this node hosts now, with their replicas. */
  hostedPartitions(): ReadonlyMap<PartitionId, readonly NodeName[]> {
    return this.reconciler.running();
  }

  txState(txId: TxId): TxStateView | undefined {
    return this.txStates.get(txId);
  }

  metrics(): NodeMetrics {
    const groups = this.raft.groupIds();
    return {
      resolution: {
        local: this.counters.get('resolution.local'),
        coordinator: this.counters.get('resolution.coordinator'),
        commitPartition: this.counters.get('resolution.commitPartition'),
      },
      recoveries: this.counters.get('recovery.aborts'),
      raftGroups: groups.length,
      raftLeaderships: groups.filter((g) => this.raft.status(g)?.role === 'leader').length,
      raftQuietGroups: groups.filter((g) => this.raft.isQuiet(g)).length,
      raftCommitLatencyMs: this.raft.commitLatencyMs(),
      leases: {
        changes: this.counters.get(LEASE_COUNTERS.changes),
        acquired: this.counters.get(LEASE_COUNTERS.acquired),
        lost: this.counters.get(LEASE_COUNTERS.lost),
        primaryPartitions: this.primaryPartitionCount(),
      },
      livePeers: this.membership.livePeers(),
      clock: {
        offsetsMs: this.membership.clockOffsetsMs(),
        boundMs: this.membership.clockOffsetBoundMs,
        withinBound: this.membership.clockWithinBound(),
      },
      metaRevision: this.metastorage.revision,
      hostedPartitions: this.reconciler.running().size,
      txStateEntries: this.txStates.size,
      pendingRequests: this.messenger.pendingCount,
      peerTraffic: this.messenger.traffic(),
      counters: this.counters.snapshot(),
    };
  }

  /** Hosted partitions whose primary, as this node knows it, is this node. */
  private primaryPartitionCount(): number {
    let count = 0;
    for (const partition of this.reconciler.running().keys()) {
      if (this.partitions.primaryOf?.(partition) === this.self.name) count++;
    }
    return count;
  }

  /**
   * Graceful stop: services stopped, then (unless `handOver` is false) leases and Raft leaderships handed to live
   * replicas, bounded by one lease duration (rule 5), then partitions stopped (their state kept), Raft stopped,
   * connections closed, storage closed.
   */
  async stop(options: NodeStopOptions = {}): Promise<void> {
    if (this.state !== 'running') return;
    this.state = 'stopping';
    this.errors.end();
    this.lifetimeController.abort();
    for (const service of [...this.services.values()].reverse()) {
      await Promise.resolve(service.stop?.()).catch((error: unknown) => this.errors.report(error));
    }
    if (options.handOver !== false) {
      // Peers stopping at the same time (a whole cluster going down) then hand nothing to each other.
      for (const peer of this.membership.connectedPeers()) this.typed().send(peer.name, { kind: 'NodeLeaving' });
      await Promise.all([
        Promise.resolve(this.partitions.drain?.()),
        this.metastorage.handOver(LIMITS.leaseDurationMsDefault),
      ]).catch((error: unknown) => this.errors.report(error));
    }
    this.metastorage.stop();
    await this.reconciler.stopAll();
    this.raft.stop();
    this.timers.retire();
    await this.messenger.close();
    await this.closeStorage();
    this.state = 'stopped';
  }

  /** Closes the node's storage (once); after a crash the harness calls it to release the files. */
  async closeStorage(): Promise<void> {
    if (this.storageClosed) return;
    this.storageClosed = true;
    await this.nodeStorage.close?.();
  }

  /**
   * Crash: synchronously, nothing of this incarnation acts again (timers retired, Raft stopped, transport closing).
   * The promise resolves once the transport has released its resources (e.g. its listening port). Storage is left
   * open and untouched for the harness.
   */
  kill(): Promise<void> {
    if (this.state === 'stopped') return Promise.resolve();
    this.state = 'stopped';
    this.errors.end();
    this.lifetimeController.abort();
    this.timers.retire();
    this.reconciler.halt();
    this.metastorage.stop();
    this.raft.stop();
    return this.messenger.close().catch(() => {});
  }

  /** The messenger typed with the node layer's own message kinds. */
  private typed(): Messenger<NodeMessage> {
    return this.messenger.as<NodeMessage>();
  }

  private armHeartbeat(): void {
    this.timers.setTimer(() => {
      // Liveness is still needed while a graceful stop hands leases over.
      if (this.state === 'stopped') return;
      this.membership.tick();
      for (const peer of this.membership.connectedPeers()) this.heartbeat(peer);
      this.armHeartbeat();
    }, this.heartbeatIntervalMs);
  }

  private heartbeat(peer: NodeIdentity): void {
    if (this.heartbeatsInFlight.has(peer.name)) return;
    this.heartbeatsInFlight.add(peer.name);
    const sentPhysicalMs = this.clock.nowMs();
    const sentMonotonicMs = this.clock.monotonicMs();
    this.typed()
      .request(
        peer.name,
        { kind: 'NodeHeartbeat', physicalMs: sentPhysicalMs },
        { timeoutMs: this.membership.timeoutMs },
      )
      .then(
        (answer) => {
          this.membership.heard(peer);
          const remotePhysicalMs = (answer as { physicalMs?: unknown }).physicalMs;
          if (typeof remotePhysicalMs !== 'number') return;
          const receivedMonotonicMs = this.clock.monotonicMs();
          this.membership.clockSample(peer, { sentPhysicalMs, sentMonotonicMs, remotePhysicalMs, receivedMonotonicMs });
        },
        (error: unknown) => {
          const refusal = clockSkewRefusal(error, peer.name);
          if (refusal === undefined) return;
          // The peer refused this node's heartbeat for its clock (rule 8): it is alive and answered. An answer this
          // node refused is not heard (the peer's messages are unusable, so it goes gone after the liveness timeout),
          // but both still measure the offset, so that rule 19 sees a runaway clock from either side.
          if (refusal.refusedBy === 'peer') this.membership.heard(peer);
          const receivedMonotonicMs = this.clock.monotonicMs();
          const remotePhysicalMs = refusal.remotePhysicalMs;
          this.membership.clockSample(peer, { sentPhysicalMs, sentMonotonicMs, remotePhysicalMs, receivedMonotonicMs });
        },
      )
      .finally(() => this.heartbeatsInFlight.delete(peer.name));
  }
}

/**
 * The peer's physical time carried by a CLOCK_SKEW refusal of a request to `peer` (messenger.ts): refused by the peer
 * (it names this node as the sender; its own time is the receiver's), or by this node (the answer's sender time).
 */
function clockSkewRefusal(
  error: unknown,
  peer: NodeName,
): { readonly refusedBy: 'peer' | 'self'; readonly remotePhysicalMs: number } | undefined {
  if (!isBasaltError(error, 'CLOCK_SKEW') || error.details === undefined) return undefined;
  const { peer: sender, senderPhysicalMs, receiverPhysicalMs } = error.details;
  const refusedBy = sender === peer ? 'self' : 'peer';
  const remotePhysicalMs = refusedBy === 'self' ? senderPhysicalMs : receiverPhysicalMs;
  return typeof remotePhysicalMs === 'number' && Number.isFinite(remotePhysicalMs)
    ? { refusedBy, remotePhysicalMs }
    : undefined;
}
