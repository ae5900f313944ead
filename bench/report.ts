/**
 * The end-to-end benchmark's results: one JSON document (machine, parameters, floors, every cell) written to
 * `bench-results/`, and a Markdown table on stdout with Basalt and etcd side by side per workload and concurrency,
 * Basalt's p50 over its floor and the Basalt/etcd throughput ratio.
 */
import { execFileSync } from 'node:child_process';
import { cpus, loadavg, release, totalmem } from 'node:os';
import type { CellResult } from './cells.js';
import { type CriticalPath, type FloorInputs, mixedFloorUs } from './floors.js';
import type { FunctionTime } from './profile.js';
import type { LatencySummary } from './stats.js';
import { formatWatchSection, type WatchSectionResult } from './watch.js';
import { WORKLOADS, type WorkloadName } from './workloads.js';

export const RESULT_SCHEMA = 'basalt-bench/1';

export interface Machine {
  readonly cores: number;
  readonly cpuModel: string;
  readonly memoryBytes: number;
  readonly node: string;
  readonly kernel: string;
  /** 1-minute load average when the run started and when it ended: figures from a loaded machine are noisy. */
  readonly loadAverage: { readonly start: number; readonly end: number };
  /** `df -PT` of the data directories' parent: device, filesystem type, mount point. */
  readonly disk: { readonly dir: string; readonly device: string; readonly fsType: string; readonly mount: string };
}

export interface Parameters {
  readonly quick: boolean;
  readonly fsync: boolean;
  readonly workloads: readonly WorkloadName[];
  readonly clients: readonly number[];
  readonly clientThreadsMax: number;
  readonly warmupS: number;
  readonly durationS: number;
  readonly cluster: string;
  readonly etcd: { readonly ran: boolean; readonly version?: string; readonly skipped?: string };
}

export interface Floors {
  readonly rtt: { readonly p50Us: number; readonly p99Us: number };
  readonly fsync: LatencySummary;
}

export interface ProfileResult {
  readonly workload: WorkloadName;
  readonly clients: number;
  readonly files: readonly string[];
  /** The profiled cell: the top functions count only samples of its measured window. */
  readonly cell?: CellResult;
  readonly top: readonly { readonly node: string; readonly functions: readonly FunctionTime[] }[];
}

export interface BenchDocument {
  readonly schema: typeof RESULT_SCHEMA;
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly command: readonly string[];
  readonly machine: Machine;
  readonly parameters: Parameters;
  readonly floors: Floors;
  readonly workloads: readonly {
    readonly name: WorkloadName;
    readonly title: string;
    readonly basalt: string;
    readonly etcd: string;
    readonly paths: readonly { readonly share: number; readonly path: CriticalPath }[];
    readonly floorUs: number;
  }[];
  readonly cells: readonly CellResult[];
  /** Every server process the run started, by system (all stopped when the file is written). */
  readonly processes: Readonly<Record<string, readonly number[]>>;
  readonly comparisons: readonly Comparison[];
  readonly failures: readonly { readonly what: string; readonly error: string }[];
  readonly profile?: ProfileResult;
  /** The watch section (bench/watch.ts): put throughput with 0, 1 and 10 watchers, and the watchers' delivery lag. */
  readonly watch?: WatchSectionResult;
}

export interface Comparison {
  readonly workload: WorkloadName;
  readonly clients: number;
  readonly basaltOpsPerSec: number | undefined;
  readonly etcdOpsPerSec: number | undefined;
  /** Basalt / etcd throughput. */
  readonly ratio: number | undefined;
  readonly basaltP50OverFloor: number | undefined;
}

export function describeMachine(dir: string, loadAtStart: number): Machine {
  let disk = { dir, device: 'unknown', fsType: 'unknown', mount: 'unknown' };
  try {
    const line = execFileSync('df', ['-PT', dir], { encoding: 'utf8' }).trim().split('\n')[1] ?? '';
    const f = line.split(/\s+/);
    disk = { dir, device: f[0] ?? 'unknown', fsType: f[1] ?? 'unknown', mount: f[6] ?? 'unknown' };
  } catch {
    // no df: the disk stays unknown
  }
  return {
    cores: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryBytes: totalmem(),
    node: process.version,
    kernel: release(),
    loadAverage: { start: loadAtStart, end: loadavg()[0] ?? 0 },
    disk,
  };
}

export function workloadFloorUs(name: WorkloadName, floors: FloorInputs, fsync: boolean): number {
  return mixedFloorUs(WORKLOADS[name].parts, floors, fsync);
}

/** One row per workload and concurrency that either system measured. */
export function compare(cells: readonly CellResult[], floors: FloorInputs, fsync: boolean): Comparison[] {
  const rows: Comparison[] = [];
  const seen = new Set<string>();
  for (const c of cells) {
    const id = `${c.workload}/${c.clients}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const basalt = cells.find((x) => x.system === 'basalt' && x.workload === c.workload && x.clients === c.clients);
    const etcd = cells.find((x) => x.system === 'etcd' && x.workload === c.workload && x.clients === c.clients);
    const floor = workloadFloorUs(c.workload, floors, fsync);
    rows.push({
      workload: c.workload,
      clients: c.clients,
      basaltOpsPerSec: basalt?.opsPerSec,
      etcdOpsPerSec: etcd?.opsPerSec,
      ratio:
        basalt !== undefined && etcd !== undefined && etcd.opsPerSec > 0
          ? basalt.opsPerSec / etcd.opsPerSec
          : undefined,
      basaltP50OverFloor:
        basalt !== undefined && basalt.ops > 0 && floor > 0 ? basalt.latency.p50Us / floor : undefined,
    });
  }
  return rows;
}

// ------------------------------------------------------------------ the table

const ms = (us: number): string => (us >= 100_000 ? (us / 1000).toFixed(0) : (us / 1000).toFixed(2));
const rate = (n: number): string => (n >= 100 ? n.toFixed(0) : n.toFixed(1));
const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

/** One budget over every cell that has it, as `title: workload ×clients figure, ...`; nothing when no cell has it. */
function budgetLine(
  cells: readonly CellResult[],
  title: string,
  figure: (c: CellResult) => string | undefined,
): string[] {
  const parts = cells.flatMap((c) => {
    const f = figure(c);
    return f === undefined ? [] : [`${c.workload} ×${c.clients} ${f}`];
  });
  return parts.length === 0 ? [] : ['', `${title}: ${parts.join(', ')}`];
}

function cpuCell(c: CellResult): string {
  if (c.cpuSPerKOps.some((v) => v === undefined)) return 'n/a';
  return c.cpuSPerKOps.map((v) => v!.toFixed(2)).join(' / ');
}

function systemCells(c: CellResult | undefined, transactional: boolean): string[] {
  if (c === undefined) return ['', '', '', '', '', '', ''];
  if (c.ops === 0) return ['0', 'no op completed', '', '', '', cpuCell(c), c.clientCores.toFixed(2)];
  const contention = transactional ? `${pct(c.abortRate)} / ${c.retryRate.toFixed(2)}` : `${pct(c.abortRate)} / –`;
  const latency = [ms(c.latency.p50Us), ms(c.latency.p99Us), ms(c.latency.p999Us)];
  return [rate(c.opsPerSec), ...latency, contention, cpuCell(c), c.clientCores.toFixed(2)];
}

export function formatTable(doc: BenchDocument): string {
  const lines: string[] = [];
  const p = doc.parameters;
  const f = doc.floors;
  const etcdRan = p.etcd.ran;
  lines.push(
    `Basalt: ${p.cluster}; storage LMDB, ${p.fsync ? 'fsync ON' : 'fsync OFF (--no-fsync: NOT durable)'}.`,
    `Clients: ${p.clientThreadsMax === 1 ? 'one client thread' : `up to ${p.clientThreadsMax} client threads`} ` +
      `(worker_threads in the bench process, thread i on node/member i mod 3; a Basalt thread also connects to ` +
      `the other nodes and sends each single-key put/get to its key's primary, connectCluster); ` +
      `${p.warmupS} s warm-up + ${p.durationS} s measured per cell.`,
    etcdRan
      ? `etcd ${p.etcd.version}: 3 members on loopback, fresh data dirs, fsync always on (etcd has no switch).`
      : `etcd: skipped (${p.etcd.skipped}).`,
    `Machine: ${doc.machine.cores} cores (${doc.machine.cpuModel}), ${(doc.machine.memoryBytes / 2 ** 30).toFixed(1)} GiB, ` +
      `Node ${doc.machine.node}, data on ${doc.machine.disk.device} (${doc.machine.disk.fsType}) at ${doc.machine.disk.dir}; ` +
      `load average ${doc.machine.loadAverage.start.toFixed(1)} at the start, ${doc.machine.loadAverage.end.toFixed(1)} at the end.`,
    `Floors: loopback TCP RTT p50 ${f.rtt.p50Us.toFixed(0)} µs p99 ${f.rtt.p99Us.toFixed(0)} µs; ` +
      `fsync (128 B append) p50 ${f.fsync.p50Us.toFixed(0)} µs p99 ${f.fsync.p99Us.toFixed(0)} µs.`,
    '',
    'Latencies in ms. aborts / retries: share of operations aborted (transactions: after all retries; implicit ' +
      'operations: a retryable failure, not retried) / retries per transaction.',
    'CPU: CPU seconds per 1,000 operations of each server process (n1 / n2 / n3; etcd e1 / e2 / e3); client ' +
      'cores: CPU of the bench process (all client threads) over the window.',
    'floor: RTT and fsync p50s times the round trips and fsyncs on the workload’s critical path (see below).',
    '',
  );
  const header = [
    'workload',
    'clients',
    'Basalt ops/s',
    'p50',
    'p99',
    'p999',
    'aborts / retries',
    'CPU s/1k ops',
    'client cores',
    'floor',
    'p50 / floor',
  ];
  if (etcdRan)
    header.push(
      'etcd ops/s',
      'p50',
      'p99',
      'p999',
      'aborts / retries',
      'CPU s/1k ops',
      'client cores',
      'Basalt / etcd',
    );
  // A run of the watch section alone has no cell for this table.
  if (doc.comparisons.length > 0) lines.push(`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`);
  const floors = { rttP50Us: f.rtt.p50Us, fsyncP50Us: f.fsync.p50Us };
  for (const row of doc.comparisons) {
    const spec = WORKLOADS[row.workload];
    const find = (system: string): CellResult | undefined =>
      doc.cells.find((c) => c.system === system && c.workload === row.workload && c.clients === row.clients);
    const floor = workloadFloorUs(row.workload, floors, p.fsync);
    const cells = [
      `${row.workload}: ${spec.title}`,
      String(row.clients),
      ...systemCells(find('basalt'), spec.transactional),
      ms(floor),
      row.basaltP50OverFloor === undefined ? '' : `${row.basaltP50OverFloor.toFixed(1)}×`,
    ];
    if (etcdRan) {
      // etcd has no write intents: nothing to compare an intent cell with.
      if (spec.resolutionPath !== undefined) cells.push(...Array.from({ length: 8 }, () => '–'));
      else
        cells.push(
          ...systemCells(find('etcd'), spec.transactional),
          row.ratio === undefined ? '' : row.ratio.toFixed(2),
        );
    }
    lines.push(`| ${cells.join(' | ')} |`);
  }
  lines.push(...formatResolution(doc, floors));
  lines.push(
    ...budgetLine(
      doc.cells,
      'Raft log entries per operation (Basalt, every partition group, counted on n1 over the window)',
      (c) => c.logEntriesPerOp?.toFixed(2),
    ),
    ...budgetLine(
      doc.cells,
      'Peer messages / socket writes per operation (Basalt, between the nodes, all nodes over the window)',
      (c) =>
        c.peerMessagesPerOp === undefined
          ? undefined
          : `${c.peerMessagesPerOp.toFixed(1)}/${c.peerWritesPerOp?.toFixed(1)}`,
    ),
    ...budgetLine(
      doc.cells,
      'Storage transactions applying partition entries per operation (Basalt, all nodes over the window)',
      (c) => c.applyStepsPerOp?.toFixed(2),
    ),
  );
  if (doc.watch !== undefined) lines.push(...formatWatchSection(doc.watch));
  if (doc.workloads.length > 0) lines.push('', 'Workloads (Basalt | etcd) and the critical path of the floor:');
  for (const w of doc.workloads) {
    const paths = w.paths.map((x) => `${x.share < 1 ? `${x.share} × ` : ''}${x.path.why}`).join(' + ');
    lines.push(`  ${w.name}: ${w.basalt} | ${w.etcd}`, `      floor ${ms(w.floorUs)} ms: ${paths}`);
  }
  const notes = doc.cells.flatMap((c) => {
    const out: string[] = [];
    if (c.failures > 0)
      out.push(`${c.system} ${c.workload} ×${c.clients}: ${c.failures} failed, first: ${c.firstFailure}`);
    if (c.casFailures > 0) out.push(`${c.system} ${c.workload} ×${c.clients}: ${c.casFailures} failed compares`);
    return out;
  });
  for (const f of doc.failures) notes.push(`${f.what}: FAILED: ${f.error}`);
  if (notes.length > 0) lines.push('', 'Failures:', ...notes.map((n) => `  ${n}`));
  if (doc.profile !== undefined) lines.push('', ...formatProfile(doc.profile));
  return lines.join('\n');
}

const PATH_NAMES = { local: 'local', coordinator: 'coordinator', commitPartition: 'commit partition' } as const;

/**
 * The intent cells: reads, their latencies and floor, and how many intents each path resolved (summed over the
 * nodes; per node in the JSON), so that the split is the measured one. etcd has none: –.
 */
export function formatResolution(doc: BenchDocument, floors: FloorInputs): string[] {
  const cells = doc.cells.filter((c) => c.resolution !== undefined);
  if (cells.length === 0) return [];
  const lines = [
    '',
    'RO reads meeting write intents, by resolution path (resolutions: counter deltas of every node over the cell, ' +
      'warm-up included; forced share: resolutions on the path the cell forces / all):',
    '',
    '| cell | path forced | clients | reads | reads/s | p50 | p99 | p999 | failed or aborted | resolutions local / coordinator / ' +
      'commit partition | forced share | answers PENDING / final | recoveries | floor | p50 / floor | etcd |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const c of cells) {
    const r = c.resolution!;
    const spec = WORKLOADS[c.workload];
    const floor = workloadFloorUs(c.workload, floors, doc.parameters.fsync);
    const measured = c.ops > 0;
    lines.push(
      `| ${c.workload} | ${PATH_NAMES[spec.resolutionPath!]} | ${c.clients} | ${c.ops} | ${rate(c.opsPerSec)} | ` +
        `${measured ? [ms(c.latency.p50Us), ms(c.latency.p99Us), ms(c.latency.p999Us)].join(' | ') : '– | – | –'} | ` +
        `${c.failures + c.aborts} | ${r.total.local} / ${r.total.coordinator} / ${r.total.commitPartition} | ` +
        `${r.forcedShare === undefined ? 'none resolved' : pct(r.forcedShare)} | ${r.total.pending} / ${r.total.final} | ${r.total.recoveries} | ${ms(floor)} | ` +
        `${measured && floor > 0 ? `${(c.latency.p50Us / floor).toFixed(1)}×` : ''} | – |`,
    );
  }
  const notes = cells.flatMap((c) => {
    const out: string[] = [];
    const share = c.resolution!.forcedShare;
    if (share === undefined || share < 0.5)
      out.push(
        `${c.workload} ×${c.clients}: only ${share === undefined ? 'no' : pct(share)} resolutions went the forced path`,
      );
    const resolved = c.resolution!.total.local + c.resolution!.total.coordinator + c.resolution!.total.commitPartition;
    // The deltas cover the warm-up too, so this compares with the measured reads only roughly.
    if (resolved < c.ops / 2)
      out.push(
        `${c.workload} ×${c.clients}: ${resolved} resolutions for ${c.ops} measured reads: most reads met no intent`,
      );
    if ((c.writerFailures ?? 0) > 0) out.push(`${c.workload} ×${c.clients}: ${c.writerFailures} writer txs failed`);
    return out;
  });
  if (notes.length > 0) lines.push('', ...notes.map((n) => `  ${n}`));
  return lines;
}

export function formatProfile(profile: ProfileResult): string[] {
  const c = profile.cell;
  const figures = c === undefined ? '' : `: ${c.opsPerSec.toFixed(0)} ops/s, p50 ${ms(c.latency.p50Us)} ms`;
  const lines = [
    `CPU profile of ${profile.workload} with ${profile.clients} clients${figures} ` +
      '(self time in the measured window; (idle) is time the node waited):',
  ];
  for (const t of profile.top) {
    lines.push(`  ${t.node}:`);
    for (const fn of t.functions) {
      lines.push(`    ${fn.selfMs.toFixed(0).padStart(7)} ms ${pct(fn.selfShare).padStart(6)}  ${fn.function}`);
    }
  }
  lines.push(`  profiles: ${profile.files.join(', ')}`);
  return lines;
}

/** The JSON file's name for a run that started at `date`: sortable and free of ':' (which some file systems refuse). */
export function resultFileName(date: Date): string {
  return `${date
    .toISOString()
    .replace(/\.\d+Z$/, 'Z')
    .replace(/:/g, '-')}.json`;
}
