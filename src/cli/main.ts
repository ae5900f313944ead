#!/usr/bin/env node
/**
 * The `basalt` command. `basalt start` runs a local cluster in this process (nodes n1..nN over TCP on loopback, LMDB
 * by default); `basalt node` runs one node of a multi-process cluster; `basalt cluster` supervises a local cluster of
 * `basalt node` child processes. These stop gracefully on SIGINT/SIGTERM (a second SIGINT exits at once).
 * `basalt table`, `status` and `demo` work against a running cluster (client port and metrics endpoints).
 */
import { Command } from 'commander';
import { DEFAULT_CONNECT, DEFAULT_METRICS, status, tableCreate, tableList } from './admin.js';
import { runCluster } from './cluster-command.js';
import { port, positiveInt, tableSpec } from './common.js';
import { demo } from './demo.js';
import { LOG_LEVELS, type LogLevel, logLevel } from './logging.js';
import { clusterSpec, type NodeCommandOptions, runNode } from './node-command.js';
import { type StartOptions, start } from './start.js';

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
  .option('--client-port <port>', "n1's client port for connect() (0: an ephemeral port)", port, 10_800)
  .option('--metrics-port <port>', 'node i serves /metrics and /health on port + i - 1 (0: ephemeral ports)', port, 0)
  .option('--log-level <level>', `structured log level (${LOG_LEVELS.join(', ')}; info with --log-file)`, logLevel)
  .option('--log-file <path>', 'structured (JSON) logs of every node to this file instead of stderr')
  .action(async (options: Omit<StartOptions, 'logLevel'> & { statusInterval: number; logLevel?: LogLevel }) => {
    // On a terminal the human lines come first: structured logs on stderr only from warnings, unless asked.
    const level = options.logLevel ?? (options.logFile === undefined ? 'warn' : 'info');
    await start({ ...options, logLevel: level, statusIntervalMs: options.statusInterval });
  });

program
  .command('node')
  .description('run one node of a cluster in this process (every node gets the same --cluster list)')
  .requiredOption('--name <name>', 'this node, one of the --cluster names')
  .requiredOption('--cluster <list>', 'every node as name=host:port, comma separated', clusterSpec)
  .option('--data-dir <path>', 'LMDB data directory (this node uses <path>/<name>)', '.basalt/data')
  .option('--memory', 'keep data in memory instead of LMDB')
  .option(
    '--table <name[:partitions[:replicas]]>',
    'create this table once ready if missing (repeatable)',
    tableSpec,
    [],
  )
  .option('--status-interval <ms>', 'milliseconds between status lines', positiveInt, 5_000)
  .option('--client-port <port>', 'serve connect() clients on this port (0: an ephemeral port)', port)
  .option('--metrics-port <port>', 'serve /metrics (Prometheus) and /health over HTTP (0: an ephemeral port)', port)
  .option('--log-level <level>', `structured log level (${LOG_LEVELS.join(', ')})`, logLevel, 'info')
  .option('--log-file <path>', 'structured (JSON) logs to this file instead of stderr')
  .action(async (options: Omit<NodeCommandOptions, 'statusIntervalMs'> & { statusInterval: number }) => {
    await runNode({ ...options, statusIntervalMs: options.statusInterval });
  });

program
  .command('cluster')
  .description('start and supervise a local cluster of `basalt node` child processes until Ctrl-C')
  .option('--nodes <n>', 'number of node processes', positiveInt, 3)
  .option('--data <path>', 'LMDB data directory (node nI uses <path>/nI)', './data')
  .option('--base-port <port>', 'node i listens for peers on base-port + i - 1 (default: free ports)', positiveInt)
  .option('--client-port <port>', 'node i serves connect() on client-port + i - 1 (0: ephemeral)', port, 10_800)
  .option(
    '--metrics-port <port>',
    'node i serves /metrics and /health on metrics-port + i - 1 (0: ephemeral)',
    port,
    10_900,
  )
  .option(
    '--table <name[:partitions[:replicas]]>',
    'create this table once ready if missing (repeatable)',
    tableSpec,
    [],
  )
  .option('--log-level <level>', `structured log level (${LOG_LEVELS.join(', ')})`, logLevel, 'info')
  .option('--status-interval <ms>', 'milliseconds between status lines of each node', positiveInt, 10_000)
  .action(async (options) => {
    process.exitCode = await runCluster({ ...options, statusIntervalMs: options.statusInterval });
  });

const table = program.command('table').description('create and list tables of a running cluster');
table
  .command('create <name>')
  .description('create a table')
  .option('--partitions <n>', 'number of partitions', positiveInt, 8)
  .option('--replicas <n>', 'replicas per partition', positiveInt, 3)
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .action(async (name: string, options: { partitions: number; replicas: number; connect: string }) => {
    await tableCreate(options.connect, name, options.partitions, options.replicas);
  });
table
  .command('list')
  .description('list the tables')
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .action(async (options: { connect: string }) => {
    await tableList(options.connect);
  });

program
  .command('status')
  .description("nodes up/down and every partition's leader, primary, term and applied indexes (from /metrics)")
  .option('--metrics <list>', 'metrics endpoints host:port, comma separated', DEFAULT_METRICS)
  .action(async (options: { metrics: string }) => {
    const up = await status(options.metrics.split(','));
    if (up === 0) process.exitCode = 1;
  });

program
  .command('demo')
  .description('run a bank workload against a running cluster with a live progress line and a final report')
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .option('--metrics <list>', 'metrics endpoints for the resolution counters (comma separated)', DEFAULT_METRICS)
  .option('--table <name>', 'the bank table (created if missing)', 'bank')
  .option('--accounts <n>', 'number of accounts', positiveInt, 20)
  .option('--workers <n>', 'concurrent transfer loops', positiveInt, 4)
  .option('--duration <s>', 'seconds to run', positiveInt, 10)
  .action(
    async (options: {
      connect: string;
      metrics: string;
      table: string;
      accounts: number;
      workers: number;
      duration: number;
    }) => {
      const ok = await demo({ ...options, metrics: options.metrics.split(','), durationMs: options.duration * 1000 });
      if (!ok) process.exitCode = 1;
    },
  );

program.parseAsync(process.argv).then(
  () => process.exit(process.exitCode ?? 0),
  (error: unknown) => {
    process.stderr.write(`basalt: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
