/**
 * Physical floors measured in the same run as every benchmark, so that results are quoted as ratios to them:
 * fsync latency of a small append (the cost of one durable write) on this machine's disk.
 */
import { closeSync, fsyncSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface LatencySummary {
  readonly p50Us: number;
  readonly p99Us: number;
  readonly samples: number;
}

export function summarize(samplesUs: number[]): LatencySummary {
  const sorted = [...samplesUs].sort((a, b) => a - b);
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { p50Us: at(0.5), p99Us: at(0.99), samples: sorted.length };
}

/** Appends 128 bytes and fsyncs, `count` times (the first 10% discarded as warm-up). */
export function measureFsync(count = 1000): LatencySummary {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-fsync-'));
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
