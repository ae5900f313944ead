/**
 * `npm run bench`: Basalt end to end next to etcd and next to the physical floors, measured in one run on this machine.
 * A 3-process `basalt start` cluster (TCP loopback, LMDB, fsync on unless `--no-fsync`) and, when `etcd` is on PATH,
 * a 3-member etcd cluster run the same workloads (bench/workloads.ts) from client threads in this process, for each
 * concurrency, each cell after a warm-up for a fixed time. The floors (loopback RTT, fsync on the data directories'
 * disk) are measured first. Output: a Markdown table on stdout, progress on stderr, every figure in
 * `bench-results/<date>.json`. Everything started is stopped and every directory created is removed, also on errors
 * and Ctrl-C (a node an intent cell stopped with SIGSTOP is resumed first). The intent cells (bench/intents.ts) run on
 * Basalt only and are left out of `--quick` unless named. `npm run bench -- components` runs the older component
 * benchmarks (net, storage, Raft) instead. `--chart` also writes SVG charts of the result next to it (bench/chart.ts).
 */
import { mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import {
  type CellResult,
  type CellSpec,
  ClientPool,
  loadBasalt,
  loadEtcd,
  type PeerTrafficCount,
  type System,
} from './cells.js';
import { writeCharts } from './chart.js';
import { Cleanup } from './cleanup.js';
import { BasaltCluster, BENCH_PARTITIONS, NODE_NAMES } from './cluster.js';
import { runComponentSections } from './components.js';
import { ETCD_INSTALL_HINT, EtcdCluster, findEtcd } from './etcd.js';
import { measureFsync } from './floors.js';
import {
  appliedPartitionEntries,
  type IntentControl,
  parseResolutionCounts,
  peerTrafficOf,
  prepareIntentCell,
  type ResolutionCounts,
  resolutionDeltas,
  scrape,
} from './intents.js';
import { measureLoopbackRoundTrip } from './net.js';
import { readCpuProfile, topSelfTime } from './profile.js';
import {
  type BenchDocument,
  compare,
  describeMachine,
  type Floors,
  formatTable,
  type Parameters,
  type ProfileResult,
  RESULT_SCHEMA,
  resultFileName,
  workloadFloorUs,
} from './report.js';
import { runWatchSection, WATCH_SECTION, type WatchSectionResult } from './watch.js';
import {
  INTENT_ALIAS,
  INTENT_WORKLOADS,
  isIntentWorkload,
  isWorkloadName,
  WORKLOAD_NAMES,
  WORKLOADS,
  type WorkloadName,
} from './workloads.js';

/** Setting this (to anything but empty or 0) skips etcd even when it is installed, as `--no-etcd` does. */
export const SKIP_ETCD_ENV = 'BASALT_BENCH_NO_ETCD';
const PROFILE_TOP_FUNCTIONS = 15;
/** Intent cells read through the client threads of n1 and n2 (thread i is on node i mod 3): n3 holds the writers. */
const INTENT_READER_THREADS = 2;

const FULL = { clients: [1, 16, 64], warmupS: 1, durationS: 6, rttCount: 20_000, fsyncCount: 1_000 };
const QUICK = { clients: [1, 16], warmupS: 0.2, durationS: 1, rttCount: 2_000, fsyncCount: 200 };

interface Flags {
  quick?: boolean;
  workload?: (WorkloadName | typeof WATCH_SECTION)[];
  clients?: number[];
  threads: number;
  warmup?: number;
  duration?: number;
  fsync: boolean;
  etcd: boolean;
  tls?: boolean;
  profile?: WorkloadName;
  out: string;
  chart?: boolean;
}

const benchStartMs = Date.now();
const progress = (line: string): void =>
  void process.stderr.write(`bench ${((Date.now() - benchStartMs) / 1000).toFixed(1).padStart(5)} s: ${line}\n`);

function workloadList(
  value: string,
  previous: (WorkloadName | typeof WATCH_SECTION)[] | undefined,
): (WorkloadName | typeof WATCH_SECTION)[] {
  const names = value
    .split(',')
    .map((s) => s.trim())
    .flatMap((n) => (n === INTENT_ALIAS ? [...INTENT_WORKLOADS] : [n]));
  for (const n of names) {
    if (!isWorkloadName(n) && n !== WATCH_SECTION)
      throw new InvalidArgumentError(`unknown workload ${n} (known: ${WORKLOAD_NAMES.join(', ')}, ${WATCH_SECTION})`);
  }
  return [...(previous ?? []), ...(names as (WorkloadName | typeof WATCH_SECTION)[])];
}

function oneWorkload(value: string): WorkloadName {
  if (!isWorkloadName(value)) throw new InvalidArgumentError(`unknown workload (known: ${WORKLOAD_NAMES.join(', ')})`);
  // A profile runs a plain cell: an intent cell needs the set-up of runIntentCell.
  if (isIntentWorkload(value)) throw new InvalidArgumentError('the intent cells cannot be profiled');
  return value;
}

function positiveList(value: string): number[] {
  const list = value.split(',').map(Number);
  if (list.some((n) => !Number.isInteger(n) || n < 1))
    throw new InvalidArgumentError('positive integers, comma separated');
  return list;
}

function positiveNumber(value: string): number {
  const n = Number(value);
  if (!(n > 0)) throw new InvalidArgumentError('a positive number');
  return n;
}

async function bench(flags: Flags, argv: readonly string[]): Promise<number> {
  const startedAt = new Date();
  const loadAtStart = loadavg()[0] ?? 0;
  const mode = flags.quick ? QUICK : FULL;
  // A quick run leaves the intent cells and the watch section out unless named: their set-up is long.
  const workloads =
    flags.workload?.filter(isWorkloadName) ??
    WORKLOAD_NAMES.filter((w) => !(flags.quick === true && isIntentWorkload(w)));
  const watch = flags.workload === undefined ? flags.quick !== true : flags.workload.includes(WATCH_SECTION);
  const clients = flags.clients ?? mode.clients;
  const warmupS = flags.warmup ?? mode.warmupS;
  const durationS = flags.duration ?? mode.durationS;
  const parent = tmpdir();
  const cleanup = new Cleanup().install();
  const cells: CellResult[] = [];
  const failures: { what: string; error: string }[] = [];
  let etcd: Parameters['etcd'];
  let profile: ProfileResult | undefined;
  let watchSection: WatchSectionResult | undefined;
  let floors: Floors;
  const processes: Record<string, number[]> = {};
  try {
    progress(`floors: fsync in ${parent}, loopback TCP round trip...`);
    const fsync = measureFsync(mode.fsyncCount, parent);
    const rtt = await measureLoopbackRoundTrip({ count: mode.rttCount, warmupCount: mode.rttCount / 10 });
    floors = { rtt, fsync };
    progress(`floors: RTT p50 ${rtt.p50Us} µs, fsync p50 ${fsync.p50Us.toFixed(0)} µs`);

    const grid = { workloads, clients, threads: flags.threads, warmupMs: warmupS * 1000, durationMs: durationS * 1000 };
    await runSystem(
      'basalt',
      grid,
      cells,
      failures,
      async () => {
        const cluster = new BasaltCluster({ parent, fsync: flags.fsync, cleanup, tls: flags.tls === true });
        const how = `${flags.fsync ? '' : ' (no fsync)'}${flags.tls === true ? ' (TLS and users)' : ''}`;
        progress(`basalt: starting 3 basalt start processes in ${cluster.dir}${how}...`);
        await cluster.start();
        progress('basalt: loading keys...');
        await loadBasalt(cluster.addresses[0]!, workloads);
        processes['basalt'] = cluster.pids;
        const intents: IntentControl = {
          addresses: cluster.addresses,
          metricsUrls: cluster.metricsUrls,
          nodeNames: NODE_NAMES,
          partitions: BENCH_PARTITIONS,
          pause: (i) => cluster.pause(i),
          resume: (i) => cluster.resume(i),
        };
        const logEntries = async () => appliedPartitionEntries(await scrape(cluster.metricsUrls[0]!));
        const peerTraffic = async () => {
          const each = (await Promise.all(cluster.metricsUrls.map(scrape))).map(peerTrafficOf);
          return {
            messages: each.reduce((sum, t) => sum + t.messages, 0),
            writes: each.reduce((sum, t) => sum + t.writes, 0),
            applySteps: each.reduce((sum, t) => sum + t.applySteps, 0),
          };
        };
        return {
          addresses: cluster.addresses,
          pids: cluster.pids,
          stop: () => cluster.stop(),
          intents,
          logEntries,
          peerTraffic,
        };
      },
      cleanup,
      watch
        ? async (pool, running) => {
            watchSection = await runWatchSection(
              pool,
              watchCellBase(grid, running),
              running.addresses,
              failures,
              progress,
              () => cleanup.interrupted,
            );
          }
        : undefined,
    );

    const skipped =
      workloads.length === 0 ? `only the ${WATCH_SECTION} section ran, which is Basalt only` : skipEtcdReason(flags);
    const binary = findEtcd();
    if (skipped !== undefined) etcd = { ran: false, skipped };
    else if (binary === undefined) {
      etcd = { ran: false, skipped: `etcd is not on PATH; install it with: ${ETCD_INSTALL_HINT}` };
      progress(`etcd: not found, comparison skipped. To install: ${ETCD_INSTALL_HINT}`);
    } else {
      let version = 'unknown';
      await runSystem(
        'etcd',
        grid,
        cells,
        failures,
        async () => {
          const cluster = new EtcdCluster(binary, parent, cleanup);
          progress(`etcd: starting 3 members of ${binary} in ${cluster.dir}...`);
          await cluster.start();
          version = cluster.version;
          progress(`etcd ${version}: loading keys...`);
          processes['etcd'] = cluster.pids;
          await loadEtcd(
            cluster.addresses[0]!,
            workloads.filter((w) => !isIntentWorkload(w)),
          );
          return { addresses: cluster.addresses, pids: cluster.pids, stop: () => cluster.stop() };
        },
        cleanup,
      );
      etcd = { ran: true, version };
    }

    if (flags.profile !== undefined) {
      try {
        profile = await runProfile(flags, Math.max(...clients), warmupS, durationS, parent, cleanup);
      } catch (error) {
        failures.push({ what: `profile of ${flags.profile}`, error: describe(error) });
      }
    }
  } finally {
    await cleanup.run();
    cleanup.uninstall();
  }

  const fsyncOn = flags.fsync;
  const floorInputs = { rttP50Us: floors.rtt.p50Us, fsyncP50Us: floors.fsync.p50Us };
  const doc: BenchDocument = {
    schema: RESULT_SCHEMA,
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    command: argv,
    machine: describeMachine(parent, loadAtStart),
    parameters: {
      quick: flags.quick === true,
      fsync: fsyncOn,
      workloads,
      clients,
      clientThreadsMax: flags.threads,
      warmupS,
      durationS,
      cluster: `3 basalt start processes (${NODE_NAMES.join(', ')}) on TCP loopback, table bench:8:3`,
      etcd,
    },
    floors,
    workloads: workloads.map((name) => ({
      name,
      title: WORKLOADS[name].title,
      basalt: WORKLOADS[name].basalt,
      etcd: WORKLOADS[name].etcd,
      paths: WORKLOADS[name].parts,
      floorUs: workloadFloorUs(name, floorInputs, fsyncOn),
    })),
    cells,
    processes,
    comparisons: compare(cells, floorInputs, fsyncOn),
    failures,
    ...(profile !== undefined && { profile }),
    ...(watchSection !== undefined && { watch: watchSection }),
  };
  console.log(formatTable(doc));
  mkdirSync(flags.out, { recursive: true });
  const file = join(flags.out, resultFileName(startedAt));
  writeFileSync(file, `${JSON.stringify(doc, null, 2)}\n`);
  progress(`results written to ${file}`);
  if (flags.chart === true) {
    const charts = await writeCharts(doc, flags.out, `${basename(file, '.json')}-`);
    progress(`charts written to ${charts.join(', ')}`);
  }
  const failedCells = cells.filter((c) => c.failures > 0).length;
  return failures.length > 0 || failedCells > 0 ? 1 : 0;
}

function skipEtcdReason(flags: Flags): string | undefined {
  if (!flags.etcd) return '--no-etcd';
  const env = process.env[SKIP_ETCD_ENV];
  if (env !== undefined && env !== '' && env !== '0') return `${SKIP_ETCD_ENV} is set`;
  return undefined;
}

interface Grid {
  readonly workloads: readonly WorkloadName[];
  readonly clients: readonly number[];
  readonly threads: number;
  readonly warmupMs: number;
  readonly durationMs: number;
}

interface Running {
  readonly addresses: readonly string[];
  readonly pids: readonly number[];
  readonly stop: () => Promise<void>;
  /** Basalt only: what the intent cells need to force their resolution path. */
  readonly intents?: IntentControl;
  /** Basalt only: Raft log entries applied so far over the partition groups (CellSpec.logEntries). */
  readonly logEntries?: () => Promise<number>;
  /** Basalt only: messages and socket writes between the nodes so far (CellSpec.peerTraffic). */
  readonly peerTraffic?: () => Promise<PeerTrafficCount>;
}

/** The parts of a cell spec that a watch cell takes from the grid and the running cluster. */
function watchCellBase(grid: Grid, running: Running): Omit<CellSpec, 'workload' | 'clients'> {
  return {
    system: 'basalt',
    warmupMs: grid.warmupMs,
    durationMs: grid.durationMs,
    pids: running.pids,
    ...(running.logEntries !== undefined && { logEntries: running.logEntries }),
    ...(running.peerTraffic !== undefined && { peerTraffic: running.peerTraffic }),
  };
}

/**
 * Starts one system, runs every cell on it, then `after` (the watch section) on the same cluster and client threads,
 * stops it; a failing cell is recorded and the next one runs.
 */
async function runSystem(
  system: System,
  grid: Grid,
  cells: CellResult[],
  failures: { what: string; error: string }[],
  start: () => Promise<Running>,
  cleanup: Cleanup,
  after?: (pool: ClientPool, running: Running) => Promise<void>,
): Promise<void> {
  let running: Running | undefined;
  let pool: ClientPool | undefined;
  try {
    running = await start();
    pool = await ClientPool.open(system, running.addresses, grid.threads);
    for (const workload of grid.workloads) {
      for (const clients of grid.clients) {
        if (cleanup.interrupted) return;
        // etcd has no write intents: its intent rows print –.
        if (isIntentWorkload(workload) && running.intents === undefined) continue;
        progress(`${system}: ${workload} with ${clients} clients...`);
        try {
          const spec = {
            system,
            workload,
            clients,
            warmupMs: grid.warmupMs,
            durationMs: grid.durationMs,
            pids: running.pids,
            ...(running.logEntries !== undefined && { logEntries: running.logEntries }),
            ...(running.peerTraffic !== undefined && { peerTraffic: running.peerTraffic }),
          };
          const cell =
            isIntentWorkload(workload) && running.intents !== undefined
              ? await runIntentCell(pool, spec, running.intents)
              : await pool.runCell(spec);
          cells.push(cell);
          progress(
            `${system}: ${workload} ×${clients}: ${cell.opsPerSec.toFixed(0)} ops/s, ` +
              `p50 ${(cell.latency.p50Us / 1000).toFixed(2)} ms` +
              (cell.logEntriesPerOp === undefined ? '' : `, ${cell.logEntriesPerOp.toFixed(2)} Raft entries/op`) +
              (cell.peerMessagesPerOp === undefined
                ? ''
                : `, ${cell.peerMessagesPerOp.toFixed(1)} peer msgs/op in ${cell.peerWritesPerOp?.toFixed(1)} writes`) +
              (cell.applyStepsPerOp === undefined ? '' : `, ${cell.applyStepsPerOp.toFixed(2)} apply steps/op`) +
              (cell.failures > 0 ? `, ${cell.failures} failed: ${cell.firstFailure}` : ''),
          );
        } catch (error) {
          failures.push({ what: `${system} ${workload} ×${clients}`, error: describe(error) });
        }
      }
    }
    if (after !== undefined && !cleanup.interrupted) await after(pool, running);
  } catch (error) {
    failures.push({ what: `${system} cluster`, error: describe(error) });
  } finally {
    progress(`${system}: stopping...`);
    await pool?.close();
    await running?.stop();
  }
}

/**
 * An intent cell: the resolution counters of every node are read, the intents set up (and a node stopped), the
 * readers run on the client threads of n1 and n2 only, then the writers are finished (the node resumed) and the
 * counters read again.
 */
async function runIntentCell(pool: ClientPool, spec: CellSpec, control: IntentControl): Promise<CellResult> {
  const workload = spec.workload;
  if (!isIntentWorkload(workload)) throw new Error(`${workload} is not an intent cell`);
  const counts = (): Promise<ResolutionCounts[]> =>
    Promise.all(control.metricsUrls.map(async (url) => parseResolutionCounts(await scrape(url))));
  const before = await counts();
  const setup = await prepareIntentCell(workload, control);
  let cell: CellResult;
  try {
    // The commit partition cell's warm-up starts at the stop, as short as any other: the commit partition answers once
    // n3 is seen gone (the peer liveness timeout), a few seconds in, and a longer warm-up would leave only reads of
    // txs already recovered in the window.
    cell = await pool.runCell({ ...spec, keys: setup.keys, threadsMax: INTENT_READER_THREADS });
  } finally {
    await setup.finish();
  }
  const resolution = resolutionDeltas(control.nodeNames, before, await counts(), WORKLOADS[workload].resolutionPath!);
  return { ...cell, resolution, writerFailures: setup.writerFailures() };
}

/** A fresh Basalt cluster under `--cpu-prof` for one workload; the profiles are kept next to the JSON. */
async function runProfile(
  flags: Flags,
  clients: number,
  warmupS: number,
  durationS: number,
  parent: string,
  cleanup: Cleanup,
): Promise<ProfileResult> {
  const workload = flags.profile!;
  mkdirSync(flags.out, { recursive: true });
  const profileDir = resolve(mkdtempSync(join(flags.out, 'profile-')));
  const cluster = new BasaltCluster({ parent, fsync: flags.fsync, cleanup, profileDir, tls: flags.tls === true });
  progress(`profile: ${workload} with ${clients} clients on a fresh cluster under --cpu-prof (${profileDir})...`);
  let cell: CellResult | undefined;
  try {
    await cluster.start();
    await loadBasalt(cluster.addresses[0]!, [workload]);
    const pool = await ClientPool.open('basalt', cluster.addresses, flags.threads);
    try {
      cell = await pool.runCell({
        system: 'basalt',
        workload,
        clients,
        warmupMs: warmupS * 1000,
        durationMs: durationS * 1000,
        pids: cluster.pids,
      });
    } finally {
      await pool.close();
    }
  } finally {
    await cluster.stop();
  }
  // node names each file CPU.<date>.<time>.<pid>.<tid>.<seq>.cpuprofile: match them to the nodes by pid.
  const files = readdirSync(profileDir).filter((f) => f.endsWith('.cpuprofile'));
  const top = cluster.pids.map((pid, i) => {
    const file = files.find((f) => f.split('.')[3] === String(pid));
    return {
      node: `${NODE_NAMES[i]} (pid ${pid})`,
      functions:
        file === undefined
          ? []
          : topSelfTime(readCpuProfile(join(profileDir, file)), PROFILE_TOP_FUNCTIONS, cell?.monotonicWindowUs),
    };
  });
  return { workload, clients, files: files.map((f) => join(profileDir, f)), top, ...(cell !== undefined && { cell }) };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

const program = new Command();
program
  .name('bench')
  .description('Basalt end to end against etcd and the physical floors, in one run')
  .option(
    '--quick',
    `smoke run: clients ${QUICK.clients.join(',')}, ${QUICK.warmupS} s + ${QUICK.durationS} s per cell`,
  )
  .option(
    '--workload <names>',
    `workloads to run, comma separated (${WORKLOAD_NAMES.join(', ')}; ${INTENT_ALIAS}: the three intent cells; ` +
      `${WATCH_SECTION}: put throughput with 0, 1 and 10 watchers and their delivery lag, Basalt only)`,
    workloadList,
  )
  .option(
    '--clients <list>',
    `concurrent clients per cell, comma separated (default ${FULL.clients.join(',')})`,
    positiveList,
  )
  .option('--threads <n>', 'client threads at most (the clients are spread over them)', (v) => positiveList(v)[0]!, 2)
  .option('--warmup <s>', `seconds of warm-up per cell (default ${FULL.warmupS})`, positiveNumber)
  .option('--duration <s>', `measured seconds per cell (default ${FULL.durationS})`, positiveNumber)
  .option('--no-fsync', 'run the Basalt nodes without fsync (labelled in the output; etcd always fsyncs)')
  .option('--no-etcd', `skip the etcd comparison (also: ${SKIP_ETCD_ENV}=1)`)
  .option('--tls', 'run the Basalt nodes with certificates: TLS 1.3 on every port, clients log in by certificate')
  .option(
    '--profile <workload>',
    'also run this workload on a fresh cluster under --cpu-prof and print the top functions',
    oneWorkload,
  )
  .option('--out <dir>', 'directory of the JSON results', 'bench-results')
  .option('--chart', 'also write SVG charts of throughput and p99 per cell next to the JSON (bench/chart.ts)')
  .action(async (flags: Flags) => {
    process.exitCode = await bench(flags, process.argv.slice(2));
  });
program
  .command('components')
  .description('the component benchmarks: net (Messenger), MVCC storage, Raft, each against the floors')
  .action(async () => {
    await runComponentSections();
  });

await program.parseAsync(process.argv);
