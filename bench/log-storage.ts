/**
 * Raft log storage benchmark: LmdbLogStorage (one LMDB environment, each save one async transaction) against
 * SegmentedLogStorage (one append-only log, one write + one fdatasync per batch), with sync on unless asked otherwise.
 * A save is what a Ready persists on the hot path: one entry of `payloadBytes` plus the hard state. Two cells:
 *   - sequential: one group, each save awaited before the next (latency of one durable save);
 *   - concurrent: `groups` groups, each a loop awaiting its own saves (group commit throughput).
 * The machine is shared, so the implementations run back to back in alternating rounds and every round is quoted.
 * Each storage is opened in a fresh temp directory before its clock starts (a new segment is preallocated then).
 * Run standalone: `npx tsc -p . && node dist/bench/log-storage.js [--no-sync] [--rounds N]`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type LogIndex, type PartitionId, partitionId, type Term } from '../src/core/ids.js';
import { LmdbLogStorage } from '../src/raft/lmdb-log-storage.js';
import type { LogStorage } from '../src/raft/log-storage.js';
import { SegmentedLogStorage } from '../src/raft/segmented-log-storage.js';
import type { Entry } from '../src/raft/types.js';
import { openLmdbEnvironment } from '../src/storage/lmdb-environment.js';
import { measureFsync } from './floors.js';
import { type LatencySummary, summarize } from './stats.js';

export type LogStorageKind = 'lmdb' | 'segmented';

export interface LogStorageBenchOptions {
  readonly sync?: boolean;
  readonly rounds?: number;
  readonly sequentialSaves?: number;
  readonly concurrentMs?: number;
  readonly groups?: number;
  readonly payloadBytes?: number;
}

export interface LogStorageCell {
  readonly kind: LogStorageKind;
  readonly round: number;
  readonly cell: 'sequential' | 'concurrent';
  readonly saves: number;
  readonly savesPerSec: number;
  readonly latency: LatencySummary;
  /** Segmented log only: saves per fdatasync. */
  readonly savesPerBatch?: number;
}

export interface LogStorageBenchResult {
  readonly sync: boolean;
  readonly groups: number;
  readonly payloadBytes: number;
  readonly fsyncFloor: LatencySummary;
  readonly cells: readonly LogStorageCell[];
}

interface Opened {
  readonly storage: LogStorage;
  readonly batches: () => number;
  readonly close: () => Promise<void>;
}

async function openKind(kind: LogStorageKind, dir: string, sync: boolean): Promise<Opened> {
  if (kind === 'lmdb') {
    const root = openLmdbEnvironment(dir, { sync });
    return { storage: new LmdbLogStorage(root), batches: () => 0, close: () => root.close() };
  }
  const log = await SegmentedLogStorage.open(dir, { sync });
  return { storage: log, batches: () => log.stats().batches, close: () => log.close() };
}

/** Saves entry `index` of `group` with the hard state that goes with it. */
function saveOne(storage: LogStorage, group: PartitionId, index: number, payload: Uint8Array): Promise<void> {
  const entry: Entry = { index: index as LogIndex, term: 1 as Term, kind: 'data', data: payload };
  const hardState = { term: 1 as Term, vote: null, commit: (index - 1) as LogIndex };
  return storage.save(group, { hardState, snapshot: null, entries: [entry] });
}

async function sequential(
  o: Opened,
  saves: number,
  payload: Uint8Array,
): Promise<Omit<LogStorageCell, 'kind' | 'round'>> {
  const group = partitionId('bench-seq');
  const samples: number[] = [];
  const warmup = Math.floor(saves / 10);
  let t0 = 0;
  for (let i = 1; i <= saves + warmup; i++) {
    if (i === warmup + 1) t0 = performance.now();
    const start = performance.now();
    await saveOne(o.storage, group, i, payload);
    if (i > warmup) samples.push((performance.now() - start) * 1000);
  }
  const elapsedS = (performance.now() - t0) / 1000;
  return { cell: 'sequential', saves, savesPerSec: saves / elapsedS, latency: summarize(samples) };
}

async function concurrent(
  o: Opened,
  groups: number,
  durationMs: number,
  payload: Uint8Array,
): Promise<Omit<LogStorageCell, 'kind' | 'round'>> {
  const ids = Array.from({ length: groups }, (_, i) => partitionId(`bench-c${i}`));
  const warmupMs = Math.min(300, durationMs / 4);
  const measureFrom = performance.now() + warmupMs;
  const end = measureFrom + durationMs;
  const samples: number[] = [];
  let saves = 0;
  let batchesAtStart = -1;
  const loop = async (group: PartitionId): Promise<void> => {
    for (let index = 1; ; index++) {
      const start = performance.now();
      if (start >= end) return;
      if (start >= measureFrom && batchesAtStart < 0) batchesAtStart = o.batches();
      await saveOne(o.storage, group, index, payload);
      const done = performance.now();
      if (start >= measureFrom && done <= end) {
        saves++;
        samples.push((done - start) * 1000);
      }
    }
  };
  await Promise.all(ids.map(loop));
  const batches = o.batches() - Math.max(0, batchesAtStart);
  return {
    cell: 'concurrent',
    saves,
    savesPerSec: saves / (durationMs / 1000),
    latency: summarize(samples),
    ...(batches > 0 && { savesPerBatch: saves / batches }),
  };
}

export async function runLogStorageBench(options: LogStorageBenchOptions = {}): Promise<LogStorageBenchResult> {
  const sync = options.sync ?? true;
  const rounds = options.rounds ?? 2;
  const groups = options.groups ?? 64;
  const payloadBytes = options.payloadBytes ?? 100;
  const payload = new Uint8Array(payloadBytes).fill(7);
  const cells: LogStorageCell[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const kind of ['lmdb', 'segmented'] as const) {
      const dir = mkdtempSync(join(tmpdir(), `basalt-bench-log-${kind}-`));
      try {
        const o = await openKind(kind, dir, sync);
        try {
          cells.push({ kind, round, ...(await sequential(o, options.sequentialSaves ?? 2_000, payload)) });
          cells.push({ kind, round, ...(await concurrent(o, groups, options.concurrentMs ?? 2_000, payload)) });
        } finally {
          await o.close();
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
  return { sync, groups, payloadBytes, fsyncFloor: measureFsync(1_000), cells };
}

export function formatLogStorageBench(r: LogStorageBenchResult): string {
  const us = (n: number): string => `${n.toFixed(0)} us`;
  const lines = [
    `raft log storage: save = 1 entry of ${r.payloadBytes} B + hard state, ${r.sync ? 'sync on' : 'WITHOUT sync'}; ` +
      `fsync floor p50 ${us(r.fsyncFloor.p50Us)} p99 ${us(r.fsyncFloor.p99Us)}`,
  ];
  for (const c of r.cells) {
    const what = c.cell === 'sequential' ? '1 group, sequential' : `${r.groups} groups, concurrent`;
    const batch = c.savesPerBatch === undefined ? '' : `, ${c.savesPerBatch.toFixed(1)} saves/sync`;
    lines.push(
      `  round ${c.round} ${c.kind.padEnd(9)} ${what.padEnd(22)} ${c.savesPerSec.toFixed(0).padStart(7)} saves/s  ` +
        `p50 ${us(c.latency.p50Us).padStart(8)}  p99 ${us(c.latency.p99Us).padStart(8)}${batch}`,
    );
  }
  return lines.join('\n');
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const roundsAt = process.argv.indexOf('--rounds');
  const rounds = roundsAt > 0 ? Number(process.argv[roundsAt + 1]) : 2;
  console.log(formatLogStorageBench(await runLogStorageBench({ sync: !process.argv.includes('--no-sync'), rounds })));
}
