/**
 * Charts of one benchmark result (a `bench-results/<date>.json`): throughput and p99 latency per cell, one panel per
 * workload, Basalt beside etcd at each concurrency, and on the latency chart each workload's floor (its critical
 * path's round trips and fsyncs at their measured p50s) drawn as a line. The specs are Vega-Lite, compiled to Vega
 * and rendered to SVG in Node (a headless View: renderer 'none', then toSVG), so no browser is needed.
 *
 * `npm run bench -- --chart` writes them next to the JSON; `node dist/bench/chart.js <results.json> <outdir>` makes
 * them from a saved result.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, View } from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import { type BenchDocument, RESULT_SCHEMA } from './report.js';

/** The charts one result gives, by file name stem. */
export const CHART_NAMES = ['throughput', 'p99'] as const;
export type ChartName = (typeof CHART_NAMES)[number];

const SYSTEM_COLORS = { domain: ['basalt', 'etcd'], range: ['#c2410c', '#2563eb'] };
const PANEL_WIDTH = 170;
const PANEL_HEIGHT = 150;
const PANELS_PER_ROW = 3;

/** One row per measured cell, and one per workload for its floor. */
interface Row {
  readonly workload: string;
  readonly system?: string;
  readonly clients?: string;
  readonly opsPerSec?: number;
  readonly p99Ms?: number;
  readonly floorMs?: number;
}

function rowsOf(doc: BenchDocument): Row[] {
  const order = new Map(doc.workloads.map((w, i) => [w.name, i]));
  const cells: Row[] = [...doc.cells]
    .filter((c) => c.ops > 0)
    .sort((a, b) => (order.get(a.workload) ?? 0) - (order.get(b.workload) ?? 0) || a.clients - b.clients)
    .map((c) => ({
      workload: c.workload,
      system: c.system,
      clients: String(c.clients),
      opsPerSec: Math.round(c.opsPerSec * 10) / 10,
      p99Ms: Math.round(c.latency.p99Us) / 1000,
    }));
  const floors: Row[] = doc.workloads.map((w) => ({ workload: w.name, floorMs: Math.round(w.floorUs) / 1000 }));
  return [...cells, ...floors];
}

function subtitleOf(doc: BenchDocument): string {
  const p = doc.parameters;
  const etcd = p.etcd.ran ? `etcd ${p.etcd.version ?? ''} beside it`.replace('  ', ' ') : 'etcd not run';
  return `${doc.startedAt.slice(0, 10)}, ${doc.machine.cores} cores, fsync ${p.fsync ? 'on' : 'OFF'}, ${etcd}; ${p.durationS} s per cell`;
}

/** The Vega-Lite spec of one chart of `doc`. */
export function chartSpec(doc: BenchDocument, name: ChartName): TopLevelSpec {
  const throughput = name === 'throughput';
  const field = throughput ? 'opsPerSec' : 'p99Ms';
  const workloads = doc.workloads.map((w) => w.name);
  // Bars for throughput; on the log scale of the latency chart (the floors are a thousand times below the p99s) a
  // bar has no baseline, so each cell is a dot.
  const cells = {
    transform: [{ filter: 'isValid(datum.system)' }],
    mark: throughput
      ? { type: 'bar' as const, tooltip: true }
      : { type: 'point' as const, filled: true, size: 70, opacity: 1, tooltip: true },
    encoding: {
      x: {
        field: 'clients',
        type: 'ordinal' as const,
        title: 'concurrent clients',
        sort: null,
        axis: { labelAngle: 0 },
      },
      xOffset: { field: 'system', type: 'nominal' as const },
      y: {
        field,
        type: 'quantitative' as const,
        title: throughput ? 'operations per second' : 'p99 latency (ms, log scale)',
        ...(throughput ? {} : { scale: { type: 'log' as const } }),
      },
      color: { field: 'system', type: 'nominal' as const, scale: SYSTEM_COLORS, title: 'system' },
    },
  };
  const floor = {
    transform: [{ filter: 'isValid(datum.floorMs)' }],
    mark: { type: 'rule' as const, strokeDash: [4, 3], color: '#111827' },
    encoding: { y: { field: 'floorMs', type: 'quantitative' as const } },
  };
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: throughput ? 'Throughput per cell' : 'p99 latency per cell (dashed: the floor of the critical path)',
      subtitle: subtitleOf(doc),
    },
    data: { values: rowsOf(doc) },
    facet: { field: 'workload', type: 'nominal', title: null, sort: workloads },
    columns: PANELS_PER_ROW,
    resolve: { scale: { y: 'independent' } },
    spec: {
      width: PANEL_WIDTH,
      height: PANEL_HEIGHT,
      layer: throughput ? [cells] : [cells, floor],
    },
    config: { font: 'sans-serif', background: 'white' },
  } as TopLevelSpec;
}

/** One chart of `doc` as SVG text. */
export async function renderChart(doc: BenchDocument, name: ChartName): Promise<string> {
  const vega = compile(chartSpec(doc, name)).spec;
  const view = new View(parse(vega), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** Writes every chart of `doc` into `outDir` as `<prefix><name>.svg`; returns the files written. */
export async function writeCharts(doc: BenchDocument, outDir: string, prefix = ''): Promise<string[]> {
  mkdirSync(outDir, { recursive: true });
  const files: string[] = [];
  for (const name of CHART_NAMES) {
    const file = join(outDir, `${prefix}${name}.svg`);
    writeFileSync(file, await renderChart(doc, name));
    files.push(file);
  }
  return files;
}

/** A result file, checked to be one this version of the bench wrote. */
export function readResult(path: string): BenchDocument {
  const doc = JSON.parse(readFileSync(path, 'utf8')) as BenchDocument;
  if (doc?.schema !== RESULT_SCHEMA || !Array.isArray(doc.cells) || !Array.isArray(doc.workloads)) {
    throw new Error(`${path} is not a ${RESULT_SCHEMA} result`);
  }
  return doc;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [input, outDir] = process.argv.slice(2);
  if (input === undefined || outDir === undefined) {
    console.error('usage: node dist/bench/chart.js <results.json> <outdir>');
    process.exitCode = 2;
  } else {
    for (const file of await writeCharts(readResult(input), outDir)) console.log(file);
  }
}
