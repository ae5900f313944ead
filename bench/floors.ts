/**
 * Physical floors measured in the same run as every benchmark, so that results are quoted as ratios to them: fsync
 * latency of a small append (the cost of one durable write) on the disk of a given directory, and, from them, the
 * floor of a workload: the round trips and fsyncs on its critical path, each at its measured p50. A workload's
 * `measured p50 / floor` says how far the implementation is from what its own protocol's messages and syncs cost.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type LatencySummary, summarize } from './stats.js';

export { type LatencySummary, summarize } from './stats.js';

/** Appends 128 bytes and fsyncs, `count` times (the first 10% discarded as warm-up), in a fresh dir under `parent`. */
export function measureFsync(count = 1000, parent = tmpdir()): LatencySummary {
  const dir = mkdtempSync(join(parent, 'basalt-fsync-'));
  const fd = openSync(join(dir, 'probe'), 'a');
  const payload = Buffer.alloc(128, 7);
  const samples: number[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      writeSync(fd, payload);
      fsyncSync(fd);
      const elapsedUs = (performance.now() - t0) * 1000;
      if (i >= count / 10) samples.push(elapsedUs);
    }
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
  return summarize(samples);
}

/** What a workload's operation waits for, in sequence: round trips and fsyncs on its critical path. */
export interface CriticalPath {
  readonly roundTrips: number;
  readonly fsyncs: number;
  /** How the counts come about, printed with the table. */
  readonly why: string;
}

export interface FloorInputs {
  readonly rttP50Us: number;
  readonly fsyncP50Us: number;
}

/** The latency floor of a path; without fsync (a `--no-fsync` run) its fsyncs cost nothing. */
export function floorUs(path: CriticalPath, floors: FloorInputs, fsync = true): number {
  return path.roundTrips * floors.rttP50Us + (fsync ? path.fsyncs * floors.fsyncP50Us : 0);
}

/** A mix of paths, each with its share of the operations (shares sum to 1): the floor of the mean operation. */
export function mixedFloorUs(
  parts: readonly { readonly share: number; readonly path: CriticalPath }[],
  floors: FloorInputs,
  fsync = true,
): number {
  return parts.reduce((sum, p) => sum + p.share * floorUs(p.path, floors, fsync), 0);
}
