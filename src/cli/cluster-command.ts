/**
 * `basalt cluster`: a local cluster of child processes, one `basalt start` each (n1..nN over TCP on loopback, LMDB in
 * `<data>/<name>`), supervised by this process. Each child's output is forwarded prefixed with its name; once every
 * node printed its ready line the supervisor prints how to connect (n1's client address) and its own ready line. A child that
 * exits while the cluster is not stopping is reported with its exit code or signal and not restarted (the others keep
 * running: a minority crash is survivable). SIGINT/SIGTERM stop every child with SIGTERM (graceful) and wait for them;
 * a child still running after `STOP_WAIT_MS` is killed. SIGTERM, not SIGINT: a Ctrl-C at a terminal already sent the
 * children one SIGINT, and a second SIGINT makes a node exit at once. Children are only ever signalled through their
 * own handles.
 *
 * Ports: peers listen on free ports chosen at start (or `--base-port` + i - 1); node i serves clients on
 * `--client-port` + i - 1 and metrics on `--metrics-port` + i - 1 (0: ephemeral, printed by each child).
 */
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ChildNode } from './child-node.js';
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
}

const STOP_WAIT_MS = 20_000;

export async function runCluster(options: ClusterCommandOptions): Promise<number> {
  const stopRequested = untilSignal();
  const names = Array.from({ length: options.nodes }, (_, i) => `n${i + 1}`);
  const peerPorts =
    options.basePort === undefined ? await freePorts(names.length) : names.map((_, i) => options.basePort! + i);
  const members = names.map((n, i) => `${n}=127.0.0.1:${peerPorts[i]}`);
  let stopping = false;
  let crashed = 0;
  const readiness = new Readiness(names);
  const children = names.map((name, i) => {
    const peers = members.filter((_, j) => j !== i).join(',');
    const child = new ChildNode(nodeArgs(options, name, i, peerPorts[i]!, peers), {
      onLine: (line) => {
        log(`[${name}] ${line}`);
        if (!stopping) readiness.observe(name, line);
      },
    });
    void child.exited.then(() => {
      if (stopping) return;
      crashed++;
      log(`basalt: node ${name} (pid ${child.pid}) exited unexpectedly: ${child.describeExit()}`);
    });
    return child;
  });
  for (const [i, child] of children.entries()) log(`basalt: node ${names[i]} is pid ${child.pid}`);
  log(`basalt: supervising ${names.length} node processes (${members.join(',')}); Ctrl-C stops them`);
  const allExited = Promise.all(children.map((c) => c.exited));
  await Promise.race([stopRequested, allExited]);
  stopping = true;
  log('basalt: stopping the nodes');
  for (const child of children) child.signal('SIGTERM');
  const deadline = new Promise<void>((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref());
  await Promise.race([allExited, deadline]);
  for (const child of children) child.signal('SIGKILL');
  await allExited;
  for (const [i, child] of children.entries()) log(`basalt: node ${names[i]} ${child.describeExit()}`);
  return crashed === 0 && children.every((c) => c.describeExit() === 'exit code 0') ? 0 : 1;
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

  constructor(private readonly names: readonly string[]) {}

  observe(name: string, line: string): void {
    if (name === this.names[0]) this.clientAddress ??= /connect\('([^']+)'\)/.exec(line)?.[1];
    if (line.startsWith(`basalt: node ${name} ready`)) this.ready.add(name);
    if (this.announced || this.ready.size < this.names.length) return;
    this.announced = true;
    if (this.clientAddress !== undefined) {
      log(`basalt: connect to the cluster from a program with connect('${this.clientAddress}')`);
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
