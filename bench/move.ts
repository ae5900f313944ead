/**
 * How fast a partition moves, and what clients see meanwhile: a 3-node real-time cluster (TCP on loopback, LMDB with
 * fsync) holds one table of one partition loaded with `--mb` megabytes; a fourth node joins and the node leaving
 * (`removeNode`, graceful) hands its replica over: the new replica catches up (a snapshot of the partition, then the
 * log) and is promoted, then the old one is removed. A client keeps writing to the partition throughout; its put
 * latencies before and during the move are reported, with the catch-up rate (megabytes loaded / move time) and the
 * longest time between two acknowledged puts. `--leaving primary` removes the partition's primary (its lease is handed
 * off to a remaining replica, rule 5) instead of a follower.
 *
 *   node dist/bench/move.js [--mb 64] [--value-bytes 1024] [--leaving follower|primary]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { startCluster } from '../src/index.js';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function summary(latencies: readonly number[]): string {
  const sorted = [...latencies].sort((a, b) => a - b);
  const f = (x: number) => x.toFixed(2);
  return `${sorted.length} puts, p50 ${f(quantile(sorted, 0.5))} ms, p99 ${f(quantile(sorted, 0.99))} ms, max ${f(sorted.at(-1) ?? Number.NaN)} ms`;
}

async function main(): Promise<void> {
  const mb = arg('mb', 64);
  const valueBytes = arg('value-bytes', 1024);
  const leavingIndex = process.argv.indexOf('--leaving');
  const leavingRole = leavingIndex < 0 ? 'follower' : process.argv[leavingIndex + 1];
  if (leavingRole !== 'follower' && leavingRole !== 'primary') throw new Error('--leaving is follower or primary');
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-move-'));
  const log = (line: string) => process.stderr.write(`move: ${line}\n`);
  const cluster = await startCluster({ nodes: 3, transport: 'tcp', dataDir });
  try {
    const client = cluster.client('n1');
    await client.createTable('moving', { partitions: 1, replicas: 3 });
    const value = 'x'.repeat(valueBytes);
    const keys = Math.ceil((mb * 1024 * 1024) / valueBytes);
    const batch = 256;
    const loadStart = performance.now();
    for (let i = 0; i < keys; i += batch) {
      await client.transaction(async (tx) => {
        const entries = [];
        for (let k = i; k < Math.min(keys, i + batch); k++) entries.push({ key: `k${k}`, value });
        await tx.putAll('moving', entries);
      });
    }
    log(`loaded ${keys} keys (${mb} MB) in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);

    let phase: 'before' | 'during' | 'after' = 'before';
    const latencies = { before: [] as number[], during: [] as number[], after: [] as number[] };
    let writing = true;
    let n = 0;
    let lastAck = performance.now();
    const maxGap = { before: 0, during: 0, after: 0 };
    const writer = (async () => {
      while (writing) {
        const t = performance.now();
        try {
          await client.put('moving', `w${n++ % 1000}`, n);
          const now = performance.now();
          maxGap[phase] = Math.max(maxGap[phase], now - lastAck);
          lastAck = now;
        } catch {}
        latencies[phase].push(performance.now() - t);
      }
    })();
    await new Promise((r) => setTimeout(r, 3_000));
    phase = 'during';
    const moveStart = performance.now();
    const joined = await cluster.addNode();
    const primary = cluster.placement('moving', 'k0').primary;
    const leaving =
      leavingRole === 'primary' && primary !== undefined
        ? primary
        : (['n3', 'n2', 'n1'].find((n) => n !== primary) ?? 'n3');
    await cluster.removeNode(leaving);
    await cluster.rebalanced();
    const moveSeconds = (performance.now() - moveStart) / 1000;
    phase = 'after';
    await new Promise((r) => setTimeout(r, 3_000));
    writing = false;
    await writer;
    const placement = cluster.assignments();
    log(
      `moved the partition's replica from ${leaving} (${leaving === primary ? 'the primary' : 'a follower'}) to ${joined} in ${moveSeconds.toFixed(1)} s: ${(mb / moveSeconds).toFixed(1)} MB/s`,
    );
    log(`replicas now ${[...placement.values()].map((r) => r.join(',')).join(' ')}`);
    log(`puts before the move: ${summary(latencies.before)}`);
    log(`puts during the move: ${summary(latencies.during)}`);
    log(`puts after the move:  ${summary(latencies.after)}`);
    const gap = (ms: number) => `${ms.toFixed(0)} ms`;
    log(
      `longest time between two acknowledged puts: before ${gap(maxGap.before)}, during ${gap(maxGap.during)}, after ${gap(maxGap.after)}`,
    );
    log(`a 1 GB partition at this rate: about ${(1024 / (mb / moveSeconds)).toFixed(0)} s`);
  } finally {
    await cluster.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`move: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
