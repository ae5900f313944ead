import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CellResult } from '../../bench/cells.js';
import { type BenchDocument, compare, formatTable, RESULT_SCHEMA, resultFileName } from '../../bench/report.js';

const FLOORS = { rttP50Us: 50, fsyncP50Us: 300 };

function cell(system: 'basalt' | 'etcd', opsPerSec: number, p50Us: number): CellResult {
  return {
    system,
    workload: 'put',
    clients: 16,
    threads: 2,
    durationS: 2,
    ops: opsPerSec * 2,
    opsPerSec,
    latency: { samples: opsPerSec * 2, p50Us, p99Us: p50Us * 3, p999Us: p50Us * 5, meanUs: p50Us },
    attempts: opsPerSec * 2,
    aborts: 0,
    abortRate: 0,
    retryRate: 0,
    failures: 0,
    firstFailure: undefined,
    casFailures: 0,
    cpuSPerKOps: [0.5, 0.25, 0.25],
    clientCores: 0.4,
    monotonicWindowUs: { fromUs: 0, toUs: 2e6 },
  };
}

function doc(cells: CellResult[], fsync: boolean, etcdRan: boolean): BenchDocument {
  return {
    schema: RESULT_SCHEMA,
    startedAt: '2026-01-02T03:04:05.678Z',
    finishedAt: '2026-01-02T03:05:05.678Z',
    command: ['--quick'],
    machine: {
      cores: 2,
      cpuModel: 'test',
      memoryBytes: 2 ** 30,
      node: 'v20',
      kernel: '6',
      loadAverage: { start: 3.5, end: 1 },
      disk: { dir: '/tmp', device: '/dev/x', fsType: 'ext4', mount: '/' },
    },
    parameters: {
      quick: true,
      fsync,
      workloads: ['put'],
      clients: [16],
      clientThreadsMax: 2,
      warmupS: 0.3,
      durationS: 2,
      cluster: '3 nodes',
      etcd: etcdRan ? { ran: true, version: '3.4.23' } : { ran: false, skipped: '--no-etcd' },
    },
    floors: { rtt: { p50Us: 50, p99Us: 100 }, fsync: { samples: 1, p50Us: 300, p99Us: 600, p999Us: 900, meanUs: 300 } },
    workloads: [],
    cells,
    processes: { basalt: [1, 2, 3] },
    comparisons: compare(cells, FLOORS, fsync),
    failures: [],
  };
}

describe('bench report', () => {
  it('compares Basalt with etcd per workload and concurrency, and Basalt p50 with its floor', () => {
    const rows = compare([cell('basalt', 300, 900), cell('etcd', 600, 1000)], FLOORS, true);
    assert.equal(rows.length, 1);
    assert.equal(rows[0]!.ratio, 0.5);
    assert.equal(rows[0]!.basaltP50OverFloor, 900 / (3 * 50 + 300));
    const alone = compare([cell('basalt', 300, 900)], FLOORS, true);
    assert.equal(alone[0]!.ratio, undefined, 'no ratio without etcd');
  });

  it('prints fsync state, the etcd columns only when etcd ran, and every figure of a cell', () => {
    const both = formatTable(doc([cell('basalt', 300, 900), cell('etcd', 600, 1000)], true, true));
    assert.match(both, /fsync ON/);
    assert.match(both, /load average 3\.5 at the start, 1\.0 at the end/);
    assert.match(
      both,
      /\| put: single-key write \| 16 \| 300 \| 0\.90 \| 2\.70 \| 4\.50 \| 0\.0% \/ – \| 0\.50 \/ 0\.25 \/ 0\.25 \| 0\.40 \|/,
    );
    assert.match(both, /Basalt \/ etcd/);
    assert.match(both, /\| 0\.50 \|$/m, 'the ratio ends the row');
    const alone = formatTable(doc([cell('basalt', 300, 900)], false, false));
    assert.match(alone, /fsync OFF \(--no-fsync: NOT durable\)/);
    assert.match(alone, /etcd: skipped \(--no-etcd\)/);
    assert.doesNotMatch(alone, /Basalt \/ etcd/);
  });

  it('prints the intent cells with their counter deltas, a note when the forced path is not most of them, – for etcd', () => {
    const intent = (workload: CellResult['workload'], local: number, coordinator: number): CellResult => {
      const c = cell('basalt', 100, 2000);
      return {
        ...c,
        workload,
        resolution: {
          nodes: [{ node: 'n1', local, coordinator, commitPartition: 0, recoveries: 0, pending: 5, final: 2 }],
          total: { local, coordinator, commitPartition: 0, recoveries: 0, pending: 5, final: 2 },
          forcedShare:
            workload === 'ro-intent-coordinator' ? coordinator / (local + coordinator) : local / (local + coordinator),
        },
        writerFailures: 0,
      };
    };
    const text = formatTable(
      doc(
        [intent('ro-intent-coordinator', 1, 99), intent('ro-intent-local', 10, 30), cell('etcd', 600, 1000)],
        true,
        true,
      ),
    );
    assert.match(
      text,
      /\| ro-intent-coordinator \| coordinator \| 16 \| 200 \| 100 \| 2\.00 \| 6\.00 \| 10\.00 \| 0 \| 1 \/ 99 \/ 0 \| 99\.0% \| 5 \/ 2 \| 0 \| 0\.15 \| 13\.3× \| – \|/,
    );
    assert.match(text, /ro-intent-local ×16: only 25\.0% resolutions went the forced path/);
    assert.doesNotMatch(text, /ro-intent-coordinator ×16: only/);
    assert.match(text, /\| ro-intent-coordinator: RO get meeting intents, coordinator path \| 16 \|.*\| – \| – \|$/m);
  });

  it('names the JSON file after the start time, sortable and without colons', () => {
    assert.equal(resultFileName(new Date('2026-01-02T03:04:05.678Z')), '2026-01-02T03-04-05Z.json');
  });
});
