/**
 * The real-time cluster environment: nodes in this process on the event loop's timers and the process clock (one
 * RealClock per node, so skew tests can shift one), over an in-memory network or TCP on loopback, with in-memory
 * storage (kept per node name across restarts: the process plays the disk) or on-disk storage per node under
 * `dataDir/<name>` (a segmented Raft log and an LMDB state environment, see `openNodeStorage`). Every node's
 * transport is wrapped by the cluster's network filters.
 *
 * Crash model: `crashNode` kills the incarnation (timers retired, Raft stopped, connections closed) and then closes
 * its storage; what the log synced and LMDB committed stays, as after `kill -9`. A TCP node restarts on the port it
 * had, so its peers' reconnect loops find it.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { RootDatabase } from 'lmdb';
import { BasaltError } from '../core/errors.js';
import { freshNodeId, type NodeName, type nodeId } from '../core/ids.js';
import { RealClock } from '../env/real-clock.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import type { Transport } from '../env/transport.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { TcpTransport } from '../net/tcp-transport.js';
import type { BasaltNode, NodeStopOptions, NodeStorage, NodeTuning } from '../node/basalt-node.js';
import { type NodeRoles, nodeRoles, startNode } from '../node/compose.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { SegmentedLogStorage } from '../raft/segmented-log-storage.js';
import { openLmdbEnvironment } from '../storage/lmdb-environment.js';
import { beginStateSession, type StateOpening } from '../storage/state-session.js';
import { LmdbStorageEngine, MemoryStorageEngine } from '../storage/storage-engine.js';
import type { ClusterEnvironment } from './cluster.js';
import { MemoryNetwork } from './memory-transport.js';
import { NetworkFilters } from './network-filters.js';

/** The nodes' roles (partition host, coordinator and replica tuning, services) are the defaults unless named. */
export interface RealClusterOptions extends NodeRoles {
  readonly names: readonly NodeName[];
  readonly transport?: 'memory' | 'tcp';
  /** On-disk storage under `dataDir/<name>` (see `openNodeStorage`); in-memory storage when absent. */
  readonly dataDir?: string;
  /** Sync every Raft log batch (default true). */
  readonly sync?: boolean;
  readonly host?: string;
  /** TCP: node i listens on basePort + i (default 0: ephemeral ports). */
  readonly basePort?: number;
  readonly tuning?: NodeTuning;
  /** Failures of nodes' background work. */
  readonly onError?: (name: NodeName, error: unknown) => void;
  /** TCP: mutual TLS on the peer ports, with each node's CA, certificate and key (peer-tls.ts); plain TCP without. */
  readonly peerTls?: (name: NodeName) => PeerTlsMaterial;
}

interface MemoryDisk {
  readonly engine: MemoryStorageEngine;
  readonly log: MemoryLogStorage;
}

export class RealClusterEnvironment implements ClusterEnvironment {
  readonly network = new NetworkFilters();
  readonly timers = new RealTimers();
  private readonly options: RealClusterOptions;
  private readonly clocks = new Map<NodeName, RealClock>();
  private readonly random = new RealRandom();
  private readonly memory: MemoryNetwork | undefined;
  private readonly disks = new Map<NodeName, MemoryDisk>();
  private readonly tcp = new Map<NodeName, TcpTransport>();
  private readonly ports = new Map<NodeName, number>();
  private readonly addresses = new Map<NodeName, string>();

  constructor(options: RealClusterOptions) {
    this.options = options;
    this.memory = options.transport === 'tcp' ? undefined : new MemoryNetwork({ timers: this.timers });
    for (const name of options.names) this.clocks.set(name, new RealClock());
  }

  /** The TCP address of each node that has listened, as 'host:port'. */
  address(name: NodeName): string | undefined {
    return this.addresses.get(name);
  }

  async startNode(name: NodeName): Promise<BasaltNode> {
    const self = { name, id: freshNodeId(this.random.uuid()) };
    // Storage first: once the transport is up, peers reach this node, and it must answer them without a pause.
    const storage = await this.openStorage(name);
    let transport: Transport;
    try {
      transport = await this.openTransport(self);
    } catch (error) {
      await storage.close?.();
      throw error;
    }
    try {
      return await startNode({
        ...nodeRoles(this.options),
        transport: this.network.wrap(transport),
        clock: this.clock(name),
        timers: new RealTimers(),
        random: this.random,
        storage,
        nodes: this.options.names,
        join: !this.options.names.includes(name),
        ...(this.address(name) !== undefined && { advertise: this.address(name)! }),
        ...(this.options.tuning !== undefined && { tuning: this.options.tuning }),
        onError: (error) => this.options.onError?.(name, error),
      });
    } catch (error) {
      await transport.close();
      await storage.close?.();
      throw error;
    }
  }

  async crashNode(name: NodeName, node: BasaltNode): Promise<void> {
    await node.kill();
    this.tcp.delete(name);
    await node.closeStorage();
  }

  async stopNode(name: NodeName, node: BasaltNode, options?: NodeStopOptions): Promise<void> {
    await node.stop(options);
    this.tcp.delete(name);
  }

  setClockOffset(name: NodeName, offsetMs: number): void {
    this.clock(name).offsetMs = offsetMs;
  }

  drive<T>(promise: Promise<T>): Promise<T> {
    return promise;
  }

  monotonicMs(): number {
    return this.clocks.values().next().value!.monotonicMs();
  }

  async close(): Promise<void> {
    this.memory?.shutdown();
    await Promise.all([...this.tcp.values()].map((t) => t.close()));
    this.tcp.clear();
  }

  /** The node's clock (a node added after the start gets its own on first use). */
  private clock(name: NodeName): RealClock {
    let clock = this.clocks.get(name);
    if (clock === undefined) {
      clock = new RealClock();
      this.clocks.set(name, clock);
    }
    return clock;
  }

  private async openTransport(self: { name: NodeName; id: ReturnType<typeof nodeId> }): Promise<Transport> {
    if (this.memory !== undefined) return this.memory.endpoint(self);
    const host = this.options.host ?? '127.0.0.1';
    const index = this.options.names.indexOf(self.name);
    // A node added after the start (not among the names) listens on an ephemeral port.
    const port = this.ports.get(self.name) ?? (this.options.basePort && index >= 0 ? this.options.basePort + index : 0);
    const peers: Record<string, string> = {};
    for (const [name, address] of this.addresses) if (name !== self.name) peers[name] = address;
    const transport = await this.listen(self, host, port, peers);
    this.ports.set(self.name, transport.port);
    const address = transport.address;
    const previous = this.addresses.get(self.name);
    this.addresses.set(self.name, address);
    this.tcp.set(self.name, transport);
    if (previous !== address) {
      for (const [name, other] of this.tcp) if (name !== self.name) other.addPeer(self.name, address);
    }
    return transport;
  }

  /** Listens on `port`; a restarting node whose old port is taken gets a fresh one (peers are told the address). */
  private async listen(
    self: { name: NodeName; id: ReturnType<typeof nodeId> },
    host: string,
    port: number,
    peers: Record<string, string>,
  ): Promise<TcpTransport> {
    const members = this.options.names;
    const tls = this.options.peerTls?.(self.name);
    const options = { self, host, port, peers, members, timers: this.timers, random: this.random, ...(tls && { tls }) };
    try {
      return await TcpTransport.start(options);
    } catch (error) {
      // Only a restart falls back: a port the user asked for must not silently change.
      const restart = this.ports.has(self.name);
      if (!restart || port === 0 || (error as { code?: unknown }).code !== 'EADDRINUSE') throw error;
      return TcpTransport.start({ ...options, port: 0 });
    }
  }

  private async openStorage(name: NodeName): Promise<NodeStorage> {
    const dataDir = this.options.dataDir;
    if (dataDir === undefined) {
      let disk = this.disks.get(name);
      if (disk === undefined) {
        disk = { engine: new MemoryStorageEngine(), log: new MemoryLogStorage() };
        this.disks.set(name, disk);
      }
      return disk;
    }
    return openNodeStorage(join(dataDir, name), this.options.sync ?? true);
  }
}

/**
 * A node's storage under `path` (created if missing): `raftlog/`, one segmented append-only log for the Raft logs of
 * every group (segmented-log-storage.ts: group commit, one fdatasync per batch), and `state/`, an LMDB environment for
 * MVCC rows and tx state. The log syncs every batch; the state never does (state-session.ts): it is derived from the
 * logs, survives a process crash in the page cache, and is rebuilt from the logs when an OS crash may have cost it
 * pages. Apart, a state machine's apply and a log append never queue behind each other, and the driver applies
 * committed entries while it appends new ones. The state only ever holds entries the log already holds durably.
 * `sync: false` skips the log's syncs (benchmarks that say so). `bootId` is for tests that play a reboot.
 *
 * Directories of earlier layouts are refused, never opened as empty: one LMDB environment for everything
 * (`data.mdb` here), or the Raft logs in an LMDB environment (`log/`).
 */
export async function openNodeStorage(path: string, sync = true, bootId?: string | null): Promise<DiskNodeStorage> {
  if (existsSync(join(path, 'data.mdb'))) {
    throw new BasaltError(
      'INVALID_ARGUMENT',
      `${path} holds one LMDB environment (an earlier data layout); this version keeps raftlog/ and state/ under it: ` +
        'start on an empty directory',
      { path },
    );
  }
  if (existsSync(join(path, 'log', 'data.mdb'))) {
    throw new BasaltError(
      'INVALID_ARGUMENT',
      `${path} keeps its Raft logs in an LMDB environment under log/ (an earlier data layout); this version keeps ` +
        'them in a segmented log under raftlog/: start on an empty directory',
      { path },
    );
  }
  const statePath = join(path, 'state');
  mkdirSync(statePath, { recursive: true });
  const log = await SegmentedLogStorage.open(join(path, 'raftlog'), { sync });
  let state: RootDatabase;
  let session: ReturnType<typeof beginStateSession>;
  try {
    session = bootId === undefined ? beginStateSession(statePath) : beginStateSession(statePath, bootId);
    state = openLmdbEnvironment(statePath, { sync: false });
  } catch (error) {
    await log.close();
    throw error;
  }
  return {
    engine: new LmdbStorageEngine(state),
    log,
    stateOpening: session.opening,
    close: async () => {
      await log.close();
      await syncEnvironment(state);
      await state.close();
      session.markClean();
    },
  };
}

export interface DiskNodeStorage extends NodeStorage {
  /** How the state environment was found: `rebuilt` when it was removed, to be rebuilt from the Raft logs. */
  readonly stateOpening: StateOpening;
}

/** Forces the environment's pages to disk (off the event loop). */
function syncEnvironment(root: RootDatabase): Promise<void> {
  // lmdb-js has `sync(callback)` (an mdb_env_sync(force) on a worker thread) but leaves it out of its typings.
  const env = root as RootDatabase & { sync(callback: (error?: unknown) => void): void };
  return new Promise((resolve, reject) => {
    env.sync((error) => (error ? reject(error) : resolve()));
  });
}
