/**
 * The Basalt side of the end-to-end benchmark: three `basalt start` processes on loopback (LMDB with fsync unless
 * `fsync: false`), each serving `connect()` clients on an ephemeral port, with the table `bench:8:3`. With a
 * `profileDir`, each node runs under `node --cpu-prof` and writes its `.cpuprofile` there when it stops.
 * Each node serves /metrics on an ephemeral port (`metricsUrls`), which the intent cells read their resolution counters
 * from. `pause(i)` stops node i with SIGSTOP and `resume(i)` continues it; `stop()` resumes a paused node before it
 * ends every child (SIGINT, then SIGKILL after `STOP_WAIT_MS`) and removes the data directory; both are
 * also registered with the bench's `Cleanup`, so an error or Ctrl-C leaves nothing behind.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { localClientCerts, localClusterCerts } from '../src/cli/certs.js';
import { ChildNode } from '../src/cli/child-node.js';
import { LOCAL_ADMIN } from '../src/cli/cluster-command.js';
import { freePorts } from '../src/cli/free-ports.js';
import type { Cleanup } from './cleanup.js';
import { BENCH_TABLE } from './driver.js';
import { readBenchTls, useBenchTls } from './tls.js';

export const NODE_NAMES = ['n1', 'n2', 'n3'] as const;
/** Partitions of the bench table (3 replicas each, one on every node). */
export const BENCH_PARTITIONS = 8;
const READY_WAIT_MS = 60_000;
export const STOP_WAIT_MS = 10_000;
const OUTPUT_TAIL_LINES = 12;

export interface BasaltClusterOptions {
  /** The directory the data directories go under (the disk whose fsync is the floor). */
  readonly parent: string;
  readonly fsync: boolean;
  readonly profileDir?: string;
  readonly cleanup: Cleanup;
  /** TLS on every port and users (`--tls`): certificates under the cluster's directory, clients log in as the admin. */
  readonly tls?: boolean;
}

export class BasaltCluster {
  private readonly children: ChildNode[] = [];
  readonly dir: string;
  private stopped: Promise<void> | undefined;
  private readonly paused = new Set<number>();
  /** Client addresses of n1, n2, n3 once started. */
  addresses: string[] = [];
  /** The /metrics URLs of n1, n2, n3 once started. */
  metricsUrls: string[] = [];

  constructor(private readonly options: BasaltClusterOptions) {
    // Registered before the directory exists: after a Ctrl-C `add` throws, and nothing is created.
    options.cleanup.add(
      `basalt cluster under ${options.parent}`,
      () => this.stop(),
      () => {
        // SIGKILL ends a stopped process too.
        for (const c of this.children) c.signal('SIGKILL');
        rmSync(this.dir, { recursive: true, force: true });
      },
    );
    this.dir = mkdtempSync(join(options.parent, 'basalt-bench-'));
  }

  get pids(): number[] {
    return this.children.flatMap((c) => (c.pid === undefined ? [] : [c.pid]));
  }

  async start(): Promise<void> {
    const ports = await freePorts(NODE_NAMES.length);
    const certs = this.options.tls === true ? await localClusterCerts(join(this.dir, 'certs'), NODE_NAMES) : undefined;
    if (certs !== undefined) {
      const clientDir = await localClientCerts(join(this.dir, 'certs'), LOCAL_ADMIN);
      useBenchTls(readBenchTls(clientDir, LOCAL_ADMIN));
    }
    const peerAddress = (i: number): string => `${NODE_NAMES[i]}=127.0.0.1:${ports[i]}`;
    const nodeArgs =
      this.options.profileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${this.options.profileDir}`];
    for (const [i, name] of NODE_NAMES.entries()) {
      const peers = NODE_NAMES.flatMap((_, j) => (j === i ? [] : [peerAddress(j)])).join(',');
      this.children.push(
        new ChildNode(
          [
            'start',
            ...['--name', name, '--data', join(this.dir, name), '--port', String(ports[i])],
            ...[
              '--peers',
              peers,
              '--client-port',
              '0',
              '--table',
              `${BENCH_TABLE}:${BENCH_PARTITIONS}:3`,
              '--log-level',
              'warn',
            ],
            ...['--metrics-port', '0'],
            ...(this.options.fsync ? [] : ['--no-fsync']),
            ...(certs === undefined ? [] : ['--certs-dir', certs.get(name)!]),
            ...(certs !== undefined && i === 0 ? ['--init-admin', LOCAL_ADMIN] : []),
          ],
          { nodeArgs },
        ),
      );
    }
    await Promise.all(this.children.map((c, i) => c.waitFor(new RegExp(`node ${NODE_NAMES[i]} ready`), READY_WAIT_MS)));
    this.addresses = await Promise.all(
      this.children.map(
        async (c, i) => (await c.waitFor(new RegExp(`client port of ${NODE_NAMES[i]} on (\\S+):`)))[1]!,
      ),
    );
    this.metricsUrls = await Promise.all(
      this.children.map(
        async (c, i) => (await c.waitFor(new RegExp(`metrics of ${NODE_NAMES[i]}: (\\S+/metrics)`)))[1]!,
      ),
    );
  }

  /** Stops node i (SIGSTOP): it keeps its sockets but answers nothing until `resume(i)`. */
  pause(i: number): void {
    this.children[i]!.signal('SIGSTOP');
    this.paused.add(i);
  }

  resume(i: number): void {
    this.children[i]!.signal('SIGCONT');
    this.paused.delete(i);
  }

  /** Stops every child and removes the data; idempotent. */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      // A stopped process would hold SIGINT pending until the SIGKILL: let it shut down as the others do.
      for (const i of [...this.paused]) this.resume(i);
      for (const c of this.children) c.signal('SIGINT');
      await Promise.all(this.children.map((c) => stopChild(c.exited, () => c.signal('SIGKILL'))));
      rmSync(this.dir, { recursive: true, force: true });
    })();
    return this.stopped;
  }

  exits(): string[] {
    return this.children.map((c, i) => `${NODE_NAMES[i]}: ${c.describeExit()}`);
  }

  tails(): string[] {
    return this.children.map((c, i) => {
      const lines = c.output.trimEnd().split('\n').slice(-OUTPUT_TAIL_LINES);
      return `${NODE_NAMES[i]}:\n${lines.map((l) => `    ${l}`).join('\n')}`;
    });
  }
}

/** Waits for `exited` up to `STOP_WAIT_MS`, then kills and waits again. */
export async function stopChild(exited: Promise<unknown>, kill: () => void, waitMs = STOP_WAIT_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, waitMs);
  });
  await Promise.race([exited, timedOut]);
  clearTimeout(timer);
  kill();
  await exited;
}
