/**
 * `basalt cluster`: a local cluster of child processes, one `basalt start` each (n1..nN over TCP on loopback, LMDB in
 * `<data>/<name>`), supervised by this process. Each child's output is forwarded prefixed with its name; once every
 * node printed its ready line (every partition it hosts has a primary) the supervisor prints how to connect (n1's
 * client address) and its own ready line. A child that exits while the cluster is not stopping is reported with its
 * exit code or signal and the exact command that restarts it; with `--restart` the supervisor restarts it itself,
 * with backoff (the others keep running meanwhile: a minority crash is survivable). SIGINT/SIGTERM stop every child with SIGTERM (graceful) and wait for them;
 * a child still running after `STOP_WAIT_MS` is killed. SIGTERM, not SIGINT: a Ctrl-C at a terminal already sent the
 * children one SIGINT, and a second SIGINT makes a node exit at once. Children are only ever signalled through their
 * own handles.
 *
 * Ports: peers listen on free ports chosen at start (or `--base-port` + i - 1); node i serves clients on
 * `--client-port` + i - 1 and metrics on `--metrics-port` + i - 1 (0: ephemeral, printed by each child).
 */
import { createServer } from 'node:net';
import { join } from 'node:path';
import { localClientCerts, localClusterCerts } from './certs.js';
import { BASALT_MAIN, ChildNode } from './child-node.js';
import { log, type TableSpec, untilSignal } from './common.js';
import type { LogLevel } from './logging.js';

export interface ClusterCommandOptions {
  readonly nodes: number;
  readonly data: string;
  readonly basePort?: number;
  readonly clientPort: number;
  readonly metricsPort: number;
  readonly table: readonly TableSpec[];
  readonly logLevel: LogLevel;
  readonly statusIntervalMs: number;
  /** Restart a node process that exits unexpectedly (with backoff) instead of only reporting it. */
  readonly restart: boolean;
  /**
   * TLS on the peer and client ports, with a throwaway CA and node certificates under `<data>/certs` (certs.ts), and
   * users: n1 creates the admin `LOCAL_ADMIN`, who logs in with the client certificate in `<data>/certs/client`.
   */
  readonly tls?: boolean;
}

/** The admin of a `basalt cluster --tls`, by client certificate (no password exists). */
export const LOCAL_ADMIN = 'root';

const STOP_WAIT_MS = 20_000;
const RESTART_BACKOFF_MS_MIN = 1_000;
const RESTART_BACKOFF_MS_MAX = 30_000;
/** A child that ran this long before it exited counts as healthy: its next restart waits the minimum again. */
const RESTART_STABLE_MS = 60_000;

export async function runCluster(options: ClusterCommandOptions): Promise<number> {
  const stopRequested = untilSignal();
  const names = Array.from({ length: options.nodes }, (_, i) => `n${i + 1}`);
  const peerPorts =
    options.basePort === undefined ? await freePorts(names.length) : names.map((_, i) => options.basePort! + i);
  const members = names.map((n, i) => `${n}=127.0.0.1:${peerPorts[i]}`);
  const certDirs = options.tls === true ? await localClusterCerts(join(options.data, 'certs'), names) : undefined;
  const clientDir = options.tls === true ? await localClientCerts(join(options.data, 'certs'), LOCAL_ADMIN) : undefined;
  let stopping = false;
  let crashed = 0;
  const readiness = new Readiness(names, clientDir);
  const supervised = names.map((name, i) => {
    const peers = members.filter((_, j) => j !== i).join(',');
    const certsDir = certDirs?.get(name);
    const args = [...nodeArgs(options, name, i, peerPorts[i]!, peers), ...(certsDir ? ['--certs-dir', certsDir] : [])];
    if (certsDir !== undefined && i === 0) args.push('--init-admin', LOCAL_ADMIN);
    return new SupervisedNode(name, args, {
      restart: options.restart,
      stopping: () => stopping,
      onLine: (line) => {
        log(`[${name}] ${line}`);
        if (!stopping) readiness.observe(name, line);
      },
      onCrash: () => {
        crashed++;
      },
    });
  });
  for (const node of supervised) log(`basalt: node ${node.name} is pid ${node.child.pid}`);
  log(`basalt: supervising ${names.length} node processes (${members.join(',')}); Ctrl-C stops them`);
  const allDown = Promise.all(supervised.map((n) => n.down));
  await Promise.race([stopRequested, allDown]);
  stopping = true;
  log('basalt: stopping the nodes');
  for (const node of supervised) node.child.signal('SIGTERM');
  const exited = () => Promise.all(supervised.map((n) => n.child.exited));
  const deadline = new Promise<void>((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref());
  await Promise.race([exited(), deadline]);
  for (const node of supervised) node.child.signal('SIGKILL');
  await exited();
  for (const node of supervised) log(`basalt: node ${node.name} ${node.child.describeExit()}`);
  return crashed === 0 && supervised.every((n) => n.child.describeExit() === 'exit code 0') ? 0 : 1;
}

interface SupervisionOptions {
  readonly restart: boolean;
  readonly stopping: () => boolean;
  readonly onLine: (line: string) => void;
  readonly onCrash: () => void;
}

/**
 * One node process of the cluster. A child that exits while the cluster is not stopping is reported with the exact
 * command that brings it back; with `--restart` it is started again after a backoff that doubles from
 * `RESTART_BACKOFF_MS_MIN` up to `RESTART_BACKOFF_MS_MAX`, and resets once a child has run for `RESTART_STABLE_MS`.
 * `down` settles when the node exited and will not be restarted.
 */
class SupervisedNode {
  child: ChildNode;
  readonly down: Promise<void>;
  private backoffMs = RESTART_BACKOFF_MS_MIN;
  private markDown: () => void = () => {};

  constructor(
    readonly name: string,
    private readonly args: readonly string[],
    private readonly options: SupervisionOptions,
  ) {
    this.down = new Promise((resolve) => {
      this.markDown = resolve;
    });
    this.child = this.spawn();
  }

  private spawn(): ChildNode {
    const child = new ChildNode(this.args, { onLine: this.options.onLine });
    const startedMs = Date.now();
    void child.exited.then(() => this.exited(child, Date.now() - startedMs));
    return child;
  }

  private exited(child: ChildNode, ranMs: number): void {
    if (this.options.stopping()) {
      this.markDown();
      return;
    }
    this.options.onCrash();
    log(`basalt: node ${this.name} (pid ${child.pid}) exited unexpectedly: ${child.describeExit()}`);
    if (!this.options.restart) {
      log(`basalt: bring it back with: ${restartCommand(this.args)} (or run basalt cluster with --restart)`);
      this.markDown();
      return;
    }
    if (ranMs >= RESTART_STABLE_MS) this.backoffMs = RESTART_BACKOFF_MS_MIN;
    const waitMs = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, RESTART_BACKOFF_MS_MAX);
    log(`basalt: restarting node ${this.name} in ${waitMs} ms`);
    setTimeout(() => {
      if (this.options.stopping()) {
        this.markDown();
        return;
      }
      this.child = this.spawn();
      log(`basalt: node ${this.name} restarted as pid ${this.child.pid}`);
    }, waitMs).unref();
  }
}

/** The shell command that starts a node exactly as the supervisor did (run from the same directory). */
export function restartCommand(args: readonly string[]): string {
  const quote = (a: string) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`);
  return [process.execPath, BASALT_MAIN, ...args].map(quote).join(' ');
}

function nodeArgs(options: ClusterCommandOptions, name: string, i: number, peerPort: number, peers: string): string[] {
  const args = ['start', '--name', name, '--port', String(peerPort), '--data', join(options.data, name)];
  if (peers.length > 0) args.push('--peers', peers);
  args.push('--client-port', String(options.clientPort === 0 ? 0 : options.clientPort + i));
  args.push('--metrics-port', String(options.metricsPort === 0 ? 0 : options.metricsPort + i));
  args.push('--log-level', options.logLevel, '--status-interval', String(options.statusIntervalMs));
  for (const t of options.table) args.push('--table', `${t.name}:${t.partitions}:${t.replicas}`);
  return args;
}

/**
 * Watches the children's lines for their ready lines and n1's client address; prints the connect line and the
 * cluster's ready line once, when every node is ready.
 */
class Readiness {
  private readonly ready = new Set<string>();
  private clientAddress: string | undefined;
  private announced = false;

  constructor(
    private readonly names: readonly string[],
    /** With TLS: the directory of the admin's client certificate. */
    private readonly clientDir: string | undefined,
  ) {}

  observe(name: string, line: string): void {
    if (name === this.names[0]) this.clientAddress ??= /connect\('([^']+)'\)/.exec(line)?.[1];
    if (line.startsWith(`basalt: node ${name} ready`)) this.ready.add(name);
    if (this.announced || this.ready.size < this.names.length) return;
    this.announced = true;
    if (this.clientAddress !== undefined) {
      const tls =
        this.clientDir === undefined
          ? ''
          : ` and the options { ca, cert, key } read from ${this.clientDir} (ca.crt, client.${LOCAL_ADMIN}.crt, ` +
            `client.${LOCAL_ADMIN}.key; user ${LOCAL_ADMIN}, admin), or basalt ... --certs-dir ${this.clientDir} --user ${LOCAL_ADMIN}`;
      log(`basalt: connect to the cluster from a program with connect('${this.clientAddress}')${tls}`);
    }
    log(`basalt: ready: ${this.names.length}/${this.names.length} nodes ready`);
  }
}

/** Ports free right now (each listened on once, then released). */
export async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  const servers = [];
  for (let i = 0; i < count; i++) {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    ports.push((server.address() as { port: number }).port);
    servers.push(server);
  }
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}
