import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { CellResult } from '../../bench/cells.js';
import { CHART_NAMES, chartSpec, readResult, renderChart, writeCharts } from '../../bench/chart.js';
import { type BenchDocument, RESULT_SCHEMA } from '../../bench/report.js';
import type { WorkloadName } from '../../bench/workloads.js';

function cell(system: 'basalt' | 'etcd', workload: WorkloadName, clients: number, opsPerSec: number): CellResult {
  const p99Us = 1e6 / opsPerSec;
  return {
    system,
    workload,
    clients,
    threads: 2,
    durationS: 2,
    ops: opsPerSec * 2,
    opsPerSec,
    latency: { samples: opsPerSec * 2, p50Us: p99Us / 3, p99Us, p999Us: p99Us * 2, meanUs: p99Us / 3 },
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

function result(cells: CellResult[]): BenchDocument {
  const workload = (name: WorkloadName, floorUs: number) => ({
    name,
    title: name,
    basalt: 'b',
    etcd: 'e',
    paths: [],
    floorUs,
  });
  return {
    schema: RESULT_SCHEMA,
    startedAt: '2026-01-02T03:04:05.678Z',
    finishedAt: '2026-01-02T03:05:05.678Z',
    command: [],
    machine: {
      cores: 2,
      cpuModel: 'test',
      memoryBytes: 2 ** 30,
      node: 'v20',
      kernel: '6',
      loadAverage: { start: 1, end: 1 },
      disk: { dir: '/tmp', device: '/dev/x', fsType: 'ext4', mount: '/' },
    },
    parameters: {
      quick: false,
      fsync: true,
      workloads: ['put', 'get'],
      clients: [1, 16],
      clientThreadsMax: 2,
      warmupS: 1,
      durationS: 2,
      cluster: '3 nodes',
      etcd: { ran: true, version: '3.4.23' },
    },
    floors: { rtt: { p50Us: 50, p99Us: 100 }, fsync: { samples: 1, p50Us: 300, p99Us: 600, p999Us: 900, meanUs: 300 } },
    workloads: [workload('put', 400), workload('get', 60)],
    cells,
    processes: {},
    comparisons: [],
    failures: [],
  };
}

const CELLS = [
  cell('basalt', 'put', 1, 300),
  cell('etcd', 'put', 1, 400),
  cell('basalt', 'put', 16, 1200),
  cell('etcd', 'put', 16, 1100),
  cell('basalt', 'get', 1, 3000),
  cell('etcd', 'get', 1, 600),
  cell('basalt', 'get', 16, 14000),
  cell('etcd', 'get', 16, 2000),
];

/** The data values of a spec: what the chart draws. */
function values(doc: BenchDocument, name: (typeof CHART_NAMES)[number]): Record<string, unknown>[] {
  const spec = chartSpec(doc, name) as unknown as { data: { values: Record<string, unknown>[] } };
  return spec.data.values;
}

/** The marks drawn in the SVG groups of class `cls` (one `<path>` or `<line>` each). */
function marksIn(svg: string, cls: string): number {
  let count = 0;
  for (const part of svg.split(`class="${cls}`).slice(1)) {
    const group = part.slice(0, part.indexOf('</g>'));
    count += (group.match(/<(path|line)\b/g) ?? []).length;
  }
  return count;
}

describe('bench charts', () => {
  it('draw one mark per measured cell, and one floor per workload', () => {
    const rows = values(result(CELLS), 'p99');
    const cells = rows.filter((r) => r['system'] !== undefined);
    assert.equal(cells.length, CELLS.length);
    assert.deepEqual(
      rows.filter((r) => r['floorMs'] !== undefined),
      [
        { workload: 'put', floorMs: 0.4 },
        { workload: 'get', floorMs: 0.06 },
      ],
    );
    const basaltGet16 = cells.find((r) => r['system'] === 'basalt' && r['workload'] === 'get' && r['clients'] === '16');
    assert.deepEqual(basaltGet16, { workload: 'get', system: 'basalt', clients: '16', opsPerSec: 14000, p99Ms: 0.071 });
  });

  it('leave out cells that completed nothing', () => {
    const rows = values(result([...CELLS, { ...cell('etcd', 'get', 64, 1), ops: 0 }]), 'throughput');
    assert.equal(rows.filter((r) => r['clients'] === '64').length, 0);
  });

  it('render to SVG in Node: a panel per workload, a bar per cell, the floor lines on the latency chart', async () => {
    const doc = result(CELLS);
    const throughput = await renderChart(doc, 'throughput');
    assert.match(throughput, /^<svg[^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    for (const text of ['Throughput per cell', '>put<', '>get<', '>basalt<', '>etcd<', 'etcd 3.4.23']) {
      assert.ok(throughput.includes(text), `throughput chart lacks ${text}`);
    }
    assert.equal(marksIn(throughput, 'mark-rect role-mark'), CELLS.length, 'one bar per cell');
    const p99 = await renderChart(doc, 'p99');
    assert.ok(p99.includes('p99 latency per cell'));
    assert.equal(marksIn(p99, 'mark-symbol role-mark'), CELLS.length, 'one dot per cell');
    assert.equal(marksIn(p99, 'mark-rule role-mark'), 2, 'one floor line per panel');
  });

  it('are written from a saved result, and refuse a file that is not one', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-chart-'));
    try {
      const file = join(dir, 'result.json');
      writeFileSync(file, JSON.stringify(result(CELLS)));
      const written = await writeCharts(readResult(file), join(dir, 'out'), 'r-');
      assert.deepEqual(
        written.map((f) => f.slice(dir.length + 1)),
        CHART_NAMES.map((n) => join('out', `r-${n}.svg`)),
      );
      assert.ok(readFileSync(written[0] ?? '', 'utf8').startsWith('<svg'));
      writeFileSync(file, JSON.stringify({ schema: 'other' }));
      assert.throws(() => readResult(file), /not a basalt-bench\/1 result/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
