/**
 * The composition root of one node: wires every component from injected dependencies, the same way on real time with
 * TCP and LMDB as in the simulator. One incarnation = one BasaltNode with a fresh ephemeral id (the transport's
 * identity); a restart builds a new BasaltNode on the same durable storage.
 *
 * Owned here: the hybrid clock, the messenger over the transport, membership/liveness (transport up/down plus
 * heartbeats, DESIGN §2 and rule 17), one Raft driver for all groups (Raft messages travel as one-way `Raft` messages
 * carrying the group), the node-level state machine multiplexer, the volatile tx state map, the metastorage service,
 * and the partition host that runs the replicas the metastorage assigns to this node.
 *
 * Stopping: `stop()` is graceful (partitions stopped, storage closed by its owner's `close`); `kill()` models a crash:
 * it synchronously retires every timer, stops Raft and closes the transport so that nothing of this incarnation acts
 * again, and leaves storage as it is (the harness decides what a crash keeps).
 */
import { setMaxListeners } from 'node:events';
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { HistogramSnapshot } from '../core/histogram.js';
import type { NodeId, NodeName, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { Timers } from '../env/timers.js';
import type { PeerIdentity, Transport } from '../env/transport.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import type { DiagnosticListener } from '../net/diagnostics.js';
import type { MessageBody } from '../net/envelope.js';
import { Messenger } from '../net/messenger.js';
import { type LeaderChange, type RaftCoreOptions, RaftDriver, type RaftTransport } from '../raft/driver.js';
import type { LogStorage } from '../raft/log-storage.js';
import { LEASE_COUNTERS } from '../replica/lease-metrics.js';
import type { StorageEngine } from '../storage/storage-engine.js';
import { TxStateMap, type TxStateView } from '../tx/tx-state-map.js';
import { GroupStateMachines } from './group-state-machines.js';
import { Membership, type MembershipListener } from './membership.js';
import type { NodeMessage } from './messages.js';
import { Metastorage } from './metastorage.js';
import type { MetaView } from './metastorage-state.js';
import { OwnedTimers } from './owned-timers.js';
import { type PartitionHost, type PartitionHostFactory, placeholderPartitionHost } from './partition-host.js';
import { PartitionReconciler } from './partition-reconciler.js';

/** What the node persists to, opened by its owner; `close` runs after a graceful stop. */
export interface NodeStorage {
  readonly engine: StorageEngine;
  readonly log: LogStorage;
  close?(): Promise<void>;
}

export interface NodeTuning {
  readonly heartbeatIntervalMs?: number;
  readonly peerTimeoutMs?: number;
  readonly raftTickIntervalMs?: number;
  readonly raft?: RaftCoreOptions;
  /** Applied entries a Raft log keeps before it is compacted into a snapshot (tests make followers install one). */
  readonly raftCompactEntriesMin?: number;
  readonly maxClockSkewMs?: number;
  readonly requestTimeoutMs?: number;
  readonly metaWatchWaitMs?: number;
}

export interface BasaltNodeOptions {
  /** Bound to this incarnation's identity: `transport.self` is the node's name and fresh ephemeral id. */
  readonly transport: Transport;
  readonly clock: Clock;
  readonly timers: Timers;
  readonly random: Random;
  readonly storage: NodeStorage;
  /** Every node name of the cluster; the first three (or fewer) are the metastorage members. */
  readonly nodes: readonly NodeName[];
  readonly partitionHost?: PartitionHostFactory;
  /** Services built on the node (coordinator, client endpoint, ...), created in order once its parts exist. */
  readonly services?: readonly NodeServiceFactory[];
  readonly tuning?: NodeTuning;
  /** Failures of background work (a partition that failed to start, a Raft group that failed). */
  readonly onError?: (error: unknown) => void;
  /** What the messenger observed and could not throw to anyone (e.g. envelopes refused for the sender's clock). */
  readonly onDiagnostic?: DiagnosticListener;
}

export interface NodeStopOptions {
  /** Hand leases and leaderships over before stopping (default true; false when the whole cluster stops). */
  readonly handOver?: boolean;
}

/** A service running on one node incarnation; `stop` runs on a graceful stop (a crash just drops it). */
export interface NodeService {
  stop?(): void | Promise<void>;
}

/** Builds a service for each incarnation, before the node takes part in the cluster (handlers go in here). */
export interface NodeServiceFactory {
  readonly name: string;
  create(node: BasaltNode): NodeService;
}

/** Counters the node itself bumps. */
export const NODE_COUNTERS = {
  /** Peer envelopes refused because their timestamp was beyond the clock skew bound (rule 8). */
  clockSkewRefusals: 'clock.skewRefusals',
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

export interface NodeMetrics {
  readonly resolution: { readonly local: number; readonly coordinator: number; readonly commitPartition: number };
  /** Txs this node's commit partitions decided by recovery (their coordinator was gone). */
  readonly recoveries: number;
  readonly raftGroups: number;
  readonly raftLeaderships: number;
  /** Milliseconds from propose to committed and applied, of this node's proposals as Raft leader (all groups). */
  readonly raftCommitLatencyMs: HistogramSnapshot;
  /**
   * Lease changes as this node's replicas applied them (`lease.*` counters, bumped by the replica host): holder
   * changes summed over hosted partitions, leases this node's replicas acquired and lost; and the hosted partitions
   * whose current lease (started, unexpired) names this node, as `primaryOf` reads it.
   */
  readonly leases: {
    readonly changes: number;
    readonly acquired: number;
    readonly lost: number;
    readonly primaryPartitions: number;
  };
  readonly livePeers: readonly NodeName[];
  /** Rule 19: live peers' measured clock offsets (peer minus this node, ms), and whether this node is beyond the bound. */
  readonly clock: {
    readonly offsetsMs: Readonly<Record<string, number>>;
    readonly boundMs: number;
    readonly withinBound: boolean;
  };
  readonly metaRevision: number;
  readonly hostedPartitions: number;
  readonly txStateEntries: number;
  readonly pendingRequests: number;
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

export class BasaltNode {
  readonly self: PeerIdentity;
  readonly clock: Clock;
  readonly hlc: HybridClock;
  readonly timers: OwnedTimers;
  readonly random: Random;
  readonly messenger: Messenger<MessageBody>;
  readonly membership: Membership;
  readonly stateMachines = new GroupStateMachines();
  readonly raft: RaftDriver;
  readonly storage: StorageEngine;
  readonly logStorage: LogStorage;
  readonly txStates: TxStateMap;
  readonly metastorage: Metastorage;
  readonly partitions: PartitionHost;
  readonly counters = new NodeCounters();
  private readonly nodeStorage: NodeStorage;
  private readonly reconciler: PartitionReconciler;
  private readonly leaderListeners = new Set<(change: LeaderChange) => void>();
  private readonly heartbeatIntervalMs: number;
  private readonly heartbeatsInFlight = new Set<NodeName>();
  private readonly onError: (error: unknown) => void;
  private readonly services = new Map<string, NodeService>();
  private state: 'running' | 'stopping' | 'stopped' = 'running';
  private storageClosed = false;
  private readonly lifetimeController = lifetimeController();

  private constructor(options: BasaltNodeOptions) {
    const tuning = options.tuning ?? {};
    this.self = options.transport.self;
    if (!options.nodes.includes(this.self.name)) {
      throw new BasaltError('INVALID_ARGUMENT', `node ${this.self.name} is not among the cluster's nodes`, {
        nodes: options.nodes,
      });
    }
    this.clock = options.clock;
    this.timers = new OwnedTimers(options.timers);
    this.random = options.random;
    const report = options.onError ?? (() => {});
    // A dead incarnation's leftover continuations may fail against closed storage: that is not news.
    this.onError = (error) => {
      if (this.state === 'running') report(error);
    };
    this.nodeStorage = options.storage;
    this.storage = options.storage.engine;
    this.logStorage = options.storage.log;
    this.heartbeatIntervalMs = tuning.heartbeatIntervalMs ?? LIMITS.nodeHeartbeatIntervalMs;
    this.hlc = new HybridClock(options.clock, {
      ...(tuning.maxClockSkewMs !== undefined && { maxClockSkewMs: tuning.maxClockSkewMs }),
    });
    this.messenger = new Messenger<MessageBody>({
      transport: options.transport,
      clock: this.hlc,
      timers: this.timers,
      ...(tuning.requestTimeoutMs !== undefined && { requestTimeoutMsDefault: tuning.requestTimeoutMs }),
      onClockSkew: () => this.counters.add(NODE_COUNTERS.clockSkewRefusals),
      ...(options.onDiagnostic !== undefined && { onDiagnostic: options.onDiagnostic }),
    });
    this.membership = new Membership({
      self: this.self,
      nowMs: () => options.clock.monotonicMs(),
      memberCount: new Set(options.nodes).size,
      ...(tuning.peerTimeoutMs !== undefined && { timeoutMs: tuning.peerTimeoutMs }),
      clockOffsetBoundMs: this.hlc.maxClockSkewMs * LIMITS.clockOffsetBoundFraction,
    });
    this.messenger.onPeer((event) => {
      if (event.kind === 'up') this.membership.peerUp(event.peer);
      else this.membership.peerDown(event.peer);
    });
    this.txStates = new TxStateMap({ clock: options.clock });
    this.raft = new RaftDriver({
      self: this.self.name,
      transport: this.raftTransport(),
      timers: this.timers,
      random: options.random.fork('raft'),
      storage: options.storage.log,
      stateMachine: this.stateMachines,
      ...(tuning.raftTickIntervalMs !== undefined && { tickIntervalMs: tuning.raftTickIntervalMs }),
      ...(tuning.raft !== undefined && { raft: tuning.raft }),
      ...(tuning.raftCompactEntriesMin !== undefined && { compactEntriesMin: tuning.raftCompactEntriesMin }),
      onLeaderChange: (change) => {
        for (const listener of [...this.leaderListeners]) listener(change);
      },
      onGroupFailed: (_group, error) => this.onError(error),
      clock: options.clock,
    });
    const hostFactory = options.partitionHost ?? placeholderPartitionHost;
    this.partitions = hostFactory({
      self: this.self.name,
      identity: this.self,
      clock: options.clock,
      hlc: this.hlc,
      timers: this.timers,
      random: options.random.fork('partitions'),
      messenger: this.messenger,
      membership: this.membership,
      raft: this.raft,
      stateMachines: this.stateMachines,
      logStorage: options.storage.log,
      storage: options.storage.engine,
      txStates: this.txStates,
      onLeaderChange: (listener) => this.onLeaderChange(listener),
      onError: this.onError,
      metaView: () => this.metastorage?.view(),
      counters: this.counters,
    });
    this.reconciler = new PartitionReconciler(
      this.self.name,
      this.partitions,
      this.onError,
      { now: () => this.hlc.current(), timers: this.timers },
      () => [...this.storage.partitions(), ...this.logStorage.groups()],
    );
    const nodes = [...new Set(options.nodes)];
    this.metastorage = new Metastorage({
      self: this.self.name,
      members: nodes.slice(0, META_MEMBERS_MAX),
      nodes,
      messenger: this.messenger.as<NodeMessage>(),
      raft: this.raft,
      stateMachines: this.stateMachines,
      timers: this.timers,
      clock: options.clock,
      hlc: this.hlc,
      random: options.random.fork('meta'),
      isLive: (name) => this.membership.liveIdOf(name) !== undefined,
      canSucceed: (name) => this.membership.canSucceed(name),
      onView: (view: MetaView) => this.reconciler.update(view),
      ...(tuning.metaWatchWaitMs !== undefined && { watchWaitMs: tuning.metaWatchWaitMs }),
    });
  }

  /** Builds and starts one incarnation. */
  static async start(options: BasaltNodeOptions): Promise<BasaltNode> {
    const node = new BasaltNode(options);
    node.typed().handle('NodeHeartbeat', () => ({ kind: 'NodeHeartbeatAck', physicalMs: node.clock.nowMs() }));
    node.typed().handle('NodeLeaving', (_body, from) => {
      node.membership.peerLeaving(from);
      return undefined;
    });
    for (const factory of options.services ?? []) {
      if (node.services.has(factory.name)) {
        throw new BasaltError('ALREADY_EXISTS', `service ${factory.name} is registered twice`);
      }
      node.services.set(factory.name, factory.create(node));
    }
    await node.metastorage.start();
    node.armHeartbeat();
    return node;
  }

  /** Aborted once this incarnation stops acting (a crash, or the start of a graceful stop). */
  get lifetime(): AbortSignal {
    return this.lifetimeController.signal;
  }

  /** Reports a failure of background work (a service's), like the node's own: fatal under the simulator. */
  reportError(error: unknown): void {
    this.onError(error);
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
    this.leaderListeners.add(listener);
    return () => this.leaderListeners.delete(listener);
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
    this.lifetimeController.abort();
    for (const service of [...this.services.values()].reverse()) {
      await Promise.resolve(service.stop?.()).catch((error: unknown) => this.onError(error));
    }
    if (options.handOver !== false) {
      // Peers stopping at the same time (a whole cluster going down) then hand nothing to each other.
      for (const peer of this.membership.connectedPeers()) this.typed().send(peer.name, { kind: 'NodeLeaving' });
      await Promise.all([
        Promise.resolve(this.partitions.drain?.()),
        this.metastorage.handOver(LIMITS.leaseDurationMsDefault),
      ]).catch((error: unknown) => this.onError(error));
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

  private raftTransport(): RaftTransport {
    const messenger = this.typed();
    return {
      send: (to, envelope) => messenger.send(to, { kind: 'Raft', group: envelope.group, message: envelope.message }),
      setHandler: (handler) => {
        messenger.handle('Raft', (body, from) => {
          handler(from.name, { group: body.group, message: body.message });
          return undefined;
        });
      },
    };
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

  private heartbeat(peer: PeerIdentity): void {
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
