/**
 * `basalt node`: one node of a cluster as its own process (real-process tests: kill -9 and restart). Every process is
 * given the same `--cluster` list of `name=host:port`; this one listens on its own entry over TCP and keeps its data
 * in one LMDB environment under `data-dir/<name>` (or in memory). It prints its address, leaders it becomes, a ready
 * line once it knows the metastorage state, then status lines; a signal stops it gracefully. With `--client-port` it
 * serves `connect()` clients on its host, and coordinates their transactions.
 */
import { join, resolve } from 'node:path';
import { InvalidArgumentError } from 'commander';
import { nodeClient } from '../client/node-client.js';
import { ClientServer } from '../client/server.js';
import { isBasaltError } from '../core/errors.js';
import { type NodeName, nodeId, nodeName } from '../core/ids.js';
import { META_GROUP } from '../core/partitioning.js';
import { RealClock } from '../env/real-clock.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import { parseHostPort, TcpTransport } from '../net/tcp-transport.js';
import { BasaltNode, type NodeStorage } from '../node/basalt-node.js';
import { coordinatorService } from '../node/coordinator-service.js';
import { openLmdbNodeStorage } from '../node/real-cluster.js';
import { replicaPartitionHost } from '../node/replica-host.js';
import { MemoryLogStorage } from '../raft/memory-log-storage.js';
import { MemoryStorageEngine } from '../storage/storage-engine.js';
import { log, type TableSpec, untilSignal } from './common.js';
import { createNodeLogger, type LogLevel } from './logging.js';
import { MetricsServer } from './metrics-http.js';

export interface NodeCommandOptions {
  readonly name: string;
  /** `n1=127.0.0.1:7001,n2=127.0.0.1:7002,...`: every node of the cluster, this one included. */
  readonly cluster: ReadonlyMap<NodeName, string>;
  readonly dataDir: string;
  readonly memory?: boolean;
  readonly table: readonly TableSpec[];
  readonly statusIntervalMs: number;
  /** Serve `connect()` clients on this port of the node's host (0: ephemeral); no client port when absent. */
  readonly clientPort?: number;
  /** Serve `/metrics` and `/health` over HTTP on this port of the node's host (0: ephemeral); none when absent. */
  readonly metricsPort?: number;
  readonly logLevel: LogLevel;
  /** Structured logs to this file instead of stderr. */
  readonly logFile?: string;
}

/** Parses `name=host:port,...` (names distinct, addresses valid). */
export function clusterSpec(value: string): Map<NodeName, string> {
  const members = new Map<NodeName, string>();
  for (const part of value.split(',')) {
    const [name, address] = part.split('=');
    if (name === undefined || name.length === 0 || address === undefined) {
      throw new InvalidArgumentError('expected name=host:port[,name=host:port...]');
    }
    try {
      parseHostPort(address);
    } catch {
      throw new InvalidArgumentError(`not a host:port address: ${address}`);
    }
    if (members.has(nodeName(name))) throw new InvalidArgumentError(`node ${name} is listed twice`);
    members.set(nodeName(name), address);
  }
  return members;
}

const READY_WAIT_MS = 60_000;
const POLL_MS = 50;

export async function runNode(options: NodeCommandOptions): Promise<void> {
  const stopRequested = untilSignal();
  const name = nodeName(options.name);
  const address = options.cluster.get(name);
  if (address === undefined) throw new InvalidArgumentError(`--name ${name} is not in --cluster`);
  const logger = createNodeLogger({
    node: name,
    level: options.logLevel,
    ...(options.logFile !== undefined && { file: options.logFile }),
  });
  const random = new RealRandom();
  const timers = new RealTimers();
  const self = { name, id: nodeId(random.uuid()) };
  const { host, port } = parseHostPort(address);
  const peers = Object.fromEntries([...options.cluster].filter(([n]) => n !== name));
  const transport = await TcpTransport.start({ self, host, port, peers, timers, random });
  const storage: NodeStorage = options.memory
    ? { engine: new MemoryStorageEngine(), log: new MemoryLogStorage() }
    : openLmdbNodeStorage(join(resolve(options.dataDir), name));
  const node = await BasaltNode.start({
    transport,
    clock: new RealClock(),
    timers,
    random,
    storage,
    nodes: [...options.cluster.keys()],
    partitionHost: replicaPartitionHost(),
    services: [coordinatorService()],
    onError: (error) => {
      log(`basalt: node ${name}: ${String(error)}`);
      logger.error({ err: String(error) }, 'background failure');
    },
  });
  log(`node ${name} listening on ${transport.address} (id ${self.id})`);
  logger.info({ address: transport.address, ephemeralId: self.id, dataDir: options.dataDir }, 'node started');
  let leaderChanges = 0;
  node.onLeaderChange((change) => {
    leaderChanges++;
    logger.info({ group: change.group, role: change.role, term: change.term, leader: change.leader }, 'leader change');
    if (change.role !== 'leader') return;
    const what = change.group === META_GROUP ? 'metastorage' : `partition ${change.group}`;
    log(`${what} leader: ${name} (term ${change.term})`);
  });
  let stopping = false;
  void stopRequested.then(() => {
    stopping = true;
  });
  // Clients are served from the start: until the metastorage is known, their calls fail with coded errors.
  const clientServer =
    options.clientPort === undefined
      ? undefined
      : await ClientServer.start({ host, port: options.clientPort, client: nodeClient(node), timers });
  if (clientServer !== undefined) {
    log(`client port of ${name} on ${clientServer.address}: connect('${clientServer.address}')`);
    logger.info({ clientAddress: clientServer.address }, 'client port open');
  }
  const metricsServer =
    options.metricsPort === undefined
      ? undefined
      : await MetricsServer.start({
          host,
          port: options.metricsPort,
          nodeName: name,
          nodeOf: () => node,
          extra: () => ({ leader_changes_total: leaderChanges }),
        });
  if (metricsServer !== undefined) {
    log(`metrics of ${name}: ${metricsServer.url}/metrics (health: ${metricsServer.url}/health)`);
    logger.info({ metricsUrl: `${metricsServer.url}/metrics` }, 'metrics endpoint open');
  }
  if (await until(() => stopping || node.metastorage.revision > 0, READY_WAIT_MS)) {
    for (const spec of options.table) {
      await ensureTable(node, spec);
      await until(() => stopping || node.metastorage.table(spec.name) !== undefined, READY_WAIT_MS);
    }
    log(`basalt: node ${name} ready: ${status(node)}`);
    logger.info({ ...node.metrics(), clock: undefined }, 'node ready');
  } else {
    logger.warn({ waitedMs: READY_WAIT_MS }, 'no metastorage state yet');
  }
  const timer = setInterval(() => log(`status: ${status(node)}`), options.statusIntervalMs);
  await stopRequested;
  clearInterval(timer);
  log(`basalt: stopping node ${name}`);
  logger.info({}, 'node stopping');
  await metricsServer?.close();
  await clientServer?.close();
  await node.stop();
  log(`basalt: node ${name} stopped`);
  logger.info({}, 'node stopped');
  logger.flush();
}

async function ensureTable(node: BasaltNode, spec: TableSpec): Promise<void> {
  try {
    const t = await node.metastorage.createTable(spec.name, { partitions: spec.partitions, replicas: spec.replicas });
    log(`table ${t.name} created (id ${t.id}, ${t.partitions} partitions, ${t.replicas} replicas)`);
  } catch (error) {
    if (!isBasaltError(error, 'ALREADY_EXISTS')) throw error;
    log(`table ${spec.name} exists`);
  }
}

function status(node: BasaltNode): string {
  const m = node.metrics();
  const meta = node.metastorage.leader() ?? 'none';
  return (
    `metastorage revision ${m.metaRevision} leader ${meta}, tables: ${node.metastorage.tables().length}, ` +
    `hosted partitions: ${m.hostedPartitions}, raft leaderships: ${m.raftLeaderships}, ` +
    `live peers: ${m.livePeers.join(',') || 'none'}`
  );
}

/** Polls `condition` on real time; false if it did not hold within `timeoutMs`. */
async function until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  return true;
}
