/**
 * The watch section of the end-to-end benchmark (Basalt only): what watchers cost the write path, and how soon a
 * watcher sees a write. For each W of `WATCHERS`, W TCP clients in the bench process (watcher i on node i mod 3) each
 * watch the bench table from "now", and once every one has had its first resolved mark the pool's client threads run
 * `WATCH_CLIENTS` callers of implicit puts for one cell (warm-up, then the measured window).
 *
 * Per W: the put cell (throughput, latencies), the put events each watcher received in the measured window, and the
 * delivery lag of each such event: the wall clock when the watcher got it minus the physical milliseconds of its
 * commitTs. The nodes and the bench share this machine's clock; both readings are whole milliseconds (the commit's
 * truncated), so a lag is a whole number of ms and may read up to 1 ms more than it was. The watchers share the bench
 * process's main thread, so at 10 watchers an event also waits for the other watchers' turns.
 */
import { connect, type RemoteClient } from '../src/client/remote.js';
import { type HybridTimestamp, physicalMs } from '../src/hlc/timestamp.js';
import type { CellResult, CellSpec, ClientPool } from './cells.js';
import { BENCH_TABLE } from './driver.js';
import { type LatencySummary, summarize } from './stats.js';
import { benchConnectOptions } from './tls.js';

/** The name `--workload` knows the section by. */
export const WATCH_SECTION = 'watch';
export const WATCHERS = [0, 1, 10] as const;
/** Callers of implicit puts in every watch cell. */
export const WATCH_CLIENTS = 16;
/** A watcher's first resolved mark must come within this. */
const WATCH_READY_MS = 30_000;
/** After the cell, a watcher ends at its next event (a resolved mark comes every poll); its client closes after this. */
const WATCH_STOP_MS = 5_000;

export interface WatchCell {
  readonly watchers: number;
  /** The 16 callers of implicit puts, measured as any other cell. */
  readonly puts: CellResult;
  /** Put events one watcher received in the measured window per second, the mean over the watchers (W > 0). */
  readonly eventsPerWatcherPerSec?: number;
  /** Delivery lag (µs, whole ms) of every put event every watcher received in the measured window (W > 0). */
  readonly lag?: LatencySummary;
  /** Watchers whose stream failed, and the first failure. */
  readonly watcherFailures: number;
  readonly firstWatcherFailure?: string;
}

export interface WatchSectionResult {
  readonly clients: number;
  readonly cells: readonly WatchCell[];
}

interface Window {
  readonly fromUs: number;
  readonly toUs: number;
}

/**
 * The put events watchers received: when (CLOCK_MONOTONIC µs, the clock of a cell's window) and their lag (wall-clock
 * ms at receipt minus the physical ms of the commitTs, kept in µs as every other latency of the bench).
 */
export class LagRecorder {
  private readonly receivedUs: number[] = [];
  private readonly lagsUs: number[] = [];

  record(receivedMonotonicUs: number, receivedWallMs: number, commitTs: HybridTimestamp): void {
    this.receivedUs.push(receivedMonotonicUs);
    this.lagsUs.push((receivedWallMs - physicalMs(commitTs)) * 1000);
  }

  /** The lags of the events received in `[fromUs, toUs)`. */
  within(window: Window): Float64Array {
    const out: number[] = [];
    for (const [i, at] of this.receivedUs.entries()) {
      if (at >= window.fromUs && at < window.toUs) out.push(this.lagsUs[i]!);
    }
    return Float64Array.from(out);
  }
}

interface Watcher {
  /** Ends the stream (at its next event) and closes the client; resolves with the stream's failure, if any. */
  stop(): Promise<string | undefined>;
}

/** A TCP client watching the bench table from now; resolves once the watch has had its first resolved mark. */
async function openWatcher(address: string, recorder: LagRecorder): Promise<Watcher> {
  const client: RemoteClient = await connect(address, benchConnectOptions());
  let stopping = false;
  let failure: string | undefined;
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  const done = (async () => {
    for await (const event of client.watch(BENCH_TABLE)) {
      if (event.kind === 'put') recorder.record(monotonicUs(), Date.now(), event.commitTs);
      else if (event.kind === 'resolved') markReady();
      if (stopping) break;
    }
  })().catch((error: unknown) => {
    failure = describe(error);
  });
  const stop = async (): Promise<string | undefined> => {
    stopping = true;
    await Promise.race([done, delay(WATCH_STOP_MS)]);
    await client.close().catch(() => {});
    return failure;
  };
  const notReady = await Promise.race([
    ready.then(() => undefined),
    done.then(() => `the watch on ${address} ended before its first resolved mark: ${failure ?? 'no failure'}`),
    delay(WATCH_READY_MS).then(() => `no resolved mark from the watch on ${address} within ${WATCH_READY_MS} ms`),
  ]);
  if (notReady !== undefined) {
    await stop();
    throw new Error(notReady);
  }
  return { stop };
}

/**
 * One watch cell: W watchers opened and live, the put cell run (`base` gives its window, processes and counters),
 * the watchers stopped, the lag of what they received in the cell's measured window summarized.
 */
async function runWatchCell(
  pool: ClientPool,
  base: Omit<CellSpec, 'workload' | 'clients'>,
  addresses: readonly string[],
  watchers: number,
): Promise<WatchCell> {
  const recorder = new LagRecorder();
  const open: Watcher[] = [];
  let puts: CellResult;
  const failures: string[] = [];
  try {
    for (let i = 0; i < watchers; i++) open.push(await openWatcher(addresses[i % addresses.length]!, recorder));
    puts = await pool.runCell({ ...base, workload: 'put', clients: WATCH_CLIENTS });
  } finally {
    for (const failure of await Promise.all(open.map((w) => w.stop()))) {
      if (failure !== undefined) failures.push(failure);
    }
  }
  const lags = recorder.within(puts.monotonicWindowUs);
  return {
    watchers,
    puts,
    ...(watchers > 0 && {
      eventsPerWatcherPerSec: lags.length / watchers / puts.durationS,
      lag: summarize(lags),
    }),
    watcherFailures: failures.length,
    ...(failures[0] !== undefined && { firstWatcherFailure: failures[0] }),
  };
}

/** Every watch cell in turn on the running cluster; a failing cell is recorded in `failures` and the next one runs. */
export async function runWatchSection(
  pool: ClientPool,
  base: Omit<CellSpec, 'workload' | 'clients'>,
  addresses: readonly string[],
  failures: { what: string; error: string }[],
  progress: (line: string) => void,
  interrupted: () => boolean,
): Promise<WatchSectionResult> {
  const cells: WatchCell[] = [];
  for (const watchers of WATCHERS) {
    if (interrupted()) break;
    progress(`basalt: watch: ${WATCH_CLIENTS} clients of puts with ${watchers} watchers...`);
    try {
      const cell = await runWatchCell(pool, base, addresses, watchers);
      cells.push(cell);
      progress(
        `basalt: watch ×${watchers}: ${cell.puts.opsPerSec.toFixed(0)} put ops/s` +
          (cell.lag === undefined
            ? ''
            : `, lag p50 ${(cell.lag.p50Us / 1000).toFixed(0)} ms p99 ${(cell.lag.p99Us / 1000).toFixed(0)} ms`) +
          (cell.watcherFailures > 0 ? `, ${cell.watcherFailures} watchers failed: ${cell.firstWatcherFailure}` : ''),
      );
    } catch (error) {
      failures.push({ what: `basalt watch with ${watchers} watchers`, error: describe(error) });
    }
  }
  return { clients: WATCH_CLIENTS, cells };
}

/** The section as lines of the bench's output: a table, throughput relative to no watcher, lags in ms. */
export function formatWatchSection(section: WatchSectionResult): string[] {
  if (section.cells.length === 0) return [];
  const ms = (us: number): string => (us / 1000).toFixed(us >= 100_000 ? 0 : 1);
  const none = section.cells.find((c) => c.watchers === 0)?.puts.opsPerSec;
  const lines = [
    '',
    `Watches (Basalt): ${section.clients} clients of implicit puts while W TCP clients in the bench process watch the ` +
      'bench table. Put latencies and lags in ms; lag: wall clock when a watcher received a put event minus the ' +
      'physical ms of its commitTs (whole ms), over every watcher’s events in the window.',
    '',
    '| watchers | put ops/s | vs 0 watchers | put p50 | put p99 | events/s per watcher | lag p50 | lag p99 | lag p999 |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const c of section.cells) {
    const p = c.puts;
    const relative = none === undefined || none === 0 ? '' : `${((p.opsPerSec / none) * 100).toFixed(0)}%`;
    const lag = c.lag === undefined ? ['–', '–', '–'] : [c.lag.p50Us, c.lag.p99Us, c.lag.p999Us].map(ms);
    lines.push(
      `| ${c.watchers} | ${p.opsPerSec.toFixed(0)} | ${relative} | ${ms(p.latency.p50Us)} | ${ms(p.latency.p99Us)} | ` +
        `${c.eventsPerWatcherPerSec === undefined ? '–' : c.eventsPerWatcherPerSec.toFixed(0)} | ${lag.join(' | ')} |`,
    );
  }
  const notes = section.cells.flatMap((c) => [
    ...(c.puts.failures > 0 ? [`${c.watchers} watchers: ${c.puts.failures} puts failed: ${c.puts.firstFailure}`] : []),
    ...(c.watcherFailures > 0
      ? [`${c.watchers} watchers: ${c.watcherFailures} watch streams failed: ${c.firstWatcherFailure}`]
      : []),
  ]);
  if (notes.length > 0) lines.push('', ...notes.map((n) => `  ${n}`));
  return lines;
}

function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
