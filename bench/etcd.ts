/**
 * The etcd side of the end-to-end benchmark: a 3-member etcd cluster on loopback (client and peer ports free right
 * now, fresh data directories, default snapshot, compaction and heartbeat settings), found on PATH. `stop()` sends
 * SIGTERM to each member it started, SIGKILL after `STOP_WAIT_MS`, and removes the data; both are registered with the
 * bench's `Cleanup`. etcd fsyncs its WAL on every commit; it has no switch to turn that off.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { Etcd3 } from 'etcd3';
import { freePorts } from '../src/cli/free-ports.js';
import type { Cleanup } from './cleanup.js';
import { stopChild } from './cluster.js';

const MEMBERS = ['e1', 'e2', 'e3'] as const;
const READY_WAIT_MS = 30_000;
const POLL_MS = 100;
const OUTPUT_CHARS_MAX = 20_000;
/** A member told to stop hands its leadership to a peer that is stopping too and waits for it: do not wait long. */
const STOP_WAIT_MS = 2_000;

export const ETCD_INSTALL_HINT = 'apt-get install etcd-server etcd-client (Debian/Ubuntu), or put etcd on PATH';

/** The `etcd` binary on PATH, or undefined. */
export function findEtcd(path = process.env['PATH'] ?? ''): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, 'etcd');
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

interface Member {
  readonly process: ChildProcess;
  readonly exited: Promise<void>;
  output: string;
}

export class EtcdCluster {
  readonly dir: string;
  private readonly members: Member[] = [];
  private stopped: Promise<void> | undefined;
  addresses: string[] = [];
  version = 'unknown';

  constructor(
    private readonly binary: string,
    parent: string,
    cleanup: Cleanup,
  ) {
    // Registered before the directory exists: after a Ctrl-C `add` throws, and nothing is created.
    cleanup.add(
      `etcd cluster under ${parent}`,
      () => this.stop(),
      () => {
        for (const m of this.members) if (m.process.exitCode === null) m.process.kill('SIGKILL');
        rmSync(this.dir, { recursive: true, force: true });
      },
    );
    this.dir = mkdtempSync(join(parent, 'etcd-bench-'));
  }

  get pids(): number[] {
    return this.members.flatMap((m) => (m.process.pid === undefined ? [] : [m.process.pid]));
  }

  async start(): Promise<void> {
    const ports = await freePorts(MEMBERS.length * 2);
    const clientUrl = (i: number): string => `http://127.0.0.1:${ports[i]}`;
    const peerUrl = (i: number): string => `http://127.0.0.1:${ports[MEMBERS.length + i]}`;
    const initialCluster = MEMBERS.map((name, i) => `${name}=${peerUrl(i)}`).join(',');
    for (const [i, name] of MEMBERS.entries()) {
      const child = spawn(
        this.binary,
        [
          ...['--name', name, '--data-dir', join(this.dir, name)],
          ...['--listen-client-urls', clientUrl(i), '--advertise-client-urls', clientUrl(i)],
          ...['--listen-peer-urls', peerUrl(i), '--initial-advertise-peer-urls', peerUrl(i)],
          ...['--initial-cluster', initialCluster, '--initial-cluster-state', 'new'],
          ...['--initial-cluster-token', `bench-${process.pid}`, '--log-level', 'warn'],
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      const member: Member = {
        process: child,
        exited: new Promise((resolve) => child.once('exit', () => resolve())),
        output: '',
      };
      const keep = (chunk: Buffer): void => {
        member.output = (member.output + chunk.toString()).slice(-OUTPUT_CHARS_MAX);
      };
      child.stdout!.on('data', keep);
      child.stderr!.on('data', keep);
      this.members.push(member);
    }
    this.addresses = MEMBERS.map((_, i) => `127.0.0.1:${ports[i]}`);
    await this.untilServing();
  }

  /** Polls a linearizable read on every member until each answers (the cluster has a leader and a quorum). */
  private async untilServing(): Promise<void> {
    const deadline = Date.now() + READY_WAIT_MS;
    for (const [i, address] of this.addresses.entries()) {
      const client = new Etcd3({ hosts: `http://${address}` });
      try {
        for (;;) {
          try {
            await client.get('bench/ready').string();
            if (i === 0) this.version = (await client.maintenance.status()).version;
            break;
          } catch (error) {
            const exited = this.members[i]!.process.exitCode !== null;
            if (exited || Date.now() > deadline) {
              throw new Error(
                `etcd member ${MEMBERS[i]} did not serve (${String(error)}); output:\n${this.members[i]!.output}`,
              );
            }
            await new Promise((r) => setTimeout(r, POLL_MS));
          }
        }
      } finally {
        client.close();
      }
    }
  }

  stop(): Promise<void> {
    this.stopped ??= (async () => {
      await Promise.all(
        this.members.map((m) => {
          if (m.process.exitCode === null && m.process.signalCode === null) m.process.kill('SIGTERM');
          return stopChild(
            m.exited,
            () => {
              if (m.process.exitCode === null && m.process.signalCode === null) m.process.kill('SIGKILL');
            },
            STOP_WAIT_MS,
          );
        }),
      );
      rmSync(this.dir, { recursive: true, force: true });
    })();
    return this.stopped;
  }
}
