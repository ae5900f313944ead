/**
 * `basalt local`: a developer tool, a whole local cluster in this one process, nodes n1..nN over TCP on loopback with
 * LMDB storage per node under the data directory (or in-memory storage). Prints each node's address, the
 * metastorage leader and partition leaders as they settle, a `ready` line, then a status line periodically; a signal
 * stops it gracefully. Node n1 serves `connect()` clients on the client port (default 10800, Ignite's), printed before the ready line.
 */
import { resolve } from 'node:path';
import { type Client, embeddedClient } from '../client/client.js';
import { startClientServer } from '../client/cluster-server.js';
import { isBasaltError } from '../core/errors.js';
import { META_GROUP, tablePartitionId } from '../core/partitioning.js';
import { Cluster, defaultNodeNames } from '../harness/cluster.js';
import { RealClusterEnvironment } from '../harness/real-cluster.js';
import { log, type TableSpec, untilSignal } from './common.js';
import { createNodeLogger, type LogLevel, type NodeLogger } from './logging.js';
import { MetricsServer } from './metrics-http.js';

export interface LocalOptions {
  readonly nodes: number;
  readonly dataDir: string;
  readonly memory?: boolean;
  readonly basePort?: number;
  readonly statusIntervalMs: number;
  readonly table: readonly TableSpec[];
  /** n1's client port (0: ephemeral). */
  readonly clientPort: number;
  /** Node i serves /metrics and /health on metricsPort + i - 1 (0: each on an ephemeral port). */
  readonly metricsPort: number;
  readonly logLevel: LogLevel;
  /** Structured logs of every node to this file instead of stderr. */
  readonly logFile?: string;
}

export async function local(options: LocalOptions): Promise<void> {
  // Listen before anything is printed: a signal that arrives before a listener exists kills the process outright.
  const stopRequested = untilSignal();
  const names = defaultNodeNames(options.nodes);
  const loggers = new Map<string, NodeLogger>(
    names.map((name) => [
      name,
      createNodeLogger({
        node: name,
        level: options.logLevel,
        ...(options.logFile !== undefined && { file: options.logFile }),
      }),
    ]),
  );
  const dataDir = options.memory ? undefined : resolve(options.dataDir);
  log(
    `basalt: starting ${names.length} nodes over TCP on 127.0.0.1 with ${dataDir === undefined ? 'in-memory storage' : `LMDB in ${dataDir}`}`,
  );
  const env = new RealClusterEnvironment({
    names,
    transport: 'tcp',
    ...(dataDir !== undefined && { dataDir }),
    ...(options.basePort !== undefined && { basePort: options.basePort }),
    onError: (node, error) => {
      log(`basalt: node ${node}: ${String(error)}`);
      loggers.get(node)?.error({ err: String(error) }, 'background failure');
    },
  });
  const cluster = await Cluster.start<Client>(env, names, embeddedClient);
  for (const name of names) {
    log(`node ${name} listening on ${env.address(name) ?? '?'} (id ${cluster.node(name).ephemeralId})`);
  }
  for (const name of names) {
    loggers
      .get(name)
      ?.info({ address: env.address(name), ephemeralId: cluster.node(name).ephemeralId }, 'node started');
    cluster.basaltNode(name)?.onLeaderChange((change) => {
      const { group, role, term, leader } = change;
      loggers.get(name)?.info({ group, role, term, leader }, 'leader change');
    });
  }
  watchLeaders(cluster);
  for (const spec of options.table) await ensureTable(cluster, spec);
  await settle(cluster);
  const clientServer = await startClientServer(cluster, names[0]!, { port: options.clientPort });
  const metricsServers = await startMetrics(cluster, options.metricsPort);
  log(`client port of ${names[0]} on ${clientServer.address}: connect('${clientServer.address}')`);
  log(`basalt: ready: ${summary(cluster)}`);
  const timer = setInterval(() => log(`status: ${summary(cluster)}`), options.statusIntervalMs);
  await stopRequested;
  clearInterval(timer);
  log('basalt: stopping');
  await Promise.all(metricsServers.map((m) => m.close()));
  await clientServer.close();
  await cluster.stop();
  log('basalt: stopped');
  for (const logger of loggers.values()) {
    logger.info({}, 'node stopped');
    logger.flush();
  }
}

/** One metrics endpoint per node, each printed. */
async function startMetrics(cluster: Cluster<Client>, basePort: number): Promise<MetricsServer[]> {
  const servers: MetricsServer[] = [];
  for (const [i, name] of cluster.nodes.entries()) {
    const server = await MetricsServer.start({
      host: '127.0.0.1',
      port: basePort === 0 ? 0 : basePort + i,
      nodeName: name,
      nodeOf: () => cluster.basaltNode(name),
    });
    servers.push(server);
    log(`metrics of ${name}: ${server.url}/metrics (health: ${server.url}/health)`);
  }
  return servers;
}

/** Prints each leader change once, as nodes see themselves elected. */
function watchLeaders(cluster: Cluster<Client>): void {
  const printed = new Map<string, string>();
  for (const name of cluster.nodes) {
    cluster.basaltNode(name)?.onLeaderChange((change) => {
      if (change.role !== 'leader') return;
      const what = change.group === META_GROUP ? 'metastorage' : `partition ${change.group}`;
      const line = `${what} leader: ${change.leader} (term ${change.term})`;
      if (printed.get(change.group) === line) return;
      printed.set(change.group, line);
      log(line);
    });
  }
  const meta = cluster.leaderOf(META_GROUP);
  if (meta !== undefined) log(`metastorage leader: ${meta}`);
}

async function ensureTable(cluster: Cluster<Client>, spec: TableSpec): Promise<void> {
  try {
    const table = await cluster.createTable(spec.name, { partitions: spec.partitions, replicas: spec.replicas });
    log(`table ${table.name} created (id ${table.id}, ${table.partitions} partitions, ${table.replicas} replicas)`);
  } catch (error) {
    if (!isBasaltError(error, 'ALREADY_EXISTS')) throw error;
    log(`table ${spec.name} exists`);
  }
}

/** Waits (bounded) until every partition known to the metastorage has a leader. */
async function settle(cluster: Cluster<Client>): Promise<void> {
  await cluster.waitFor(() => partitionCounts(cluster).led === partitionCounts(cluster).total, {
    what: 'every partition has a leader',
  });
}

function partitionCounts(cluster: Cluster<Client>): { total: number; led: number } {
  let total = 0;
  let led = 0;
  for (const table of cluster.tables()) {
    for (let i = 0; i < table.partitions; i++) {
      total++;
      if (cluster.leaderOf(tablePartitionId(table.id, i)) !== undefined) led++;
    }
  }
  return { total, led };
}

function summary(cluster: Cluster<Client>): string {
  const up = cluster.nodes.filter((n) => cluster.node(n).up).length;
  const { total, led } = partitionCounts(cluster);
  const meta = cluster.leaderOf(META_GROUP) ?? 'none';
  return `${up}/${cluster.nodes.length} nodes up, metastorage leader ${meta}, tables: ${cluster.tables().length}, partitions with a leader: ${led}/${total}`;
}
