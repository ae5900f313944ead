#!/usr/bin/env node
/**
 * The `basalt` command. `basalt start` runs a local cluster in this process: nodes n1..nN over TCP on loopback with
 * one LMDB environment per node under the data directory (or in-memory storage with --memory). It prints each node's
 * address, the metastorage leader and partition leaders as they settle, a `ready` line, then a status line
 * periodically. SIGINT/SIGTERM stop it gracefully (a second signal exits at once).
 */
import { resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { isBasaltError } from '../core/errors.js';
import { META_GROUP } from '../core/partitioning.js';
import { Cluster, defaultNodeNames } from '../node/cluster.js';
import { RealClusterEnvironment } from '../node/real-cluster.js';

interface StartOptions {
  readonly nodes: number;
  readonly dataDir: string;
  readonly memory?: boolean;
  readonly basePort?: number;
  readonly statusIntervalMs: number;
  readonly table: readonly TableSpec[];
}

interface TableSpec {
  readonly name: string;
  readonly partitions: number;
  readonly replicas: number;
}

const log = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

function tableSpec(value: string, previous: readonly TableSpec[]): TableSpec[] {
  const [name, partitions = '8', replicas = '3'] = value.split(':');
  if (name === undefined || name.length === 0) throw new InvalidArgumentError('expected name[:partitions[:replicas]]');
  return [...previous, { name, partitions: positiveInt(partitions), replicas: positiveInt(replicas) }];
}

async function start(options: StartOptions): Promise<void> {
  // Listen before anything is printed: a signal that arrives before a listener exists kills the process outright.
  const stopRequested = untilSignal();
  const names = defaultNodeNames(options.nodes);
  const dataDir = options.memory ? undefined : resolve(options.dataDir);
  log(
    `basalt: starting ${names.length} nodes over TCP on 127.0.0.1 with ${dataDir === undefined ? 'in-memory storage' : `LMDB in ${dataDir}`}`,
  );
  const env = new RealClusterEnvironment({
    names,
    transport: 'tcp',
    ...(dataDir !== undefined && { dataDir }),
    ...(options.basePort !== undefined && { basePort: options.basePort }),
    onError: (node, error) => log(`basalt: node ${node}: ${String(error)}`),
  });
  const cluster = await Cluster.start(env, names);
  for (const name of names) {
    log(`node ${name} listening on ${env.address(name) ?? '?'} (id ${cluster.node(name).ephemeralId})`);
  }
  watchLeaders(cluster);
  for (const spec of options.table) await ensureTable(cluster, spec);
  await settle(cluster);
  log(`basalt: ready: ${summary(cluster)}`);
  const timer = setInterval(() => log(`status: ${summary(cluster)}`), options.statusIntervalMs);
  await stopRequested;
  clearInterval(timer);
  log('basalt: stopping');
  await cluster.stop();
  log('basalt: stopped');
}

/** Prints each leader change once, as nodes see themselves elected. */
function watchLeaders(cluster: Cluster): void {
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

async function ensureTable(cluster: Cluster, spec: TableSpec): Promise<void> {
  try {
    const table = await cluster.createTable(spec.name, { partitions: spec.partitions, replicas: spec.replicas });
    log(`table ${table.name} created (id ${table.id}, ${table.partitions} partitions, ${table.replicas} replicas)`);
  } catch (error) {
    if (!isBasaltError(error, 'ALREADY_EXISTS')) throw error;
    log(`table ${spec.name} exists`);
  }
}

/** Waits (bounded) until every partition known to the metastorage has a leader. */
async function settle(cluster: Cluster): Promise<void> {
  await cluster.waitFor(() => partitionCounts(cluster).led === partitionCounts(cluster).total, {
    what: 'every partition has a leader',
  });
}

function partitionCounts(cluster: Cluster): { total: number; led: number } {
  let total = 0;
  let led = 0;
  for (const table of cluster.tables()) {
    for (let i = 0; i < table.partitions; i++) {
      total++;
      if (cluster.leaderOf(`t${table.id}p${i}` as never) !== undefined) led++;
    }
  }
  return { total, led };
}

function summary(cluster: Cluster): string {
  const up = cluster.nodes.filter((n) => cluster.node(n).up).length;
  const { total, led } = partitionCounts(cluster);
  const meta = cluster.leaderOf(META_GROUP) ?? 'none';
  return `${up}/${cluster.nodes.length} nodes up, metastorage leader ${meta}, tables: ${cluster.tables().length}, partitions with a leader: ${led}/${total}`;
}

function untilSignal(): Promise<void> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      log(`basalt: ${signal} received`);
      process.once('SIGINT', () => process.exit(130));
      resolve();
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  });
}

const program = new Command();
program.name('basalt').description('A distributed, replicated, transactional key-value store');
program
  .command('start')
  .description('start a local cluster (TCP on loopback, LMDB storage) and run it until Ctrl-C')
  .option('--nodes <n>', 'number of nodes', positiveInt, 3)
  .option('--data-dir <path>', 'LMDB data directory (one environment per node)', '.basalt/data')
  .option('--memory', 'keep data in memory instead of LMDB')
  .option('--base-port <port>', 'node i listens on base-port + i - 1 (default: ephemeral ports)', positiveInt)
  .option('--table <name[:partitions[:replicas]]>', 'create this table at start if missing (repeatable)', tableSpec, [])
  .option('--status-interval <ms>', 'milliseconds between status lines', positiveInt, 5_000)
  .action(async (options: StartOptions & { statusInterval: number }) => {
    await start({ ...options, statusIntervalMs: options.statusInterval });
  });

program.parseAsync(process.argv).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`basalt: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
