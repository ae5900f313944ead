#!/usr/bin/env node
/**
 * The `basalt` command. `basalt start` runs a local cluster in this process (nodes n1..nN over TCP on loopback, LMDB
 * by default); `basalt node` runs one node of a multi-process cluster. Both stop gracefully on SIGINT/SIGTERM (a
 * second SIGINT exits at once).
 */
import { Command } from 'commander';
import { port, positiveInt, tableSpec } from './common.js';
import { LOG_LEVELS, logLevel } from './logging.js';
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
  .action(async (options: StartOptions & { statusInterval: number }) => {
    await start({ ...options, statusIntervalMs: options.statusInterval });
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

program.parseAsync(process.argv).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`basalt: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
