/**
 * The composition root: `composeNode` builds one node incarnation from its injected dependencies, in one visible
 * order, handing each part the narrow set of components it declares (js-libp2p's components are the model), the same
 * way on real time with TCP and LMDB as in the simulator. `startNode` builds and starts one; `startCluster`, the
 * cluster harnesses (real and simulated), `basalt start` and `basalt local` all call it, with the same defaults: real
 * replicas and a transaction coordinator on every node (`NodeRoles`; a test may swap the partition host).
 *
 * The order, each step using only what the steps before it built:
 *  1. the core: error report, counters, timers, hybrid clock, messenger, membership, tx state map, Raft driver (its
 *     messages travel as one-way `Raft` messages carrying the group), and the node's own message kinds;
 *  2. the metastorage (its views reach the partition reconciler of step 6, once `start` runs);
 *  3. the replica layer: partition directory, primary hints, low watermark, cleanup driver, finish handler,
 *     resolution, in-line cleanup, GC, vacuum and tx sweep (passive until a host adds partitions and starts them);
 *  4. the transaction coordinator, with the replica layer's hints, local view and low watermark;
 *  5. the one request table (replica/request-table.ts), registered with the messenger;
 *  6. the partition host and the reconciler that starts and stops its partitions;
 *  7. the node, its coordinator service and the extra services.
 * Nothing is wired later: no part is completed after its construction.
 */

import { ClusterMembers, RejoinGuard } from '../cluster/cluster-members.js';
import { GroupStateMachines } from '../cluster/group-state-machines.js';
import { Membership } from '../cluster/membership.js';
import type { NodeMessage, RaftPart } from '../cluster/messages.js';
import { Metastorage } from '../cluster/metastorage.js';
import { type MetaView, protectedFloor } from '../cluster/metastorage-state.js';
import { PartitionMover } from '../cluster/partition-mover.js';
import { BasaltError } from '../core/errors.js';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import type { Random } from '../env/random.js';
import type { Timers } from '../env/timers.js';
import type { Transport } from '../env/transport.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import type { DiagnosticListener } from '../net/diagnostics.js';
import type { MessageBody } from '../net/envelope.js';
import { Messenger } from '../net/messenger.js';
import { RaftDriver, type RaftTransport } from '../raft/driver.js';
import { CleanupDriver, type CleanupSender, messengerCleanupSender } from '../replica/cleanup/cleanup-driver.js';
import { InlineCleanup } from '../replica/cleanup/inline-cleanup.js';
import { CommittingSettler } from '../replica/handlers/committing-settle.js';
import { TxFinishHandler } from '../replica/handlers/tx-finish.js';
import { StorageGcDriver } from '../replica/partition/gc.js';
import { localReplicaView } from '../replica/partition/local-view.js';
import { PartitionDirectory } from '../replica/partition/partition-directory.js';
import { TxStateVacuumDriver, vacuumPartitionOf } from '../replica/partition/vacuum.js';
import { membershipPeers, ReplicaResolution } from '../replica/replica-resolution.js';
import { registerTxRequests, txRequestTable } from '../replica/request-table.js';
import { TxSweep } from '../replica/resolution/tx-sweep.js';
import { hintsDirectory, PrimaryHints } from '../route/primary-directory.js';
import type { StorageEngine } from '../storage/storage-engine.js';
import type { TxCoordinatorOptions } from '../tx/coordinator/settings.js';
import { LowWatermark } from '../tx/core/low-watermark.js';
import type { TxRequest, TxRequestFn, TxResponse } from '../tx/core/messages.js';
import { TxStateMap } from '../tx/core/tx-state-map.js';
import {
  BasaltNode,
  IncarnationErrors,
  LeaderChanges,
  META_MEMBERS_MAX,
  NODE_COUNTERS,
  NodeCounters,
  type NodeServiceFactory,
  type NodeStorage,
  type NodeTuning,
} from './basalt-node.js';
import { COORDINATOR_SERVICE, CoordinatorService } from './coordinator-service.js';
import { PEER_MESSAGE_CHECKS } from './message-checks.js';
import { OwnedTimers } from './owned-timers.js';
import type { PartitionHostFactory, ReplicaLayer } from './partition-host.js';
import { PartitionReconciler } from './partition-reconciler.js';
import {
  isExpectedFailure,
  localLeaseHolder,
  type ReplicaHostOptions,
  replicaPartitionHost,
  replicasFromView,
} from './replica-host.js';

/** What runs on a node besides its core; the defaults are what every production node runs. */
export interface NodeRoles {
  /** Replaces the host of partition replicas (tests: a placeholder or a recording host). Default: real replicas. */
  readonly partitionHost?: PartitionHostFactory;
  /** Tuning of the replica layer and of the default host (lease length, upkeep period, lock wait, tx timeout). */
  readonly replicas?: ReplicaHostOptions;
  /** Tuning of the node's transaction coordinator (its txTimeoutMs must match `replicas.txTimeoutMs`). */
  readonly coordinator?: TxCoordinatorOptions;
  /** More services built on every incarnation, in order, after the coordinator. */
  readonly services?: readonly NodeServiceFactory[];
}

export interface NodeOptions extends NodeRoles {
  /** Bound to this incarnation's identity: `transport.self` is the node's name and fresh ephemeral id. */
  readonly transport: Transport;
  readonly clock: Clock;
  readonly timers: Timers;
  readonly random: Random;
  readonly storage: NodeStorage;
  /**
   * The node names the cluster was founded with (the same on every node, in any order); the first three in sorted
   * order are the metastorage members. A node joining a running cluster (`join`) is not among them.
   */
  readonly nodes: readonly NodeName[];
  /** This node joins a running cluster: it asks to become a member (see cluster-members.ts). */
  readonly join?: boolean;
  /** Where the other nodes dial this one (recorded with its membership); absent in the simulator. */
  readonly advertise?: string;
  /** Nodes to ask for the metastorage state besides its members (a joining node: the node it joins through). */
  readonly metaSeeds?: readonly NodeName[];
  readonly tuning?: NodeTuning;
  /** Failures of background work (a partition that failed to start, a Raft group that failed). */
  readonly onError?: (error: unknown) => void;
  /** What the messenger observed and could not throw to anyone (e.g. envelopes refused for the sender's clock). */
  readonly onDiagnostic?: DiagnosticListener;
}

/** Counters the replica layer bumps. */
export const REPLICA_LAYER_COUNTERS = {
  /** Background work of the replica layer that failed in a way faults explain (coded, not INTERNAL). */
  backgroundFailures: 'replica.backgroundFailures',
} as const;

/** The node's state machine multiplexer; with `batchApply` its groups share storage transactions. */
function groupStateMachines(tuning: NodeTuning, engine: StorageEngine, counters: NodeCounters): GroupStateMachines {
  return new GroupStateMachines({
    counters,
    ...(tuning.batchApply === true && { atomically: (fn) => engine.runConsistently(fn) }),
  });
}

/** Builds and starts one incarnation. */
export async function startNode(options: NodeOptions): Promise<BasaltNode> {
  const node = composeNode(options);
  await node.start();
  return node;
}

/** Builds one incarnation, not yet started (see the module header for the order). */
export function composeNode(options: NodeOptions): BasaltNode {
  const tuning = options.tuning ?? {};
  const self = options.transport.self;
  if (options.join !== true && !options.nodes.includes(self.name)) {
    throw new BasaltError('INVALID_ARGUMENT', `node ${self.name} is not among the cluster's nodes`, {
      nodes: options.nodes,
    });
  }
  const { clock, random, storage } = options;

  // 1. The core.
  const errors = new IncarnationErrors(options.onError);
  const counters = new NodeCounters();
  const timers = new OwnedTimers(options.timers);
  const hlc = new HybridClock(clock, {
    ...(tuning.maxClockSkewMs !== undefined && { maxClockSkewMs: tuning.maxClockSkewMs }),
  });
  const messenger = messengerOf(options, hlc, timers, counters);
  // Sorted: every node must derive the same metastorage members from the same names, whatever order it was given.
  const nodes = [...new Set(options.nodes)].sort();
  const membership = new Membership({
    self,
    nowMs: () => clock.monotonicMs(),
    memberCount: nodes.length,
    ...(tuning.peerTimeoutMs !== undefined && { timeoutMs: tuning.peerTimeoutMs }),
    clockOffsetBoundMs: hlc.maxClockSkewMs * LIMITS.clockOffsetBoundFraction,
  });
  messenger.onPeer((event) => {
    if (event.kind === 'up') membership.peerUp(event.peer);
    else membership.peerDown(event.peer);
  });
  const txStates = new TxStateMap({ clock });
  const stateMachines = groupStateMachines(tuning, storage.engine, counters);
  const leaders = new LeaderChanges();
  const nodeMessenger = messenger.as<NodeMessage>();
  const raft = new RaftDriver({
    self: self.name,
    transport: raftTransport(nodeMessenger, tuning.raftBatching ?? true, errors.report),
    timers,
    random: random.fork('raft'),
    storage: storage.log,
    stateMachine: stateMachines,
    ...(tuning.raftTickIntervalMs !== undefined && { tickIntervalMs: tuning.raftTickIntervalMs }),
    ...(tuning.raft !== undefined && { raft: tuning.raft }),
    ...(tuning.raftCompactEntriesMin !== undefined && { compactEntriesMin: tuning.raftCompactEntriesMin }),
    onLeaderChange: leaders.emit,
    onGroupFailed: (_group, error) => errors.report(error),
    clock,
  });
  nodeMessenger.handle('NodeHeartbeat', () => ({ kind: 'NodeHeartbeatAck', physicalMs: clock.nowMs() }));
  nodeMessenger.handle('NodeLeaving', (_body, from) => {
    membership.peerLeaving(from);
    return undefined;
  });

  // 2. The metastorage. Its views go to the reconciler (step 6) from `start` on, never during construction; a node that
  // joins with no data under a name that still holds replicas is refused (cluster-members.ts RejoinGuard).
  const emptyJoin =
    options.join === true && storage.log.groups().length === 0 && storage.engine.partitions().length === 0;
  const rejoin = new RejoinGuard(self.name, emptyJoin);
  // The membership agent and the mover (step 6b) check a new view at once.
  const viewListeners: Array<() => void> = [];
  const metastorage = new Metastorage({
    self: self.name,
    members: nodes.slice(0, META_MEMBERS_MAX),
    nodes,
    seeds: options.metaSeeds ?? [],
    messenger: nodeMessenger,
    raft,
    stateMachines,
    timers,
    clock,
    hlc,
    random: random.fork('meta'),
    isLive: (name) => membership.liveIdOf(name) !== undefined,
    canSucceed: (name) => membership.canSucceed(name),
    onView: (view: MetaView) => {
      const { admit, refusal } = rejoin.admit(view);
      if (refusal !== undefined) errors.report(refusal);
      if (admit) reconciler.update(view);
      for (const listener of viewListeners) listener();
    },
    // A node refused as an empty rejoin does not start the metastorage group either (it would be an empty voter).
    mayRunGroup: (view: MetaView) => rejoin.admit(view).admit,
    ...(tuning.metaWatchWaitMs !== undefined && { watchWaitMs: tuning.metaWatchWaitMs }),
  });
  const metaView = () => metastorage.view();

  // 3. The replica layer.
  const txMessenger = messenger.as<TxRequest | TxResponse>();
  const request: TxRequestFn = (to, body, requestOptions) => txMessenger.request(to, body, requestOptions);
  const replicas = composeReplicaLayer({
    self,
    clock,
    hlc,
    timers,
    txStates,
    membership,
    request,
    cleanupSender: messengerCleanupSender(txMessenger),
    metaView,
    counters,
    report: errors.report,
    options: options.replicas ?? {},
  });

  // 4. The transaction coordinator.
  const coordinator = new CoordinatorService(
    {
      self,
      hlc,
      timers,
      txStates,
      request,
      metaView,
      metaCurrent: () => metastorage.isCurrent(),
      hints: replicas.hints,
      localReplicas: localReplicaView(replicas.partitions),
      lowWatermark: replicas.lowWatermark,
      clockWithinBound: () => membership.clockWithinBound(),
      counters,
      random,
      reportError: errors.report,
    },
    options.coordinator,
  );

  // 5. The one request table.
  registerTxRequests(
    txMessenger,
    txRequestTable({
      partitions: replicas.partitions,
      resolver: replicas.resolution.resolver,
      inline: replicas.inline,
      lowWatermark: () => replicas.lowWatermark.current(),
      finish: replicas.finish,
      commitPartition: replicas.resolution.commitPartition,
      coordinator,
    }),
  );

  // 6. The partition host and its reconciler.
  const hostFactory = options.partitionHost ?? replicaPartitionHost(options.replicas);
  const partitions = hostFactory({
    self: self.name,
    identity: self,
    clock,
    hlc,
    timers,
    random: random.fork('partitions'),
    messenger,
    membership,
    raft,
    stateMachines,
    logStorage: storage.log,
    storage: storage.engine,
    txStates,
    onLeaderChange: (listener) => leaders.listen(listener),
    onError: errors.report,
    metaView,
    counters,
    replicas,
  });
  const reconciler = new PartitionReconciler(
    self.name,
    partitions,
    errors.report,
    { now: () => hlc.current(), timers },
    () => [...storage.engine.partitions(), ...storage.log.groups()],
  );

  // 6b. Membership and partition moves: this node's record, its peers' addresses, the moves its groups lead.
  const members = new ClusterMembers({
    self: self.name,
    founders: nodes,
    advertise: options.advertise,
    view: metaView,
    initMembers: (founders) => metastorage.initMembers(founders.map((name) => ({ name }))),
    join: (name, address) => metastorage.joinNode(name, address),
    // A member is dialed at its recorded address only if nothing told this node where it is: configured addresses
    // (a proxy, a translated network) stand.
    addPeer:
      options.transport.addPeer === undefined
        ? undefined
        : (name, address) => {
            if (options.transport.knowsPeer?.(name) !== true) options.transport.addPeer?.(name, address);
          },
    setMemberCount: (count) => membership.setMemberCount(count),
    timers,
    // Expected of a node the cluster removed (it learns so before it is stopped): counted, not a failure.
    onRefused: () => counters.add(CLUSTER_MEMBERS_COUNTERS.refusals),
  });
  const mover = new PartitionMover({
    self: self.name,
    view: metaView,
    status: (group) => raft.status(group),
    matchOf: (group, node) => raft.matchOf(group, node),
    proposeConfChange: (group, change) => raft.proposeConfChange(group, change),
    transferLeader: (group, to) => raft.transferLeader(group, to),
    readyToHandOff: (group, pauseMs) => replicas.partitions.get(group)?.prepareHandOff(pauseMs) ?? true,
    report: (group, voters) => metastorage.reportReplicas(group, voters),
    isLive: (name) => name === self.name || membership.liveIdOf(name) !== undefined,
    timers,
    count: (name) => counters.add(name),
    onError: errors.report,
  });

  viewListeners.push(
    () => members.viewChanged(),
    () => mover.viewChanged(),
  );

  // 7. The node and its services.
  const node = new BasaltNode({
    self,
    clock,
    hlc,
    timers,
    random,
    messenger,
    membership,
    stateMachines,
    raft,
    storage,
    txStates,
    metastorage,
    partitions,
    reconciler,
    counters,
    errors,
    leaders,
    heartbeatIntervalMs: tuning.heartbeatIntervalMs ?? LIMITS.nodeHeartbeatIntervalMs,
  });
  node.addService(COORDINATOR_SERVICE, coordinator);
  node.addService(CLUSTER_MEMBERS_SERVICE, clusterMembersService(members, mover));
  for (const factory of options.services ?? []) node.addService(factory.name, factory.create(node));
  return node;
}

/** The service of this node's membership agent and partition mover: running from construction, stopped with it. */
export const CLUSTER_MEMBERS_SERVICE = 'cluster-members';

export const CLUSTER_MEMBERS_COUNTERS = {
  /** The cluster refused this node's membership (its name was removed, or its join was invalid). */
  refusals: 'members.refusals',
} as const;

export interface ClusterMembersService {
  readonly members: ClusterMembers;
  readonly mover: PartitionMover;
  stop(): void;
}

function clusterMembersService(members: ClusterMembers, mover: PartitionMover): ClusterMembersService {
  members.start();
  mover.start();
  return {
    members,
    mover,
    stop: () => {
      members.stop();
      mover.stop();
    },
  };
}

/** What the replica layer uses of the core. */
interface ReplicaLayerComponents {
  readonly self: NodeIdentity;
  readonly clock: Clock;
  readonly hlc: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly membership: Membership;
  readonly request: TxRequestFn;
  readonly cleanupSender: CleanupSender;
  readonly metaView: () => MetaView;
  readonly counters: NodeCounters;
  readonly report: (error: unknown) => void;
  readonly options: ReplicaHostOptions;
}

/** The node's messenger: request timeouts on the node's timers, refusals counted. */
function messengerOf(
  o: NodeOptions,
  hlc: HybridClock,
  timers: OwnedTimers,
  counters: NodeCounters,
): Messenger<MessageBody> {
  const tuning = o.tuning ?? {};
  return new Messenger<MessageBody>({
    transport: o.transport,
    clock: hlc,
    timers,
    ...(tuning.requestTimeoutMs !== undefined && { requestTimeoutMsDefault: tuning.requestTimeoutMs }),
    onClockSkew: () => counters.add(NODE_COUNTERS.clockSkewRefusals),
    // Every body is checked by kind before it is dispatched, so handlers, the Raft core and applies trust its shape.
    bodyChecks: PEER_MESSAGE_CHECKS,
    onMalformed: () => counters.add(NODE_COUNTERS.malformedPeerMessages),
    ...(o.onDiagnostic !== undefined && { onDiagnostic: o.onDiagnostic }),
  });
}

/** Step 3: the replica layer, in its own order (each part from the ones before it). */
function composeReplicaLayer(c: ReplicaLayerComponents): ReplicaLayer {
  const { self, hlc, timers, txStates, counters, request } = c;
  const txTimeout = c.options.txTimeoutMs === undefined ? {} : { txTimeoutMs: c.options.txTimeoutMs };
  // Recovery, resolution and cleanup requests fail under faults (timeouts, lost leaders): counted, not reported.
  const background = (error: unknown): void => {
    if (isExpectedFailure(error)) counters.add(REPLICA_LAYER_COUNTERS.backgroundFailures);
    else c.report(error);
  };
  const partitions = new PartitionDirectory();
  const hints = nodePrimaryHints(c, partitions);
  const retentionMs = c.options.lowWatermarkRetentionMs;
  const floor = () => protectedFloor(c.metaView().protectedTimestamps, hlc.current());
  const lowWatermark = new LowWatermark({ clock: hlc, floor, ...(retentionMs !== undefined && { retentionMs }) });
  const locator = hintsDirectory(hints);
  const peers = membershipPeers(c.membership, self);
  const cleanups = new CleanupDriver({
    counters,
    partitions,
    sender: c.cleanupSender,
    locator,
    timers,
    onError: background,
  });
  const { settle } = new CommittingSettler({ request, locator, timers, counters });
  const finish = new TxFinishHandler({ partitions, cleanups, counters, onError: background, settle });
  const resolution = new ReplicaResolution({
    settle,
    self,
    clock: hlc,
    physicalClock: c.clock,
    timers,
    txStates,
    peers,
    request,
    locator,
    partitions,
    cleanups,
    onError: background,
    counters,
  });
  const inline = new InlineCleanup({ self, peers, request, locator, counters, onError: background });
  const gc = new StorageGcDriver({
    timers,
    partitions: () => partitions.hosted().map((p) => p.mv),
    lowWatermark: () => lowWatermark.current(),
    onError: background,
  });
  const vacuum = new TxStateVacuumDriver({
    timers,
    clock: hlc,
    mapClock: c.clock,
    txStates,
    partitions: () => partitions.hosted().map(vacuumPartitionOf),
    ...txTimeout,
    onError: background,
  });
  const sweep = new TxSweep({
    self,
    clock: hlc,
    timers,
    txStates,
    peers,
    partitions: () => partitions.hosted(),
    orphans: resolution.orphans,
    counters,
    ...txTimeout,
    onError: background,
  });
  return { partitions, hints, lowWatermark, cleanups, finish, resolution, inline, gc, vacuum, sweep, background };
}

/** The node's primary hints over its hosted partitions, the cluster's assignment and its live members. */
function nodePrimaryHints(c: ReplicaLayerComponents, partitions: PartitionDirectory): PrimaryHints {
  return new PrimaryHints(
    // The current assignment first: a partition that moved is no longer where it was started.
    (p) => replicasFromView(c.metaView(), p) ?? partitions.replicasOf(p),
    (p) => localLeaseHolder(partitions.get(p), c.hlc.current()),
    (name) => name === c.self.name || c.membership.liveIdOf(name) !== undefined,
  );
}

/**
 * Raft messages of every group as one-way messages on the node's messenger. Batched (the default), the messages to
 * one peer of all groups that one turn of the event loop produces go together as one `RaftBatch` once the turn's
 * synchronous work is done (a microtask later, so within the same turn and before its socket write), in the order
 * they were sent: one envelope, one check and one dispatch for many, so Raft traffic grows with node pairs rather
 * than with partitions. A lone message goes as a plain `Raft` message. Unbatched, each goes on its own at once.
 */
export function raftTransport(
  messenger: Messenger<NodeMessage>,
  batched: boolean,
  onError: (error: unknown) => void = () => {},
): RaftTransport {
  const pending = new Map<NodeName, { parts: RaftPart[]; bytes: number }>();
  let flushing = false;
  const sendBatch = (to: NodeName, parts: readonly RaftPart[]): void => {
    if (parts.length === 1) messenger.send(to, { kind: 'Raft', ...parts[0]! });
    else if (parts.length > 1) messenger.send(to, { kind: 'RaftBatch', messages: parts });
  };
  const flush = (): void => {
    flushing = false;
    // A send that throws (a message too large for a frame) loses only its batch, which Raft sends again; it must
    // not escape the microtask, where nothing would catch it.
    for (const [to, batch] of pending) {
      try {
        sendBatch(to, batch.parts);
      } catch (error) {
        onError(error);
      }
    }
    pending.clear();
  };
  return {
    send: (to, envelope) => {
      const part: RaftPart = { group: envelope.group, message: envelope.message };
      if (!batched) {
        messenger.send(to, { kind: 'Raft', ...part });
        return;
      }
      const bytes = raftDataBytes(part.message);
      let batch = pending.get(to);
      // A batch stays well under a frame: one that this message would fill goes now, in order, before it.
      const full =
        batch !== undefined &&
        (batch.parts.length >= LIMITS.raftBatchMessagesMax || batch.bytes + bytes > LIMITS.raftBatchBytesMax);
      if (batch !== undefined && full) {
        sendBatch(to, batch.parts);
        batch = undefined;
      }
      if (batch === undefined) pending.set(to, { parts: [part], bytes });
      else {
        batch.parts.push(part);
        batch.bytes += bytes;
      }
      if (flushing) return;
      flushing = true;
      queueMicrotask(flush);
    },
    setHandler: (handler) => {
      messenger.handle('Raft', (body, from) => {
        handler(from.name, { group: body.group, message: body.message });
        return undefined;
      });
      messenger.handle('RaftBatch', (body, from) => {
        for (const part of body.messages) handler(from.name, part);
        return undefined;
      });
    },
  };
}

/** The entry or snapshot bytes a Raft message carries (what may make it large; the rest is a few dozen bytes). */
function raftDataBytes(message: RaftPart['message']): number {
  if (message.kind === 'Append') return message.entries.reduce((sum, e) => sum + e.data.length, 0);
  if (message.kind === 'Snapshot') return message.snapshot.data.length;
  return 0;
}

/** The roles named in `options` (a harness's or a command's options), without its other fields. */
export function nodeRoles(options: NodeRoles): NodeRoles {
  return {
    ...(options.partitionHost !== undefined && { partitionHost: options.partitionHost }),
    ...(options.replicas !== undefined && { replicas: options.replicas }),
    ...(options.coordinator !== undefined && { coordinator: options.coordinator }),
    ...(options.services !== undefined && { services: options.services }),
  };
}
