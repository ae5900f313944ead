import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CellResult } from '../../bench/cells.js';
import { summarize } from '../../bench/stats.js';
import { formatWatchSection, LagRecorder, type WatchCell } from '../../bench/watch.js';
import { hybridTimestamp } from '../../src/hlc/timestamp.js';

describe('bench watch lag', () => {
  it('is the wall clock at receipt minus the physical ms of the commitTs, the logical part ignored', () => {
    const r = new LagRecorder();
    r.record(100, 1_000_007, hybridTimestamp(1_000_000, 5));
    r.record(200, 1_000_020, hybridTimestamp(1_000_019));
    assert.deepEqual([...r.within({ fromUs: 0, toUs: 1_000 })], [7_000, 1_000]);
  });

  it('counts only the events received inside the window [from, to)', () => {
    const r = new LagRecorder();
    for (let i = 0; i < 10; i++) r.record(i * 10, 500 + i, hybridTimestamp(500));
    // Received at 20, 30, 40 (50 is the window's end): lags 2, 3, 4 ms.
    assert.deepEqual([...r.within({ fromUs: 20, toUs: 50 })], [2_000, 3_000, 4_000]);
    assert.equal(r.within({ fromUs: 1_000, toUs: 2_000 }).length, 0);
  });
});

describe('bench watch section output', () => {
  const puts = (opsPerSec: number): CellResult =>
    ({ opsPerSec, durationS: 1, failures: 0, latency: summarize([1_000, 2_000]) }) as unknown as CellResult;
  const cells: WatchCell[] = [
    { watchers: 0, puts: puts(1_000), watcherFailures: 0 },
    {
      watchers: 1,
      puts: puts(900),
      eventsPerWatcherPerSec: 900,
      lag: summarize(Array.from({ length: 100 }, (_, i) => (i + 1) * 1_000)),
      watcherFailures: 0,
    },
    { watchers: 10, puts: puts(500), watcherFailures: 2, firstWatcherFailure: 'WATCH_FELL_BEHIND' },
  ];

  it('prints one row per W with throughput relative to no watcher and the lag percentiles in ms (whole ms from 100)', () => {
    const lines = formatWatchSection({ clients: 16, cells });
    const row = (w: number): string | undefined => lines.find((l) => l.startsWith(`| ${w} |`));
    assert.equal(row(0), '| 0 | 1000 | 100% | 1.0 | 2.0 | – | – | – | – |');
    assert.equal(row(1), '| 1 | 900 | 90% | 1.0 | 2.0 | 900 | 50.0 | 99.0 | 100 |');
    assert.equal(row(10), '| 10 | 500 | 50% | 1.0 | 2.0 | – | – | – | – |');
    assert.ok(lines.some((l) => l.includes('2 watch streams failed: WATCH_FELL_BEHIND')));
  });

  it('prints nothing when no watch cell ran', () => {
    assert.deepEqual(formatWatchSection({ clients: 16, cells: [] }), []);
  });
});
