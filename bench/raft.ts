/**
 * Raft benchmark: one 3-node group in 3 OS processes, over real TCP on loopback, each node with its own Raft log
 * storage (the segmented log nodes use, or `log: 'lmdb'`) and sync on (unless `sync: false`, which the report says). The proposers run in the leader's
 * process; a commit is timed from `propose()` to its promise resolving, i.e. durable on a quorum, committed and
 * applied on the leader. Reported for 1 and 64 concurrent proposers, next to the physical floors measured in the
 * same run: loopback TCP round trip and fsync latency.
 * Run standalone: `npx tsc -p . && node dist/bench/raft.js [--no-sync] [--lmdb]`; or call `runRaftBench()`.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { open, type RootDatabase } from 'lmdb';
import { type NodeName, nodeId, nodeName, type PartitionId, partitionId } from '../src/core/ids.js';
import { RealRandom } from '../src/env/real-random.js';
import { RealTimers } from '../src/env/real-timers.js';
import { TcpTransport } from '../src/net/tcp-transport.js';
import { RaftDriver, type RaftStateMachine, type RaftTransport } from '../src/raft/driver.js';
import { LmdbLogStorage } from '../src/raft/lmdb-log-storage.js';
import type { LogStorage } from '../src/raft/log-storage.js';
import { SegmentedLogStorage } from '../src/raft/segmented-log-storage.js';
import type { Entry } from '../src/raft/types.js';
import { type LatencySummary, measureFsync, summarize } from './floors.js';

export interface RaftBenchCell {
  readonly proposers: number;
  readonly commits: number;
  readonly commitsPerSec: number;
  readonly latency: LatencySummary;
}

export type RaftBenchLog = 'segmented' | 'lmdb';

export interface RaftBenchResult {
  readonly sync: boolean;
  readonly log: RaftBenchLog;
  readonly cells: readonly RaftBenchCell[];
  readonly rttFloor: LatencySummary;
  readonly fsyncFloor: LatencySummary;
}

export interface RaftBenchOptions {
  readonly sync?: boolean;
  readonly log?: RaftBenchLog;
  readonly durationMs?: number;
  readonly proposers?: readonly number[];
  readonly payloadBytes?: number;
}

const GROUP: PartitionId = partitionId('bench');
const NAMES = ['n1', 'n2', 'n3'].map(nodeName);
const CHILD_FLAG = '--raft-bench-node';

// ------------------------------------------------------------------ parent

type ChildMessage =
  | { readonly kind: 'listening'; readonly port: number }
  | { readonly kind: 'status'; readonly role: string }
  | { readonly kind: 'result'; readonly commits: number; readonly elapsedMs: number; readonly latenciesUs: number[] }
  | { readonly kind: 'echo'; readonly port: number };

function nextMessage<K extends ChildMessage['kind']>(
  child: ChildProcess,
  kind: K,
): Promise<Extract<ChildMessage, { kind: K }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: ChildMessage): void => {
      if (m.kind !== kind) return;
      child.off('message', onMessage);
      child.off('exit', onExit);
      resolve(m as Extract<ChildMessage, { kind: K }>);
    };
    const onExit = (code: number | null): void => reject(new Error(`bench node exited (${code}) awaiting ${kind}`));
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

export async function runRaftBench(options: RaftBenchOptions = {}): Promise<RaftBenchResult> {
  const sync = options.sync ?? true;
  const log = options.log ?? 'segmented';
  const durationMs = options.durationMs ?? 3_000;
  const dir = mkdtempSync(join(tmpdir(), 'basalt-raft-bench-'));
  const self = fileURLToPath(import.meta.url);
  const children = NAMES.map((name) =>
    fork(self, [CHILD_FLAG, name, join(dir, name), String(sync), log], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    }),
  );
  try {
    const ports = await Promise.all(children.map((c) => nextMessage(c, 'listening')));
    const peers = Object.fromEntries(NAMES.map((n, i) => [n, `127.0.0.1:${ports[i]!.port}`]));
    for (const c of children) c.send({ kind: 'peers', peers });
    const leader = await waitForLeader(children);
    const cells: RaftBenchCell[] = [];
    for (const proposers of options.proposers ?? [1, 64]) {
      leader.send({ kind: 'run', proposers, durationMs, payloadBytes: options.payloadBytes ?? 100 });
      const r = await nextMessage(leader, 'result');
      cells.push({
        proposers,
        commits: r.commits,
        commitsPerSec: r.commits / (r.elapsedMs / 1000),
        latency: summarize(r.latenciesUs),
      });
    }
    leader.send({ kind: 'echo' });
    const echo = await nextMessage(leader, 'echo');
    const rttFloor = await measureRtt(echo.port, 5_000);
    const fsyncFloor = measureFsync(1_000);
    return { sync, log, cells, rttFloor, fsyncFloor };
  } finally {
    for (const c of children) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

async function waitForLeader(children: readonly ChildProcess[]): Promise<ChildProcess> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const roles = await Promise.all(
      children.map((c) => {
        const p = nextMessage(c, 'status');
        c.send({ kind: 'status' });
        return p;
      }),
    );
    const i = roles.findIndex((r) => r.role === 'leader');
    if (i >= 0) return children[i]!;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('no Raft leader within 10 s');
}

/** Sequential 100-byte ping-pongs with the leader's process (the first 10% dropped as warm-up). */
async function measureRtt(port: number, count: number): Promise<LatencySummary> {
  const socket = await new Promise<Socket>((resolve) => {
    const s = netConnect(port, '127.0.0.1', () => resolve(s));
  });
  socket.setNoDelay(true);
  const payload = Buffer.alloc(100, 1);
  const samples: number[] = [];
  for (let i = 0; i < count; i++) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      let got = 0;
      const onData = (chunk: Buffer): void => {
        got += chunk.length;
        if (got >= payload.length) {
          socket.off('data', onData);
          resolve();
        }
      };
      socket.on('data', onData);
      socket.write(payload);
    });
    if (i >= count / 10) samples.push((performance.now() - t0) * 1000);
  }
  socket.destroy();
  return summarize(samples);
}

export function formatRaftBench(r: RaftBenchResult): string {
  const us = (n: number): string => `${(n / 1000).toFixed(2)} ms`;
  const lines = [
    `raft: 3 nodes, 3 processes, TCP loopback, ${r.log === 'lmdb' ? 'LMDB log' : 'segmented log'} ` +
      `${r.sync ? 'with fsync' : 'WITHOUT fsync'}`,
    `  floors: loopback RTT p50 ${r.rttFloor.p50Us.toFixed(0)} us p99 ${r.rttFloor.p99Us.toFixed(0)} us; ` +
      `fsync p50 ${r.fsyncFloor.p50Us.toFixed(0)} us p99 ${r.fsyncFloor.p99Us.toFixed(0)} us`,
  ];
  // One commit needs at least a round trip to a follower plus its fsync (the leader's own fsync runs meanwhile).
  const floorUs = r.fsyncFloor.p50Us + r.rttFloor.p50Us;
  for (const c of r.cells) {
    lines.push(
      `  ${String(c.proposers).padStart(2)} proposer(s): ${c.commitsPerSec.toFixed(0)} commits/s, ` +
        `p50 ${us(c.latency.p50Us)} p99 ${us(c.latency.p99Us)} ` +
        `(p50 = ${(c.latency.p50Us / floorUs).toFixed(1)}x the floor fsync + RTT = ${us(floorUs)})`,
    );
  }
  return lines.join('\n');
}

// ------------------------------------------------------------------ child: one Raft node

type ParentMessage =
  | { readonly kind: 'peers'; readonly peers: Readonly<Record<string, string>> }
  | { readonly kind: 'status' }
  | { readonly kind: 'run'; readonly proposers: number; readonly durationMs: number; readonly payloadBytes: number }
  | { readonly kind: 'echo' };

/** Counts applied entries; the benchmark does not need the data. */
class CountingStateMachine implements RaftStateMachine {
  applied = 0;
  appliedIndex(): number {
    return this.applied;
  }
  apply(_group: PartitionId, entries: readonly Entry[]): void {
    this.applied = entries[entries.length - 1]?.index ?? this.applied;
  }
  snapshot(): Uint8Array {
    return new Uint8Array(0);
  }
  restore(_group: PartitionId, snapshot: { index: number }): void {
    this.applied = snapshot.index;
  }
}

async function openLog(kind: RaftBenchLog, path: string, sync: boolean): Promise<LogStorage> {
  if (kind === 'segmented') return SegmentedLogStorage.open(path, { sync });
  const root: RootDatabase = open({ path, maxDbs: 16, noSync: !sync, overlappingSync: false });
  return new LmdbLogStorage(root);
}

async function runChild(name: NodeName, path: string, sync: boolean, log: RaftBenchLog): Promise<void> {
  const send = (m: ChildMessage): void => {
    process.send?.(m);
  };
  const timers = new RealTimers();
  const random = new RealRandom();
  const transport = await TcpTransport.start({
    self: { name, id: nodeId(random.uuid()) },
    host: '127.0.0.1',
    port: 0,
    timers,
    random,
  });
  let driver: RaftDriver | null = null;
  send({ kind: 'listening', port: transport.port });
  process.on('message', (m: ParentMessage) => {
    switch (m.kind) {
      case 'peers': {
        for (const [peer, address] of Object.entries(m.peers)) transport.addPeer(nodeName(peer), address);
        void openLog(log, path, sync).then((storage) => {
          driver = new RaftDriver({
            self: name,
            transport: adapt(transport),
            timers,
            random,
            storage,
            stateMachine: new CountingStateMachine(),
          });
          return driver.addGroup(GROUP, NAMES);
        });
        return;
      }
      case 'status':
        send({ kind: 'status', role: driver?.status(GROUP)?.role ?? 'starting' });
        return;
      case 'run':
        if (driver !== null) void runProposers(driver, m.proposers, m.durationMs, m.payloadBytes).then(send);
        return;
      case 'echo': {
        const server = createServer((s) => {
          s.setNoDelay(true);
          s.on('data', (chunk) => s.write(chunk));
        });
        server.listen(0, '127.0.0.1', () => {
          const address = server.address();
          send({ kind: 'echo', port: typeof address === 'object' && address !== null ? address.port : 0 });
        });
        return;
      }
    }
  });
}

function adapt(transport: TcpTransport): RaftTransport {
  return {
    send: (to, envelope) => transport.send(to, envelope),
    setHandler: (handler) =>
      transport.setHandler((event) => {
        if (event.kind === 'message') handler(event.from.name, event.payload);
      }),
  };
}

/** `proposers` loops, each proposing and awaiting one entry at a time, for `durationMs` after a short warm-up. */
async function runProposers(
  driver: RaftDriver,
  proposers: number,
  durationMs: number,
  payloadBytes: number,
): Promise<ChildMessage> {
  const payload = new Uint8Array(payloadBytes).fill(7);
  const warmupMs = Math.min(500, durationMs / 4);
  const t0 = performance.now();
  const measureFrom = t0 + warmupMs;
  const end = measureFrom + durationMs;
  const latenciesUs: number[] = [];
  let commits = 0;
  const loop = async (): Promise<void> => {
    for (;;) {
      const start = performance.now();
      if (start >= end) return;
      await driver.propose(GROUP, payload);
      const done = performance.now();
      if (start >= measureFrom && done <= end) {
        commits++;
        latenciesUs.push((done - start) * 1000);
      }
    }
  };
  await Promise.all(Array.from({ length: proposers }, loop));
  return { kind: 'result', commits, elapsedMs: durationMs, latenciesUs };
}

if (process.argv[2] === CHILD_FLAG) {
  void runChild(
    nodeName(process.argv[3]!),
    process.argv[4]!,
    process.argv[5] === 'true',
    process.argv[6] as RaftBenchLog,
  );
} else if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const sync = !process.argv.includes('--no-sync');
  console.log(
    formatRaftBench(await runRaftBench({ sync, log: process.argv.includes('--lmdb') ? 'lmdb' : 'segmented' })),
  );
}
