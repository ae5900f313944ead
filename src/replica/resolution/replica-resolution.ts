/**
 * One node's write intent resolution and recovery, assembled from its parts so that the node wires it in one place:
 * the resolver the RO read handler uses, the local intent switcher it feeds, the orphan detector watching each hosted
 * partition's lock conflicts, and the request router for the commit partition / primary replica / recovery kinds.
 *
 * The parts need the node's partition registry and cleanup driver, which live in the ReplicaRequestRouter, which in
 * turn needs the resolver: so the resolver is built first and `attach(router, messenger)` completes the wiring.
 * Until then the switcher finds no partition (it skips) and no handler is registered. The local intent switch is
 * off unless `localIntentSwitch` is set (see intent-switch.ts for why).
 */
import type { NodeId, NodeName } from '../../core/ids.js';
import type { Clock } from '../../env/clock.js';
import type { Timers } from '../../env/timers.js';
import type { PeerIdentity } from '../../env/transport.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import type { TxRequest } from '../../tx/messages.js';
import type { TxStateMap } from '../../tx/tx-state-map.js';
import type { CleanupDriver } from '../cleanup-driver.js';
import type { PartitionRegistry, PartitionReplica } from '../partition-replica.js';
import { IntentSwitcher } from './intent-switch.js';
import { OrphanDetector } from './orphan-detector.js';
import type { CounterSink, PeerDirectory, PrimaryLocator, SelfIdentity, TxRequestFn } from './ports.js';
import { TxStateResolver } from './resolver.js';
import { type ResolutionHandlerRegistry, ResolutionRequestRouter } from './router.js';

export interface ReplicaResolutionOptions {
  readonly self: SelfIdentity;
  readonly clock: HybridClock;
  readonly physicalClock: Pick<Clock, 'monotonicMs'>;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryLocator;
  readonly counters?: CounterSink;
  readonly onError?: (error: unknown) => void;
  readonly resolutionTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  readonly stateWaitMs?: number;
  /**
   * Also switch a resolved row's intent in local storage (default false: see the hazard in intent-switch.ts). The
   * final outcome is cached in the map either way, so later reads of the intent resolve locally without a message.
   */
  readonly localIntentSwitch?: boolean;
}

/** What `attach` needs of the ReplicaRequestRouter: its partition registry and its cleanup driver. */
export interface ReplicaRouterView extends PartitionRegistry {
  readonly cleanups: Pick<CleanupDriver, 'ensureCleanup'>;
}

export class ReplicaResolution {
  readonly resolver: TxStateResolver;
  readonly switcher: IntentSwitcher;
  readonly orphans: OrphanDetector;
  private readonly options: ReplicaResolutionOptions;
  private partitions: PartitionRegistry | undefined;
  private requests: ResolutionRequestRouter | undefined;

  constructor(options: ReplicaResolutionOptions) {
    this.options = options;
    const common = {
      ...(options.counters === undefined ? {} : { counters: options.counters }),
      ...(options.onError === undefined ? {} : { onError: options.onError }),
    };
    this.switcher = new IntentSwitcher({
      storages: { mvPartition: (partitionId) => this.partitions?.get(partitionId)?.mv },
      timers: options.timers,
      ...common,
    });
    this.resolver = new TxStateResolver({
      self: options.self,
      clock: options.clock,
      physicalClock: options.physicalClock,
      timers: options.timers,
      txStates: options.txStates,
      peers: options.peers,
      request: options.request,
      locator: options.locator,
      ...(options.localIntentSwitch === true ? { switcher: this.switcher } : {}),
      ...(options.counters === undefined ? {} : { counters: options.counters }),
      ...(options.resolutionTimeoutMs === undefined ? {} : { timeoutMs: options.resolutionTimeoutMs }),
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
      ...(options.stateWaitMs === undefined ? {} : { stateWaitMs: options.stateWaitMs }),
    });
    this.orphans = new OrphanDetector({
      txStates: options.txStates,
      peers: options.peers,
      request: options.request,
      locator: options.locator,
      physicalClock: options.physicalClock,
      ...common,
      ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
    });
  }

  /** The request router, once attached. */
  get router(): ResolutionRequestRouter | undefined {
    return this.requests;
  }

  /** Completes the wiring with the node's ReplicaRequestRouter and registers the handlers with `registry`. */
  attach(router: ReplicaRouterView, registry: ResolutionHandlerRegistry): () => void {
    const o = this.options;
    this.partitions = router;
    this.requests = new ResolutionRequestRouter({
      partitions: router,
      finish: router.cleanups,
      self: o.self,
      peers: o.peers,
      request: o.request,
      locator: o.locator,
      ...(o.counters === undefined ? {} : { counters: o.counters }),
      ...(o.onError === undefined ? {} : { onError: o.onError }),
      ...(o.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: o.requestTimeoutMs }),
      ...(o.stateWaitMs === undefined ? {} : { stateWaitMs: o.stateWaitMs }),
    });
    return this.requests.registerWith(registry);
  }

  /** Watches `partition`'s lock conflicts for orphans; returns the function that stops watching. */
  watch(partition: PartitionReplica): () => void {
    return this.orphans.attach(partition);
  }
}

/** The part of the node's Membership resolution needs (rule 17 lives in its `isGone`). */
export interface MembershipView {
  isGone(id: NodeId): boolean;
  connectedPeers(): readonly PeerIdentity[];
}

/** A PeerDirectory over the node's membership: this node by its own id, peers while their connection is up. */
export function membershipPeers(membership: MembershipView, self: PeerIdentity): PeerDirectory {
  return {
    isGone: (id) => membership.isGone(id),
    nameOf: (id): NodeName | undefined =>
      id === self.id ? self.name : membership.connectedPeers().find((p) => p.id === id)?.name,
  };
}

/** What a node's partition host has at hand (its PartitionHostContext fits), plus optional counters. */
export interface ResolutionHostContext {
  readonly identity: PeerIdentity;
  readonly clock: Pick<Clock, 'monotonicMs'>;
  readonly hlc: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly membership: MembershipView;
  readonly messenger: {
    request(to: NodeName, body: TxRequest, options: { readonly timeoutMs: number }): Promise<unknown>;
  };
  readonly onError: (error: unknown) => void;
  readonly counters?: CounterSink;
}

/** The node's ReplicaResolution from its host context and primary locator (see the module header for `attach`). */
export function replicaResolutionFor(
  context: ResolutionHostContext,
  locator: PrimaryLocator,
  tuning: Pick<ReplicaResolutionOptions, 'resolutionTimeoutMs' | 'requestTimeoutMs' | 'stateWaitMs'> = {},
): ReplicaResolution {
  return new ReplicaResolution({
    ...tuning,
    self: context.identity,
    clock: context.hlc,
    physicalClock: context.clock,
    timers: context.timers,
    txStates: context.txStates,
    peers: membershipPeers(context.membership, context.identity),
    request: ((to: NodeName, body: TxRequest, options: { readonly timeoutMs: number }) =>
      context.messenger.request(to, body, options)) as TxRequestFn,
    locator,
    onError: context.onError,
    ...(context.counters === undefined ? {} : { counters: context.counters }),
  });
}
