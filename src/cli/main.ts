#!/usr/bin/env node
/**
 * The `basalt` command. `basalt start` runs one node of a cluster in this process (peers over TCP, LMDB in its own
 * data directory); `basalt cluster` supervises a local cluster of `basalt start` child processes; `basalt local` runs
 * a whole local cluster inside one process (a developer tool). These stop gracefully on SIGINT/SIGTERM (a second
 * SIGINT exits at once). `basalt table`, `status`, `console` and `demo` work against a running cluster (client port
 * and metrics endpoints). `basalt sim` runs the deterministic simulator (workloads under faults, checked
 * histories); `basalt check` checks a history file. `basalt cert` creates and lists the CA, node and client
 * certificates (certs.ts). `basalt backup`, `backup verify` and `restore` take, check and restore backups of a running
 * cluster (backup-command.ts).
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import type { RemoteClient } from '../client/remote.js';
import type { UserRole } from '../cluster/metastorage-state.js';
import type { HybridTimestamp } from '../core/ids.js';
import { parseFaults, SIM_FAULTS } from '../sim/workload/faults.js';
import { EXIT_CODES } from '../sim/workload/run.js';
import { WORKLOADS, type WorkloadName } from '../sim/workload/workload.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { DEFAULT_CONNECT, DEFAULT_METRICS, nodeList, nodeRemove, status, tableCreate, tableList } from './admin.js';
import {
  type BackupFlags,
  backupCommand,
  type RestoreFlags,
  restoreCommand,
  timestampFlag,
  verifyCommand,
} from './backup-command.js';
import { runBench } from './bench-command.js';
import {
  CA_DAYS_DEFAULT,
  CERT_DAYS_DEFAULT,
  type CertOptions,
  type CreatedCert,
  createCa,
  createClientCert,
  createNodeCert,
  DEFAULT_CERTS_DIR,
  formatCertList,
  listCerts,
  loadClientTls,
} from './certs.js';
import { runCluster } from './cluster-command.js';
import { log, port, positiveInt, type TableSpec, tableSpec } from './common.js';
import { consoleCommand } from './console/console-command.js';
import {
  DATA_EXIT_CODES,
  type DataOp,
  type DataOptions,
  getCommand,
  type Output,
  parseScript,
  parseTimestamp,
  parseValue,
  readSource,
  reportFailure,
  scanCommand,
  txnCommand,
  watchCommand,
  withClient,
} from './data.js';
import { demo } from './demo.js';
import { type PeerEntry, peerList } from './discovery.js';
import { NEMESIS_FAULTS, type NemesisFault, parseNemesis, runJepsen } from './jepsen.js';
import { leaseGrant, leaseKeep, leaseRevoke, putOptionsOf } from './lease-command.js';
import { type LocalOptions, local } from './local.js';
import { LOG_LEVELS, type LogLevel, logLevel } from './logging.js';
import { runShell } from './shell.js';
import { faultList, runCheck, runSim, seedList, workloadList } from './sim-command.js';
import { runStart } from './start-command.js';
import {
  type Advertised,
  advertised,
  CONFIG_KEYS,
  DEFAULT_HOST,
  DEFAULT_STATUS_INTERVAL_MS,
  joinAddress,
  type PartialStartSettings,
  readStartConfig,
  resolveStartSettings,
} from './start-config.js';
import {
  type CredentialFlags,
  credentialOptions,
  grantRole,
  userAdd,
  userList,
  userPasswd,
  userRole,
} from './users.js';

const program = new Command();
program.name('basalt').description('A distributed, replicated, transactional key-value store');

/** The flags of `basalt start` as commander hands them over: undefined when not given (the config file may say). */
interface StartFlags {
  readonly config?: string;
  readonly name?: string;
  readonly host?: string;
  readonly advertise?: Advertised;
  readonly port?: number;
  readonly data?: string;
  readonly memory?: boolean;
  readonly fsync?: boolean;
  readonly peers?: PeerEntry[];
  readonly join?: string;
  readonly clientPort?: number;
  readonly metricsPort?: number;
  readonly table?: TableSpec[];
  readonly logLevel?: LogLevel;
  readonly logFile?: string;
  readonly statusInterval?: number;
  readonly certsDir?: string;
  readonly insecure?: boolean;
  readonly initAdmin?: string;
}

program
  .command('start')
  .description('start one node of a cluster in this process (peers over TCP, LMDB storage) until Ctrl-C')
  .option('--config <file>', `JSON file with these settings (keys: ${CONFIG_KEYS.join(', ')}); flags override it`)
  .option('--name <name>', "this node's name, distinct from every peer's")
  .option('--host <host>', `address to listen on for peers and clients (default: ${DEFAULT_HOST})`)
  .option('--port <port>', 'peer port the other nodes dial (0: an ephemeral port)', port)
  .option(
    '--advertise <host[:port]>',
    'the address others reach this node at, when not --host:--port (e.g. --host 0.0.0.0 in a container; ' +
      "default: --host, or this machine's host name when --host is a wildcard)",
    advertiseFlag,
  )
  .option('--data <path>', "this node's own LMDB data directory")
  .option('--memory', 'keep data in memory instead of LMDB')
  .option('--no-fsync', 'do not fsync LMDB commits (benchmarks only: a crash may lose acknowledged writes)')
  .option(
    '--peers <list>',
    'the other nodes, comma separated, each name=host:port or host:port (name learned)',
    peerList,
  )
  .option(
    '--join <host:port>',
    'join the running cluster of the node at this peer address (instead of --peers); partitions move onto it',
    joinFlag,
  )
  .option('--client-port <port>', 'serve connect() clients on this port (0: an ephemeral port)', port)
  .option('--metrics-port <port>', 'serve /metrics (Prometheus) and /health over HTTP (0: an ephemeral port)', port)
  .option('--table <name[:partitions[:replicas]]>', 'create this table once ready if missing (repeatable)', tableSpecs)
  .option('--log-level <level>', `structured log level (${LOG_LEVELS.join(', ')}; default: info)`, logLevel)
  .option('--log-file <path>', 'structured (JSON) logs to this file instead of stderr')
  .option(
    '--status-interval <ms>',
    `milliseconds between status lines (default: ${DEFAULT_STATUS_INTERVAL_MS})`,
    positiveInt,
  )
  .option(
    '--certs-dir <dir>',
    'TLS 1.3 on every port with ca.crt, node.crt and node.key of this directory (see basalt cert): mutual TLS ' +
      'between peers, and clients log in as users; default: plain TCP, no users (loopback, or --insecure)',
  )
  .option('--insecure', 'allow a --host other than loopback without --certs-dir: no TLS and no users')
  .option(
    '--init-admin <user>',
    'create this admin user once ready unless it exists (password from BASALT_ADMIN_PASSWORD; without it, ' +
      'client certificate only); needs --certs-dir',
  )
  .action(async (flags: StartFlags, command: Command) => {
    const file = flags.config === undefined ? {} : readStartConfig(flags.config);
    const { config: _, table, statusInterval, fsync, ...rest } = flags;
    // commander defaults a `--no-` flag to true; only a given flag may override the config file.
    const fsyncGiven = command.getOptionValueSource('fsync') === 'cli' ? fsync : undefined;
    const given: PartialStartSettings = { ...rest, fsync: fsyncGiven, tables: table, statusIntervalMs: statusInterval };
    await runStart(resolveStartSettings(file, given));
  });

const cert = program
  .command('cert')
  .description('create a cluster CA, node and client certificates (CockroachDB layout), list them');
cert
  .command('create-ca')
  .description(`create ca.crt and ca.key (valid ${CA_DAYS_DEFAULT} days unless --days)`)
  .option('--certs-dir <dir>', 'the certificates directory', DEFAULT_CERTS_DIR)
  .option('--days <n>', 'days of validity', positiveInt)
  .option('--overwrite', 'replace an existing CA (certificates it signed will no longer verify)', false)
  .action(async (options: CertFlags) => {
    printCreated('CA', await createCa(certOptions(options)));
  });
cert
  .command('create-node <name>')
  .description(`create node.crt and node.key for member <name>, signed by the CA (valid ${CERT_DAYS_DEFAULT} days)`)
  .option('--certs-dir <dir>', 'the certificates directory', DEFAULT_CERTS_DIR)
  .option('--host <host>', 'another DNS name or IP address the node is reached at (repeatable)', collect, [])
  .option('--days <n>', "days of validity (at most the CA's)", positiveInt)
  .option('--overwrite', 'replace existing node.crt and node.key', false)
  .action(async (name: string, options: CertFlags & { host: string[] }) => {
    printCreated(`node ${name}`, await createNodeCert(name, { ...certOptions(options), hosts: options.host }));
  });
cert
  .command('create-client <user>')
  .description(`create client.<user>.crt and .key (CN = user), signed by the CA (valid ${CERT_DAYS_DEFAULT} days)`)
  .option('--certs-dir <dir>', 'the certificates directory', DEFAULT_CERTS_DIR)
  .option('--days <n>', "days of validity (at most the CA's)", positiveInt)
  .option('--overwrite', 'replace existing client certificate and key', false)
  .action(async (user: string, options: CertFlags) => {
    printCreated(`client ${user}`, await createClientCert(user, certOptions(options)));
  });
cert
  .command('list')
  .description('list the certificates of the directory: subject, SANs, validity, whether expired')
  .option('--certs-dir <dir>', 'the certificates directory', DEFAULT_CERTS_DIR)
  .action((options: { certsDir: string }) => {
    for (const line of formatCertList(listCerts(options.certsDir))) log(line);
  });

program
  .command('cluster')
  .description('start and supervise a local cluster of `basalt start` child processes until Ctrl-C')
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
  .option(
    '--log-level <level>',
    `structured log level of the nodes, on stderr (${LOG_LEVELS.join(', ')}); warn keeps the human lines readable`,
    logLevel,
    'warn',
  )
  .option('--status-interval <ms>', 'milliseconds between status lines of each node', positiveInt, 10_000)
  .option('--restart', 'restart a node process that exits unexpectedly, with backoff (default: report it)', false)
  .option('--tls', 'mutual TLS between the nodes: a local CA and node certificates under <data>/certs', false)
  .action(async (options) => {
    process.exitCode = await runCluster({ ...options, statusIntervalMs: options.statusInterval });
  });

program
  .command('local')
  .description('developer tool: a whole local cluster in this one process (TCP on loopback, LMDB) until Ctrl-C')
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
  .action(async (options: Omit<LocalOptions, 'logLevel'> & { statusInterval: number; logLevel?: LogLevel }) => {
    // On a terminal the human lines come first: structured logs on stderr only from warnings, unless asked.
    const level = options.logLevel ?? (options.logFile === undefined ? 'warn' : 'info');
    await local({ ...options, logLevel: level, statusIntervalMs: options.statusInterval });
  });

const table = program.command('table').description('create and list tables of a running cluster');
withCredentials(table.command('create <name>'))
  .description('create a table')
  .option('--partitions <n>', 'number of partitions', positiveInt, 8)
  .option('--replicas <n>', 'replicas per partition', positiveInt, 3)
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .action(
    async (name: string, options: CredentialFlags & { partitions: number; replicas: number; connect: string }) => {
      const credentials = await credentialOptions(options);
      await tableCreate(options.connect, name, options.partitions, options.replicas, credentials);
    },
  );
withCredentials(table.command('list'))
  .description('list the tables')
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .action(async (options: CredentialFlags & { connect: string }) => {
    await tableList(options.connect, await credentialOptions(options));
  });

const DATA_HELP = `
Exit codes: ${DATA_EXIT_CODES.ok} done, ${DATA_EXIT_CODES.invalid} invalid input (nothing written), ${DATA_EXIT_CODES.notFound} not found, ${DATA_EXIT_CODES.unavailable} unavailable or retryable, ${DATA_EXIT_CODES.unknown} outcome unknown, ${DATA_EXIT_CODES.refused} refused.`;

/** The options every data command takes. */
function dataCommand(name: string, description: string) {
  return withCredentials(
    program
      .command(name)
      .description(description)
      .option('--connect <list>', 'node client ports host:port, comma separated, tried in order', DEFAULT_CONNECT)
      .option('--output <format>', 'json (one JSON line per result) or table (tab-separated)', outputFormat, 'json')
      .addHelpText('after', DATA_HELP),
  );
}

/** `--certs-dir` and `--user`, for a command that connects to nodes that check users. */
function withCredentials(command: Command): Command {
  return command
    .option('--certs-dir <dir>', 'connect over TLS with ca.crt of this directory (and client.<user>.crt/.key if there)')
    .option(
      '--user <name>',
      'log in as this user: by its client certificate, else a password (BASALT_PASSWORD or a prompt)',
    );
}

interface DataFlags extends CredentialFlags {
  readonly connect: string;
  readonly output: Output;
}

function dataOptions(flags: DataFlags): DataOptions {
  const { certsDir, user } = flags;
  return {
    connect: flags.connect.split(','),
    output: flags.output,
    credentials: { ...(certsDir !== undefined && { certsDir }), ...(user !== undefined && { user }) },
  };
}

const users = program
  .command('user')
  .description('add, remove and list the users of a node with certificates, change their passwords and roles');
/** A `basalt user` sub-command: connects like a data command, runs `fn`, exits 0 or with the data exit codes. */
function userCommand(spec: string, description: string) {
  return withCredentials(
    users
      .command(spec)
      .description(description)
      .option('--connect <list>', 'node client ports host:port, comma separated', DEFAULT_CONNECT),
  );
}
async function runUser(flags: DataFlags, fn: (client: RemoteClient) => Promise<void>): Promise<void> {
  process.exitCode = await withClient(dataOptions({ ...flags, output: 'json' }), async (client) => {
    await fn(client);
    return DATA_EXIT_CODES.ok;
  });
}
userCommand(
  'add <name>',
  'add a user (password from a prompt or --password-stdin; --no-password: client certificate only)',
)
  .option('--role <role>', 'its cluster-wide role: admin, readwrite or readonly (default: none; see grant)', userRole)
  .option('--no-password', 'no password: the user logs in by client certificate only')
  .option('--password-stdin', 'read the new password from the first line of standard input')
  .action(async (name: string, flags: DataFlags & { role?: UserRole; password: boolean; passwordStdin?: boolean }) => {
    const options = { password: flags.password, passwordStdin: flags.passwordStdin === true };
    await runUser(flags, (client) =>
      userAdd(client, name, { ...options, ...(flags.role !== undefined && { role: flags.role }) }),
    );
  });
userCommand('remove <name>', 'remove a user (the last admin cannot be removed)').action(
  async (name: string, flags: DataFlags) => {
    await runUser(flags, async (client) => {
      await client.removeUser(name);
      log(`user ${name} removed`);
    });
  },
);
userCommand('passwd <name>', "change a user's password (a user may change its own; an admin anyone's)")
  .option('--no-password', 'remove the password: the user logs in by client certificate only')
  .option('--password-stdin', 'read the new password from the first line of standard input')
  .action(async (name: string, flags: DataFlags & { password: boolean; passwordStdin?: boolean }) => {
    await runUser(flags, (client) =>
      userPasswd(client, name, { password: flags.password, passwordStdin: flags.passwordStdin === true }),
    );
  });
userCommand(
  'grant <name> <role>',
  'set a cluster-wide role (admin, readwrite, readonly, none), or with --table a role on one table',
)
  .option('--table <table>', 'the role is on this table only (readwrite, readonly or none)')
  .action(async (name: string, role: string, flags: DataFlags & { table?: string }) => {
    const granted = grantRole(role);
    await runUser(flags, async (client) => {
      await client.grant(name, granted, flags.table === undefined ? {} : { table: flags.table });
      log(`user ${name}: ${granted}${flags.table === undefined ? '' : ` on table ${flags.table}`}`);
    });
  });
userCommand('list', 'list the users: roles, and whether they have a password').action(async (flags: DataFlags) => {
  await runUser(flags, (client) => userList(client));
});

dataCommand('get <table> <key>', "print a key's value (an implicit read on its primary)").action(
  async (tableName: string, key: string, flags: DataFlags) => {
    const o = dataOptions(flags);
    process.exitCode = await withClient(o, (client) => getCommand(client, tableName, key, o.output));
  },
);
dataCommand('put <table> <key> <json>', 'write a JSON value (- reads it from standard input)')
  .option('--ttl <ms>', 'the value expires this many milliseconds after its commit')
  .option('--lease <id>', 'attach the key to a lease (basalt lease grant): it expires when the lease ends')
  .action(async (tableName: string, key: string, json: string, flags: DataFlags & { ttl?: string; lease?: string }) => {
    let value: Value;
    let options: ReturnType<typeof putOptionsOf>;
    try {
      value = parseValue(json === '-' ? readSource('-') : json);
      options = putOptionsOf(flags);
    } catch (error) {
      process.exitCode = reportFailure(error);
      return;
    }
    process.exitCode = await withClient(dataOptions(flags), async (client) => {
      await client.put(tableName, key, value, options);
      return DATA_EXIT_CODES.ok;
    });
  });
dataCommand('rm <table> <key>', 'remove a key').action(async (tableName: string, key: string, flags: DataFlags) => {
  process.exitCode = await withClient(dataOptions(flags), async (client) => {
    await client.remove(tableName, key);
    return DATA_EXIT_CODES.ok;
  });
});
dataCommand('scan <table>', 'list keys and values in key order, from one read-only snapshot')
  .option('--prefix <p>', 'keys starting with p')
  .option('--start <key>', 'from this key (inclusive)')
  .option('--end <key>', 'to this key (exclusive)')
  .option('--limit <n>', 'at most n rows', positiveInt)
  .action(
    async (tableName: string, flags: DataFlags & { prefix?: string; start?: string; end?: string; limit?: number }) => {
      const o = dataOptions(flags);
      const range =
        flags.prefix !== undefined
          ? { prefix: flags.prefix }
          : {
              ...(flags.start !== undefined && { start: flags.start }),
              ...(flags.end !== undefined && { end: flags.end }),
            };
      process.exitCode = await withClient(o, (client) => scanCommand(client, tableName, range, flags.limit, o.output));
    },
  );
dataCommand('watch <table>', 'print every committed change as it happens, one line each; resumes across reconnects')
  .option('--prefix <p>', 'keys starting with p')
  .option('--start <key>', 'from this key (inclusive)')
  .option('--end <key>', 'to this key (exclusive)')
  .option('--from <ts>', 'changes committed above this timestamp (a resolvedTs printed before); default: now')
  .option('--progress', 'also print resolved timestamps { resolvedTs }: every change at or below was printed', false)
  .action(
    async (
      tableName: string,
      flags: DataFlags & { prefix?: string; start?: string; end?: string; from?: string; progress: boolean },
    ) => {
      const o = dataOptions(flags);
      let from: HybridTimestamp | undefined;
      try {
        from = flags.from === undefined ? undefined : parseTimestamp(flags.from);
      } catch (error) {
        process.exitCode = reportFailure(error);
        return;
      }
      // Interrupted: the changes printed so far are complete up to the last resolvedTs printed.
      for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(DATA_EXIT_CODES.ok));
      const range =
        flags.prefix !== undefined
          ? { prefix: flags.prefix }
          : {
              ...(flags.start !== undefined && { start: flags.start }),
              ...(flags.end !== undefined && { end: flags.end }),
            };
      const options = { range, ...(from !== undefined && { from }), progress: flags.progress, connect: o.connect };
      process.exitCode = await withClient(o, (client) => watchCommand(client, tableName, options, o.output));
    },
  );
dataCommand('txn <script>', 'run a JSON script of get/put/rm/scan operations as one transaction (- reads stdin)')
  .option('--read-only', 'a read-only transaction (a snapshot; no put or rm)', false)
  .action(async (source: string, flags: DataFlags & { readOnly: boolean }) => {
    let script: DataOp[];
    try {
      script = parseScript(readSource(source));
    } catch (error) {
      process.exitCode = reportFailure(error);
      return;
    }
    const o = dataOptions(flags);
    process.exitCode = await withClient(o, (client) => txnCommand(client, script, flags.readOnly, o.output));
  });

const lease = program
  .command('lease')
  .description('grant, keep alive and revoke leases: keys attached to a lease vanish together when it ends');
/** A lease subcommand with the data commands' options. */
function leaseCommand(name: string, description: string) {
  return lease
    .command(name)
    .description(description)
    .option('--connect <list>', 'node client ports host:port, comma separated, tried in order', DEFAULT_CONNECT)
    .addHelpText('after', DATA_HELP);
}
leaseCommand('grant <ttlMs>', 'grant a lease of ttlMs milliseconds; prints { id, ttlMs, expiresAt }').action(
  async (ttl: string, flags: { connect: string }) => {
    process.exitCode = await withClient(leaseFlags(flags), (client) => leaseGrant(client, ttl));
  },
);
leaseCommand('keep <id>', 'keep a lease alive, one JSON line per renewal, until it is lost or interrupted')
  .option('--once', 'renew once and exit', false)
  .action(async (id: string, flags: { connect: string; once: boolean }) => {
    process.exitCode = await withClient(leaseFlags(flags), (client) => leaseKeep(client, id, flags.once));
  });
leaseCommand('revoke <id>', 'end a lease now: every key attached to it is removed').action(
  async (id: string, flags: { connect: string }) => {
    process.exitCode = await withClient(leaseFlags(flags), (client) => leaseRevoke(client, id));
  },
);

function leaseFlags(flags: { connect: string }): DataOptions {
  return { connect: flags.connect.split(','), output: 'json' };
}

program
  .command('shell')
  .description(
    'an interactive session: get, put [--ttl|--lease], rm, scan, tables, begin/commit/rollback, lease (stdin may be a script)',
  )
  .option('--connect <list>', 'node client ports host:port, comma separated, tried in order', DEFAULT_CONNECT)
  .addHelpText('after', DATA_HELP)
  .action(async (flags: { connect: string }) => {
    const history = join(homedir(), '.basalt_history');
    process.exitCode = await withClient(leaseFlags(flags), (client) =>
      runShell(client, process.stdin, process.stdout, history),
    );
  });

function outputFormat(value: string): Output {
  if (value !== 'json' && value !== 'table') throw new InvalidArgumentError('expected json or table');
  return value;
}

const backupCli = program
  .command('backup')
  .description('back up tables as of one timestamp into a directory (files + manifest); verify a backup')
  .option('--connect <list>', 'node client ports host:port, comma separated, tried in order', DEFAULT_CONNECT)
  .option('--to <dir>', 'the new backup directory (must not exist or be empty)')
  .option('--tables <list>', 'the tables, comma separated (default: all)')
  .option('--at <timestamp>', 'the snapshot timestamp (decimal, or physicalMs.logical; default: now)', timestampFlag)
  .option('--incremental-from <dir>', 'only what changed since this earlier backup, chained to it')
  .option('--gzip', 'gzip the files', false)
  .option('--concurrency <n>', 'partitions read at once (default 4)', positiveInt)
  .addHelpText('after', DATA_HELP)
  .action(async (flags: BackupFlags & { to?: string }) => {
    if (flags.to === undefined) {
      process.stderr.write('basalt: backup needs --to <dir>\n');
      process.exitCode = DATA_EXIT_CODES.invalid;
      return;
    }
    process.exitCode = await backupCommand({ ...flags, to: flags.to });
  });
backupCli
  .command('verify <dir>')
  .description("check every checksum, size and row count of a backup and of its chain's parents")
  .action(async (dir: string) => {
    process.exitCode = await verifyCommand(dir);
  });

program
  .command('restore')
  .description('restore a backup (and its chain) into empty or new tables; rerun to continue an interrupted one')
  .option('--connect <list>', 'node client ports host:port, comma separated, tried in order', DEFAULT_CONNECT)
  .requiredOption('--from <dir>', 'the backup directory (the last of its chain)')
  .option('--tables <list>', 'the tables, comma separated (default: all)')
  .option('--as <name>', 'restore the one table named by --tables under this name')
  .option('--concurrency <n>', 'partitions written at once (default 4)', positiveInt)
  .addHelpText('after', DATA_HELP)
  .action(async (flags: RestoreFlags) => {
    process.exitCode = await restoreCommand(flags);
  });

const nodes = program.command('node').description('list the members of a running cluster, remove one');
withCredentials(nodes.command('list'))
  .description('list the members: name, address, active or leaving')
  .option('--connect <host:port>', 'a node client port', DEFAULT_CONNECT)
  .action(async (options: CredentialFlags & { connect: string }) => {
    await nodeList(options.connect, await credentialOptions(options));
  });
withCredentials(nodes.command('remove <name>'))
  .description('remove a node: its replicas move to the others first (--dead: it is gone; rebuild them elsewhere)')
  .option('--dead', 'the node is gone for good: rebuild its replicas from the survivors', false)
  .option('--connect <host:port>', 'a node client port (of another node)', DEFAULT_CONNECT)
  .action(async (name: string, options: CredentialFlags & { dead: boolean; connect: string }) => {
    await nodeRemove(options.connect, name, options.dead, await credentialOptions(options));
  });

program
  .command('status')
  .description("nodes up/down and every partition's leader, primary, term and applied indexes (from /metrics)")
  .option('--metrics <list>', 'metrics endpoints host:port, comma separated', DEFAULT_METRICS)
  .option('--certs-dir <dir>', 'the endpoints are HTTPS (nodes with certificates): trust ca.crt of this directory')
  .action(async (options: { metrics: string; certsDir?: string }) => {
    const ca = options.certsDir === undefined ? undefined : loadClientTls(options.certsDir, undefined, new Date()).ca;
    const up = await status(options.metrics.split(','), ca);
    if (up === 0) process.exitCode = 1;
  });

withCredentials(program.command('console'))
  .description("print the web console's address on a node's metrics port (every node serves it under /console)")
  .option('--connect <address>', 'the metrics endpoint host:port of the node to ask', DEFAULT_METRICS.split(',')[0])
  .action(async (options: CredentialFlags & { connect: string }) => {
    // A node with certificates serves the console over HTTPS behind a password login (HTTP Basic).
    const { ca, user, password } = await credentialOptions(options);
    const credentials = {
      ...(ca !== undefined && { ca }),
      ...(user !== undefined && { user }),
      ...(password !== undefined && { password }),
    };
    process.exitCode = await consoleCommand(options.connect, credentials);
  });

program
  .command('demo')
  .description('run a bank workload against a running cluster with a live progress line and a final report')
  .option(
    '--connect <list>',
    'node client ports, comma separated (with several, each transfer begins on the node of its first key)',
    DEFAULT_CONNECT,
  )
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

program
  .command('bench')
  .description('benchmark a local 3-process cluster against etcd and the floors (flags: basalt bench --help)')
  .argument('[flags...]', 'passed to the benchmark: --quick, --workload, --clients, --no-fsync, --no-etcd, --profile')
  .allowUnknownOption()
  .helpOption(false)
  .action(async (flags: string[]) => {
    process.exitCode = await runBench(flags);
  });

program
  .command('sim')
  .description('run workloads on a simulated cluster under seeded faults and check their histories')
  .option('--seed <seed>', 'one seed (replays the same run bit for bit)', seedList)
  .option('--seeds <A..B>', 'a range of seeds (inclusive), or a comma-separated list', seedList)
  .option('--workload <name>', `${WORKLOADS.join(', ')}, a comma-separated list, or all`, workloadList, ['list-append'])
  .option('--faults <kinds>', `comma-separated: ${SIM_FAULTS.join(', ')}; or all, or none`, faultList, 'all')
  .option('--nodes <n>', 'number of nodes', positiveInt, 3)
  .option('--duration <s>', 'virtual seconds of the safety phase (faults on)', positiveInt, 6)
  .option(
    '--liveness <s>',
    'virtual seconds the liveness phase may take at most (it ends on progress)',
    positiveInt,
    20,
  )
  .option('--workers <n>', 'concurrent clients, spread over the nodes', positiveInt, 5)
  .option('--partitions <n>', "partitions of the workload's table", positiveInt, 4)
  .option('--rest', 'idle partitions rest and their Raft groups go quiet, as `basalt start` runs them')
  .option('--parallel-commit', 'coordinators commit in parallel with their last writes (a committing record)')
  .option('--batch-writes', 'data writes of many txs proposed in one turn on a partition share one Raft entry')
  .option('--batch-apply', 'committed entries of the Raft groups handed over in one turn apply in one transaction')
  .option('--history <file>', 'write the history as JSON Lines (several runs: <file>.<workload>.<seed>.jsonl)')
  .option('--trace-lines <n>', 'scheduler events shown for a failing run', positiveInt, 40)
  .addHelpText(
    'after',
    `
Phases: safety (workers run while faults are injected), heal (every fault undone, every node up), liveness (the
workers must get operations acknowledged: 10 in all and one for each worker, within --liveness seconds), final
reads, then the checker over the whole history.
Faults: drop (a lossy link), delay (a link holds messages, then delivers them at once), dup (a link duplicates and
reorders), partition (a minority cut off), crash (power loss, restarted later), restart (graceful stop, started
later), skew (clock offsets within half of maxClockSkew).

Exit codes:
  0  every run passed
  1  usage error
  ${EXIT_CODES.crash}  crash or assertion: an exception, a node's background failure, a drive that never settled
  ${EXIT_CODES.liveness}  liveness: too little progress after the heal, the final read never succeeded, or a call never returned
  ${EXIT_CODES.checker}  checker: the history has an anomaly
With several failing runs the highest code wins. A failing run prints its seed, the command that replays it, the
anomalies, the fault log, the last scheduler events and the last operations.`,
  )
  .action(
    async (options: {
      seed?: (string | number)[];
      seeds?: (string | number)[];
      workload: WorkloadName[];
      faults: string;
      nodes: number;
      duration: number;
      liveness: number;
      workers: number;
      partitions: number;
      rest?: boolean;
      parallelCommit?: boolean;
      batchWrites?: boolean;
      batchApply?: boolean;
      history?: string;
      traceLines: number;
    }) => {
      const seeds = options.seeds ?? options.seed ?? [1];
      process.exitCode = await runSim({
        seeds,
        workloads: options.workload,
        faults: parseFaults(options.faults),
        faultsSpec: options.faults,
        nodes: options.nodes,
        durationS: options.duration,
        livenessS: options.liveness,
        workers: options.workers,
        partitions: options.partitions,
        rest: options.rest === true,
        parallelCommit: options.parallelCommit === true,
        batchWrites: options.batchWrites === true,
        batchApply: options.batchApply === true,
        traceLines: options.traceLines,
        ...(options.history !== undefined && { history: options.history }),
      });
    },
  );

program
  .command('jepsen')
  .description(
    'run a sim workload against real `basalt start` processes under kill -9, SIGSTOP and link cuts, then check it',
  )
  .option('--workload <name>', WORKLOADS.join(', '), 'list-append')
  .option('--time <s>', 'seconds of the fault phase', positiveInt, 60)
  .option('--nodes <n>', 'number of node processes', positiveInt, 3)
  .option('--workers <n>', 'concurrent clients, spread over the nodes', positiveInt, 5)
  .option(
    '--seed <n>',
    "seed of the workers' and the nemesis' choices (timing is real, so runs differ)",
    positiveInt,
    1,
  )
  .option('--nemesis-interval <s>', 'mean seconds between nemesis actions', positiveInt, 3)
  .addOption(
    new Option(
      '--nemesis <faults>',
      `nemesis faults, one at a time: ${NEMESIS_FAULTS.join(', ')} (kill -9 and restart, SIGSTOP and SIGCONT, ` +
        'cut the TCP links that isolate a node or split a minority off, renew a node certificate in its ' +
        'certs dir and wait until its ports serve it: with --tls only), all or none',
    )
      .argParser(nemesisList)
      .default([...NEMESIS_FAULTS], 'all'),
  )
  .option('--history <file>', 'write the history as JSON Lines')
  .option(
    '--tls',
    'nodes with certificates (a throwaway CA, mutual TLS between them), clients over TLS as the admin root by client certificate',
  )
  .addHelpText(
    'after',
    `\nExit codes as for basalt sim: 0 passed, 2 crash, ${EXIT_CODES.liveness} liveness, ${EXIT_CODES.checker} checker.`,
  )
  .action(
    async (
      options: {
        workload: string;
        time: number;
        nodes: number;
        workers: number;
        seed: number;
        nemesisInterval: number;
        nemesis: NemesisFault[];
        history?: string;
        tls?: boolean;
      },
      command: Command,
    ) => {
      if (
        options.tls !== true &&
        command.getOptionValueSource('nemesis') === 'cli' &&
        options.nemesis.includes('rotate')
      ) {
        command.error('error: --nemesis rotate renews certificates: it needs --tls');
      }
      const [workload] = workloadList(options.workload);
      process.exitCode = await runJepsen({
        workload: workload!,
        timeS: options.time,
        nodes: options.nodes,
        workers: options.workers,
        seed: options.seed,
        nemesisIntervalS: options.nemesisInterval,
        nemesis: options.nemesis,
        tls: options.tls === true,
        ...(options.history !== undefined && { history: options.history }),
      });
    },
  );

program
  .command('check <file>')
  .description("run a workload's checker on a history file (JSON Lines, as `basalt sim --history` writes it)")
  .option('--workload <name>', WORKLOADS.join(', '), 'list-append')
  .action((file: string, options: { workload: string }) => {
    const [workload] = workloadList(options.workload);
    process.exitCode = runCheck(file, workload!);
  });

interface CertFlags {
  readonly certsDir: string;
  readonly days?: number;
  readonly overwrite: boolean;
}

function certOptions(flags: CertFlags): CertOptions {
  return {
    certsDir: flags.certsDir,
    overwrite: flags.overwrite,
    ...(flags.days !== undefined && { days: flags.days }),
  };
}

function printCreated(what: string, created: CreatedCert): void {
  log(`${what}: wrote ${created.certFile} and ${created.keyFile} (valid until ${created.notAfter.toISOString()})`);
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function nemesisList(value: string): NemesisFault[] {
  try {
    return parseNemesis(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}

function joinFlag(value: string): string {
  try {
    return joinAddress(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}

function advertiseFlag(value: string): Advertised {
  try {
    return advertised(value);
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
}

/** Repeated `--table` flags accumulate; none given stays undefined so that a config file's tables apply. */
function tableSpecs(value: string, previous: TableSpec[] | undefined): TableSpec[] {
  return tableSpec(value, previous ?? []);
}

program.parseAsync(process.argv).then(
  () => process.exit(process.exitCode ?? 0),
  (error: unknown) => {
    process.stderr.write(`basalt: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  },
);
