/**
 * The cluster harness (DESIGN §4): in-process nodes n1..nN over an environment that supplies their clocks, timers,
 * transports and storage: real time with an in-memory or TCP transport (`real-cluster.ts`), or the deterministic
 * simulator (`src/sim/cluster.ts`). The harness only composes: it starts and crashes node incarnations, answers
 * `placement` and `tables` from the freshest metastorage state among running nodes, and waits for conditions.
 *
 * Under the simulator time only moves while the scheduler runs, so every async harness method runs through
 * `environment.drive(promise)`, which runs virtual time until the promise settles (on real time it is the identity).
 * Other async work a test awaits (e.g. a node's API) goes through `cluster.drive(promise)` the same way, and
 * `cluster.runFor(ms)` lets time pass. Concurrent drives share one run of the scheduler.
 */

import type { MetaView, TableDescriptor, TableOptions } from '../cluster/metastorage-state.js';
import { BasaltError } from '../core/errors.js';
import type { NodeId, NodeName, PartitionId, TxId } from '../core/ids.js';
import { META_GROUP, partitionIndexOf, tableIdOf, tablePartitionId } from '../core/partitioning.js';
import { sleep, type Timers } from '../env/timers.js';
import type { BasaltNode, NodeMetrics, NodeStopOptions } from '../node/basalt-node.js';
import type { TxStateView } from '../tx/core/tx-state-map.js';
import type { ClusterNetwork } from './network-filters.js';

/** What the simulator adds to a cluster: its seed and trace. */
/** The controls of a simulated cluster (`cluster.simulation`). */
export interface SimulationControls {
  /** The seed the run derives from. */
  readonly seed: string | number;
  /** Digest of every event run so far: the same seed must give the same hash. */
  traceHash(): string;
  /** Virtual milliseconds since the Unix epoch. */
  nowMs(): number;
}

export interface ClusterEnvironment {
  readonly network: ClusterNetwork;
  /** Timers of the harness itself (not of any node), used for waiting. */
  readonly timers: Timers;
  readonly simulation?: SimulationControls;
  /** Starts a new incarnation of `name` (fresh ephemeral id) on its durable storage. */
  startNode(name: NodeName): Promise<BasaltNode>;
  /** Crash: the incarnation stops acting at once; what its storage keeps is the environment's model. */
  crashNode(name: NodeName, node: BasaltNode): Promise<void>;
  /** Graceful stop of one incarnation (handing its leases over first unless the whole cluster stops). */
  stopNode(name: NodeName, node: BasaltNode, options?: NodeStopOptions): Promise<void>;
  setClockOffset(name: NodeName, offsetMs: number): void;
  /** Settles `promise`: identity on real time; runs virtual time until it settles under the simulator. */
  drive<T>(promise: Promise<T>): Promise<T>;
  monotonicMs(): number;
  /** Releases what the environment holds (network, temp state) after every node stopped. */
  close(): Promise<void>;
}

/** The harness view of one node (DESIGN §4 `cluster.node(name)`). */
/** One node of a harness cluster, as `cluster.node(name)` shows it. */
export interface ClusterNode {
  /** The node's name (n1, n2, …). */
  readonly name: NodeName;
  /** Ephemeral id of the running incarnation, or of the last one while the node is down. */
  readonly ephemeralId: NodeId;
  /** Whether the node runs now. */
  readonly up: boolean;
  /** This node's tx state map entry; undefined when it has none (or is down: the map is volatile). */
  txState(txId: TxId): TxStateView | undefined;
  /** The running incarnation's metrics. */
  metrics(): NodeMetrics;
}

/** Where a key lives: `cluster.placement(table, key)`. */
export interface Placement {
  /** The key's partition. */
  readonly partition: PartitionId;
  /** The partition's primary if known: its leaseholder (with a partition host without leases, its Raft leader). */
  readonly primary: NodeName | undefined;
  /** The nodes holding a replica of the partition. */
  readonly replicas: readonly NodeName[];
}

/** How long a harness wait waits. */
export interface WaitOptions {
  /** Give up with TIMEOUT after this long. */
  readonly timeoutMs?: number;
  /** Named in the TIMEOUT error. */
  readonly what?: string;
}

const POLL_MS = 10;

/** n1..n<count>. */
export function defaultNodeNames(count: number): NodeName[] {
  if (!Number.isSafeInteger(count) || count < 1) {
    throw new BasaltError('INVALID_ARGUMENT', 'nodes must be a positive integer', { nodes: count });
  }
  return Array.from({ length: count }, (_, i) => `n${i + 1}` as NodeName);
}
const READY_TIMEOUT_MS = 30_000;
/** How long a harness waits for partitions to move (a join, a removal, a rebalance). */
const MOVE_TIMEOUT_MS = 120_000;

/** Builds the client whose coordinator is node `node` (the client layer supplies it; see `startCluster`). */
export type ClientFactory<C> = (cluster: Cluster<C>, node: NodeName) => C;

/**
 * An in-process cluster (`startCluster`): its nodes, tables and network, with the controls of a chaos experiment
 * (crash, restart, add and remove nodes, hold and drop messages, skew clocks). `C` is the type of its clients.
 */
export class Cluster<C = never> {
  /** The current members, in the order they came: the founders, then the nodes added (and not removed). */
  private readonly members: NodeName[];
  /** Every name this cluster ever had (a removed name is not given again). */
  private readonly everNamed = new Set<NodeName>();
  /** Holds, drops and counts the messages between the nodes. */
  readonly network: ClusterNetwork;
  /** The simulation's controls; undefined on a real-time cluster. */
  readonly simulation: SimulationControls | undefined;
  private readonly env: ClusterEnvironment;
  private readonly running = new Map<NodeName, BasaltNode>();
  private readonly lastIds = new Map<NodeName, NodeId>();
  private readonly busy = new Set<NodeName>();
  private readonly clientFactory: ClientFactory<C> | undefined;
  private stopped = false;

  private constructor(env: ClusterEnvironment, names: readonly NodeName[], clientFactory?: ClientFactory<C>) {
    this.env = env;
    this.clientFactory = clientFactory;
    this.members = [...names];
    for (const n of names) this.everNamed.add(n);
    this.network = env.network;
    this.simulation = env.simulation;
  }

  /** Starts every node and waits until the metastorage has a leader and every node knows its state. */
  static async start<C = never>(
    env: ClusterEnvironment,
    names: readonly NodeName[],
    clientFactory?: ClientFactory<C>,
  ): Promise<Cluster<C>> {
    if (names.length === 0 || new Set(names).size !== names.length) {
      throw new BasaltError('INVALID_ARGUMENT', 'a cluster needs distinct node names', { names });
    }
    const cluster = new Cluster<C>(env, names, clientFactory);
    try {
      await env.drive(
        (async () => {
          for (const name of names) await cluster.launch(name);
          await cluster.untilReady();
        })(),
      );
    } catch (error) {
      // Leave nothing running behind a failed start (listening sockets, open LMDB environments).
      await cluster.stop().catch(() => {});
      throw error;
    }
    return cluster;
  }

  /** The nodes that are members now (DESIGN §4 `cluster.nodes`): founders and added nodes, minus removed ones. */
  get nodes(): readonly NodeName[] {
    return [...this.members];
  }

  /**
   * Starts a new node (default name: the next free `n<k>`) that joins the running cluster, and resolves once the
   * metastorage lists it as an active member; partitions move onto it from then on (`rebalanced` waits for them).
   */
  addNode(name?: string): Promise<NodeName> {
    const n = (name ?? this.nextName()) as NodeName;
    if (this.everNamed.has(n))
      throw new BasaltError('ALREADY_EXISTS', `node name ${n} is or was in use in this cluster`);
    this.everNamed.add(n);
    this.members.push(n);
    const joined = this.exclusive(n, async () => {
      await this.launch(n);
      await this.poll(() => this.isActiveMember(n), { what: `${n} recorded as a member` });
      await this.untilCaughtUp(n);
    });
    return this.env.drive(joined.then(() => n));
  }

  /**
   * Removes a node from the cluster. Gracefully (default): its replicas move to the other members first, then it is
   * stopped. `dead`: it is crashed if still running, and its replicas are rebuilt on the others from the survivors.
   * Resolves once the metastorage no longer lists it (every replica it held is elsewhere).
   */
  removeNode(name: string, options: { readonly dead?: boolean } = {}): Promise<void> {
    const n = this.known(name);
    const dead = options.dead === true;
    return this.env.drive(
      (async () => {
        if (dead && this.running.has(n)) await this.halt(n, (x, node) => this.env.crashNode(x, node));
        const via = this.anyNode(n);
        await via.metastorage.removeNode(n, { dead });
        await this.poll(() => !this.freshestView().members?.some((m) => m.name === n), {
          what: `${n} removed (its replicas moved away)`,
          timeoutMs: MOVE_TIMEOUT_MS,
        });
        if (this.running.has(n)) await this.halt(n, (x, node) => this.env.stopNode(x, node));
        this.members.splice(this.members.indexOf(n), 1);
      })(),
    );
  }

  /**
   * Resolves once no partition is moving: the metastorage lists no target (nor one of its own group, whose voters all
   * run it), and every partition has its table's replica count (or every member, if fewer) on running nodes that host
   * it.
   */
  rebalanced(options: WaitOptions = {}): Promise<void> {
    return this.waitFor(() => this.isRebalanced(), {
      what: 'partitions rebalanced',
      timeoutMs: MOVE_TIMEOUT_MS,
      ...options,
    });
  }

  /** Runs `promise` to completion (drives virtual time under the simulator). */
  drive<T>(promise: Promise<T>): Promise<T> {
    return this.env.drive(promise);
  }

  /** Lets `ms` of (virtual or real) time pass. */
  runFor(ms: number): Promise<void> {
    return this.env.drive(sleep(this.env.timers, ms));
  }

  /** Waits until `condition()` holds; TIMEOUT after `timeoutMs` (default 30 s). */
  waitFor(condition: () => boolean, options: WaitOptions = {}): Promise<void> {
    return this.env.drive(this.poll(condition, options));
  }

  /** The node `name`. NOT_FOUND if the cluster never had it. */
  node(name: string): ClusterNode {
    const n = this.known(name);
    const cluster = this;
    return {
      name: n,
      get ephemeralId(): NodeId {
        return cluster.lastIds.get(n)!;
      },
      get up(): boolean {
        return cluster.running.has(n);
      },
      txState: (txId) => cluster.running.get(n)?.txState(txId),
      metrics: () => cluster.require(n).metrics(),
    };
  }

  /** The running incarnation of `name` (for layers built on the node: coordinator, client). */
  basaltNode(name: string): BasaltNode | undefined {
    return this.running.get(this.known(name));
  }

  /** Creates a table and waits until each of its partitions runs on its live replicas and has a primary. */
  createTable(name: string, options: TableOptions): Promise<TableDescriptor> {
    return this.env.drive(
      (async () => {
        const table = await this.anyNode().metastorage.createTable(name, options);
        await this.poll(() => this.tableReady(table), { what: `partitions of table ${name} ready` });
        return table;
      })(),
    );
  }

  /** Drops a table and waits until no running node's view lists it (its partitions retire after a grace). */
  dropTable(name: string): Promise<void> {
    return this.env.drive(
      (async () => {
        const table = await this.anyNode().metastorage.dropTable(name);
        // Its partitions keep serving until the drop's grace has passed (see metastorage-state): wait for the metadata.
        await this.poll(() => this.tableGone(table), { what: `table ${name} gone from every running node's view` });
      })(),
    );
  }

  /** The tables, as this cluster's freshest metastorage view lists them. */
  tables(): TableDescriptor[] {
    return [...this.freshestView().tables];
  }

  /** Where `key` of `table` lives: partition by the shared key hash, replicas from the metastorage. */
  placement(tableName: string, key: string): Placement {
    const view = this.freshestView();
    const table = view.tables.find((t) => t.name === tableName);
    if (table === undefined) throw new BasaltError('UNKNOWN_TABLE', `no table named ${tableName}`);
    const partition = tablePartitionId(table.id, partitionIndexOf(key, table.partitions));
    const replicas = (view.assignments.find(([p]) => p === partition)?.[1] ?? []) as NodeName[];
    return { partition, primary: this.primaryOf(partition, replicas), replicas };
  }

  /** Every partition's replicas, from the freshest metastorage state among running nodes (moves included). */
  assignments(): ReadonlyMap<PartitionId, readonly NodeName[]> {
    return new Map(this.freshestView().assignments.map(([p, r]) => [p as PartitionId, r as NodeName[]]));
  }

  /** The Raft leader of `group` among running nodes (a node that is leader in the highest term). */
  leaderOf(group: PartitionId): NodeName | undefined {
    let best: { name: NodeName; term: number } | undefined;
    for (const [name, node] of this.running) {
      const s = node.raft.status(group);
      if (s?.role === 'leader' && (best === undefined || s.term > best.term)) best = { name, term: s.term };
    }
    return best?.name;
  }

  /** Crash: volatile state is lost; durable data stays for the next start. */
  stopNode(name: string): Promise<void> {
    return this.halt(name, (n, node) => this.env.crashNode(n, node));
  }

  /** Graceful stop of one node (its partitions stop, storage is closed cleanly); `startNode` brings it back. */
  shutdownNode(name: string): Promise<void> {
    return this.halt(name, (n, node) => this.env.stopNode(n, node));
  }

  /** Takes a running node out of the cluster, then ends its incarnation with `end` (a crash or a graceful stop). */
  private halt(name: string, end: (name: NodeName, node: BasaltNode) => Promise<void>): Promise<void> {
    const n = this.known(name);
    return this.env.drive(
      this.exclusive(n, async () => {
        const node = this.running.get(n);
        if (node === undefined) throw new BasaltError('INVALID_ARGUMENT', `node ${n} is not running`);
        this.running.delete(n);
        await end(n, node);
      }),
    );
  }

  /** Restart: a new incarnation with a new ephemeral id on the same durable data. */
  startNode(name: string): Promise<void> {
    const n = this.known(name);
    return this.env.drive(
      this.exclusive(n, async () => {
        if (this.running.has(n)) throw new BasaltError('INVALID_ARGUMENT', `node ${n} is already running`);
        await this.launch(n);
        await this.untilCaughtUp(n);
      }),
    );
  }

  /** Shifts a node's physical clock (skew tests). */
  setClockOffset(name: string, offsetMs: number): void {
    if (!Number.isFinite(offsetMs)) throw new BasaltError('INVALID_ARGUMENT', 'offsetMs must be finite');
    this.env.setClockOffset(this.known(name), offsetMs);
  }

  /** A client whose coordinator is node `name` (default: the first node); needs the client layer's factory. */
  client(name?: string): C {
    if (this.clientFactory === undefined) {
      throw new BasaltError('NOT_IMPLEMENTED', 'this cluster was started without a client layer');
    }
    const first = this.nodes[0];
    if (first === undefined) throw new BasaltError('INTERNAL', 'a cluster has at least one node');
    return this.clientFactory(this, name === undefined ? first : this.known(name));
  }

  /** Stops every node gracefully and releases the environment. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    const nodes = [...this.running];
    this.running.clear();
    // Every node stops: there is nobody to hand leases over to.
    const options = { handOver: false };
    await this.env.drive(Promise.all(nodes.map(([name, node]) => this.env.stopNode(name, node, options))));
    await this.env.close();
  }

  // ------------------------------------------------------------------ internals

  private async launch(name: NodeName): Promise<void> {
    const node = await this.env.startNode(name);
    this.running.set(name, node);
    this.lastIds.set(name, node.ephemeralId);
  }

  /**
   * A restarted node serves clients only once its metastorage view is as new as the other running nodes' (else its
   * coordinator would answer UNKNOWN_TABLE for a table created while it was down, or right before it restarted).
   */
  private async untilCaughtUp(name: NodeName): Promise<void> {
    const others = [...this.running.entries()].filter(([n]) => n !== name).map(([, node]) => node);
    const target = Math.max(0, ...others.map((node) => node.metastorage.revision));
    await this.poll(() => (this.running.get(name)?.metastorage.revision ?? 0) >= target, {
      what: `metastorage view of ${name} caught up to revision ${target}`,
    });
  }

  private async untilReady(): Promise<void> {
    await this.poll(
      () =>
        [...this.running.values()].every((n) => n.metastorage.revision > 0) && this.leaderOf(META_GROUP) !== undefined,
      { timeoutMs: READY_TIMEOUT_MS, what: 'metastorage leader elected and known to every node' },
    );
  }

  private async poll(condition: () => boolean, options: WaitOptions): Promise<void> {
    const timeoutMs = options.timeoutMs ?? READY_TIMEOUT_MS;
    const deadlineMs = this.env.monotonicMs() + timeoutMs;
    while (!condition()) {
      if (this.env.monotonicMs() >= deadlineMs) {
        throw new BasaltError('TIMEOUT', `${options.what ?? 'condition'} did not hold within ${timeoutMs} ms`, {
          ...(this.simulation !== undefined && { seed: this.simulation.seed }),
        });
      }
      await sleep(this.env.timers, POLL_MS);
    }
  }

  /** One start or stop of a node at a time. */
  private async exclusive(name: NodeName, fn: () => Promise<void>): Promise<void> {
    if (this.busy.has(name)) throw new BasaltError('INVALID_ARGUMENT', `node ${name} is already starting or stopping`);
    this.busy.add(name);
    try {
      await fn();
    } finally {
      this.busy.delete(name);
    }
  }

  private tableReady(table: TableDescriptor): boolean {
    for (let i = 0; i < table.partitions; i++) {
      const partition = tablePartitionId(table.id, i);
      const hosts = [...this.running.values()].filter((n) => n.hostedPartitions().has(partition));
      const assigned = this.replicasOf(partition);
      if (assigned === undefined) return false;
      const liveAssigned = assigned.filter((name) => this.running.has(name));
      if (hosts.length < liveAssigned.length) return false;
      // A partition without a live majority cannot elect; it becomes ready when its nodes return.
      if (liveAssigned.length * 2 <= assigned.length) continue;
      // The host decides what "primary" means (Raft leader for the placeholder, leaseholder for replicas).
      if (this.primaryOf(partition, assigned) === undefined) return false;
    }
    return true;
  }

  private tableGone(table: TableDescriptor): boolean {
    return [...this.running.values()].every((node) => !node.metastorage.tables().some((t) => t.id === table.id));
  }

  private replicasOf(partition: PartitionId): readonly NodeName[] | undefined {
    return this.freshestView().assignments.find(([p]) => p === partition)?.[1] as NodeName[] | undefined;
  }

  private primaryOf(partition: PartitionId, replicas: readonly NodeName[]): NodeName | undefined {
    for (const name of replicas) {
      const node = this.running.get(name);
      if (node !== undefined && node.partitions.primaryOf?.(partition) === name) return name;
    }
    return undefined;
  }

  private freshestView(): MetaView {
    let best: BasaltNode | undefined;
    for (const node of this.running.values()) {
      if (best === undefined || node.metastorage.revision > best.metastorage.revision) best = node;
    }
    if (best === undefined) throw new BasaltError('NODE_UNAVAILABLE', 'no node of the cluster is running');
    return best.metastorage.view();
  }

  /** A running node to send metastorage commands through: the first member by name (other than `except`). */
  private anyNode(except?: NodeName): BasaltNode {
    for (const name of this.members) {
      const node = name === except ? undefined : this.running.get(name);
      if (node !== undefined) return node;
    }
    throw new BasaltError('NODE_UNAVAILABLE', 'no node of the cluster is running');
  }

  private nextName(): NodeName {
    for (let k = this.everNamed.size + 1; ; k++) {
      const name = `n${k}` as NodeName;
      if (!this.everNamed.has(name)) return name;
    }
  }

  private isActiveMember(name: NodeName): boolean {
    return this.freshestView().members?.some((m) => m.name === name && m.state === 'active') === true;
  }

  private isRebalanced(): boolean {
    const view = this.freshestView();
    if ((view.targets ?? []).length > 0 || view.metaTarget !== undefined) return false;
    // Every metastorage voter runs the group.
    for (const m of view.members ?? []) {
      if (m.meta === true && this.running.get(m.name as NodeName)?.metastorage.isMember !== true) return false;
    }
    const active = (view.members ?? []).filter((m) => m.state === 'active').length;
    const replicasOf = new Map(view.tables.map((t) => [t.id, t.replicas]));
    for (const [partition, replicas] of view.assignments) {
      const want = replicasOf.get(tableIdOf(partition as PartitionId) ?? -1);
      if (want === undefined) continue;
      if (active > 0 && replicas.length !== Math.min(want, active)) return false;
      for (const name of replicas) {
        if (
          !this.running
            .get(name as NodeName)
            ?.hostedPartitions()
            .has(partition as PartitionId)
        )
          return false;
      }
    }
    return true;
  }

  private require(name: NodeName): BasaltNode {
    const node = this.running.get(name);
    if (node === undefined) throw new BasaltError('NODE_UNAVAILABLE', `node ${name} is down`);
    return node;
  }

  private known(name: string): NodeName {
    if (!this.members.includes(name as NodeName)) {
      throw new BasaltError('INVALID_ARGUMENT', `no node named ${name} in this cluster`, { nodes: this.members });
    }
    return name as NodeName;
  }
}
