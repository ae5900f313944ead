/**
 * The simulated cluster environment: the harness's nodes on one SimWorld (virtual time, seeded randomness, the
 * simulated network with the wire codec, per-node clocks), so a whole cluster run replays from its seed.
 *
 * Storage is in memory and plays the disk: each node name keeps one storage engine and one Raft log storage across
 * incarnations. A crash is a power loss: the incarnation is killed (nothing of it acts again), the world tears it down,
 * and the storage engine drops every write not yet flushed; the Raft log storage is durable on every write (it models
 * a log that fsyncs before it acknowledges).
 *
 * Driving: awaiting anything under the simulator needs the scheduler to run. `drive(promise)` runs the world until
 * the promise settles; drives issued while one runs join it; a promise that does not settle within `driveTimeoutMs`
 * of virtual time, or a world with nothing left to run, fails every pending drive with the seed.
 */
import type { NodeName } from '../core/ids.js';
import type { Timers } from '../env/timers.js';
import { Cluster, type ClusterEnvironment, defaultNodeNames, type SimulationControls } from '../harness/cluster.js';
import {
  type ClusterNetwork,
  checkFilter,
  type DroppedMessages,
  type HeldMessages,
  matchesPayload,
  type NetworkFilter,
  unbatched,
} from '../harness/network-filters.js';
import { decode, encode } from '../net/codec.js';
import type { BasaltNode, NodeStopOptions, NodeTuning } from '../node/basalt-node.js';
import { type NodeRoles, nodeRoles, startNode } from '../node/compose.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import { SimulationError } from './errors.js';
import type { MessageFilter, SimNetwork, SimNetworkOptions } from './network.js';
import { type SimNodeEnv, SimWorld } from './world.js';

/** The nodes' roles (partition host, coordinator and replica tuning, services) are the defaults unless named. */
export interface SimClusterOptions extends NodeRoles {
  readonly seed: string | number;
  readonly names: readonly NodeName[];
  readonly tuning?: NodeTuning;
  readonly network?: SimNetworkOptions;
  /** Virtual time one drive may take before it fails (default 120 s). */
  readonly driveTimeoutMs?: number;
  /** Recent scheduler events kept for failure reports (default none; the trace hash covers every event anyway). */
  readonly traceMax?: number;
}

interface Disk {
  readonly engine: MemoryStorageEngine;
  readonly log: MemoryLogStorage;
}

interface Deferred {
  readonly resolve: (node: BasaltNode) => void;
  readonly reject: (error: unknown) => void;
}

interface DriveEntry {
  done: boolean;
  /** Virtual time by which this drive must have settled. */
  readonly deadlineMs: number;
}

/** Virtual time one drive may take (counted from when it started) before it fails. */
const DRIVE_TIMEOUT_MS_DEFAULT = 120_000;

export class SimClusterEnvironment implements ClusterEnvironment {
  readonly world: SimWorld;
  readonly network: ClusterNetwork;
  readonly timers: Timers;
  readonly simulation: SimulationControls;
  private readonly options: SimClusterOptions;
  private readonly driveTimeoutMs: number;
  private readonly disks = new Map<NodeName, Disk>();
  private readonly starting = new Map<NodeName, Deferred>();
  private readonly waiting = new Set<DriveEntry>();
  private loop: Promise<void> | undefined;

  constructor(options: SimClusterOptions) {
    this.options = options;
    this.driveTimeoutMs = options.driveTimeoutMs ?? DRIVE_TIMEOUT_MS_DEFAULT;
    this.world = new SimWorld({
      seed: options.seed,
      network: { codec: { encode, decode }, split: unbatched, ...options.network },
      ...(options.traceMax !== undefined && { traceMax: options.traceMax }),
    });
    this.network = simNetworkControls(this.world.network);
    this.timers = this.world.scheduler.timers('harness');
    const world = this.world;
    this.simulation = {
      seed: options.seed,
      traceHash: () => world.traceHash(),
      nowMs: () => world.nowMs(),
    };
  }

  startNode(name: NodeName): Promise<BasaltNode> {
    return new Promise<BasaltNode>((resolve, reject) => {
      this.starting.set(name, { resolve, reject });
      try {
        if (this.world.nodeNames().includes(name)) this.world.restart(name);
        else this.world.addNode(name, (env) => this.build(env));
      } catch (error) {
        this.starting.delete(name);
        reject(error);
      }
    });
  }

  async crashNode(name: NodeName, node: BasaltNode): Promise<void> {
    void node.kill();
    this.world.crash(name, 'power-loss');
    this.disks.get(name)?.engine.crash();
  }

  async stopNode(name: NodeName, node: BasaltNode, options?: NodeStopOptions): Promise<void> {
    await node.stop(options);
    if (this.world.isUp(name)) this.world.shutdown(name);
  }

  setClockOffset(name: NodeName, offsetMs: number): void {
    this.world.setClockOffset(name, offsetMs);
  }

  monotonicMs(): number {
    return this.world.nowMs();
  }

  async close(): Promise<void> {}

  drive<T>(promise: Promise<T>): Promise<T> {
    // Each drive has its own deadline, counted from when it joined: drives that join a run already under way (the
    // next runFor of a test, awaited while the previous one settles) get a full budget of their own.
    const entry: DriveEntry = { done: false, deadlineMs: this.world.nowMs() + this.driveTimeoutMs };
    this.waiting.add(entry);
    const settle = (): void => {
      entry.done = true;
    };
    promise.then(settle, settle);
    this.loop ??= this.runLoop();
    const loop = this.loop;
    return new Promise<T>((resolve, reject) => {
      promise.then(resolve, reject);
      loop.catch(reject);
    });
  }

  private async runLoop(): Promise<void> {
    try {
      // Drives that join while the world runs are picked up by the next round of this loop. A round stops as soon as
      // any drive settles, so the next one runs to the nearest deadline of the drives still waiting.
      for (;;) {
        for (const entry of this.waiting) if (entry.done) this.waiting.delete(entry);
        if (this.waiting.size === 0) return;
        const pending = [...this.waiting];
        const nearestMs = Math.min(...pending.map((e) => e.deadlineMs));
        if (this.world.nowMs() >= nearestMs) {
          throw new SimulationError(
            this.options.seed,
            `an awaited promise did not settle within ${this.driveTimeoutMs} ms of virtual time`,
          );
        }
        const anySettled = (): boolean => {
          for (const e of this.waiting) if (e.done) return true;
          return false;
        };
        const result = await this.world.run({ until: anySettled, untilMs: nearestMs });
        if (result.stop === 'idle' && !anySettled()) {
          throw new SimulationError(
            this.options.seed,
            'nothing is left to run but an awaited promise is unsettled (deadlock)',
          );
        }
      }
    } catch (error) {
      this.waiting.clear();
      throw error;
    } finally {
      this.loop = undefined;
    }
  }

  private build(env: SimNodeEnv): Promise<{ stop(): void }> {
    const deferred = this.starting.get(env.name);
    this.starting.delete(env.name);
    const started = startNode({
      ...nodeRoles(this.options),
      transport: env.transport,
      clock: env.clock,
      timers: env.timers,
      random: env.random,
      storage: this.disk(env.name),
      nodes: this.options.names,
      join: !this.options.names.includes(env.name),
      ...(this.options.tuning !== undefined && { tuning: this.options.tuning }),
      onError: env.reportError,
    });
    started.then(
      (node) => deferred?.resolve(node),
      (error: unknown) => deferred?.reject(error),
    );
    return started.then(() => ({ stop: () => {} }));
  }

  private disk(name: NodeName): Disk {
    let disk = this.disks.get(name);
    if (disk === undefined) {
      disk = { engine: new MemoryStorageEngine({ trackUnflushed: true }), log: new MemoryLogStorage() };
      this.disks.set(name, disk);
    }
    return disk;
  }
}

/** The harness filters on the simulated network: kind and group are matched on the message body. */
function simNetworkControls(net: SimNetwork): ClusterNetwork {
  const toSim = (filter: NetworkFilter): MessageFilter => {
    checkFilter(filter);
    return {
      ...(filter.from !== undefined && { from: filter.from }),
      ...(filter.to !== undefined && { to: filter.to }),
      ...((filter.kind !== undefined || filter.group !== undefined) && {
        match: (payload: unknown) => matchesPayload(filter, payload),
      }),
    };
  };
  return {
    hold(filter: NetworkFilter): HeldMessages {
      const handle = net.hold(toSim(filter));
      return {
        get heldCount() {
          return handle.heldCount;
        },
        release: () => handle.release(),
      };
    },
    drop(filter: NetworkFilter): DroppedMessages {
      const handle = net.drop(toSim(filter));
      return {
        get droppedCount() {
          return handle.droppedCount;
        },
        undo: () => handle.undo(),
      };
    },
    count: (filter: NetworkFilter = {}) => net.count(toSim(filter)),
  };
}

/** Starts a simulated cluster: nodes n1..nN (or the given names) on one seeded world. */
export async function startSimulatedCluster(
  options: Omit<SimClusterOptions, 'names'> & { readonly names?: readonly NodeName[]; readonly nodes?: number },
): Promise<Cluster> {
  const names = options.names ?? defaultNodeNames(options.nodes ?? 3);
  return Cluster.start(new SimClusterEnvironment({ ...options, names }), names);
}
