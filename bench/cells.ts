/**
 * Running one cell of the end-to-end benchmark (one system, one workload, one concurrency): the pool's client
 * threads (bench/driver.ts) share the `clients` concurrent callers, thread i connected to node (or member) i mod 3.
 * Every thread of the cell gets its job first; then they run for `warmupMs` unmeasured and `durationMs` measured. CPU time of each
 * server process (and of this process, the client) is read at the window's edges.
 */
import { Worker } from 'node:worker_threads';
import { Etcd3 } from 'etcd3';
import { connect } from '../src/client/remote.js';
import { isBasaltError } from '../src/core/errors.js';
import {
  BENCH_TABLE,
  type DriverConnection,
  type DriverGo,
  type DriverJob,
  type DriverJobMessage,
  type DriverResult,
} from './driver.js';
import type { ResolutionDeltas } from './intents.js';
import { cpuSecondsOf } from './proc.js';
import { type LatencySummary, summarize } from './stats.js';
import { benchConnectOptions, benchTls } from './tls.js';
import {
  ACCOUNTS,
  accountKey,
  HOT_ACCOUNTS,
  hotKey,
  INITIAL_BALANCE,
  INTENT_KEYS,
  intentKey,
  isIntentWorkload,
  userKey,
  VALUE_BYTES,
  WORKLOADS,
  type WorkloadName,
  YCSB_RECORDS,
} from './workloads.js';

export type System = 'basalt' | 'etcd';

export interface CellSpec {
  readonly system: System;
  readonly workload: WorkloadName;
  readonly clients: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** The server processes whose CPU time is charged to the cell. */
  readonly pids: readonly number[];
  /** The keys an intent cell reads. */
  readonly keys?: readonly string[];
  /** Use only the first this many client threads (an intent cell keeps its readers off the node it stops). */
  readonly threadsMax?: number;
  /** Basalt: the Raft log entries applied so far over the partition groups, read before and after the window. */
  readonly logEntries?: () => Promise<number>;
  /** Basalt: messages sent to peers and the socket writes that carried them so far, summed over the nodes. */
  readonly peerTraffic?: () => Promise<PeerTrafficCount>;
}

export interface CellResult {
  readonly system: System;
  readonly workload: WorkloadName;
  readonly clients: number;
  readonly threads: number;
  readonly durationS: number;
  readonly ops: number;
  readonly opsPerSec: number;
  readonly latency: LatencySummary;
  /** Transaction bodies run (first attempts and retries) of the operations that completed or aborted. */
  readonly attempts: number;
  readonly aborts: number;
  /** aborts / (ops + aborts). */
  readonly abortRate: number;
  /** Retries per completed or aborted operation: (attempts − ops − aborts) / (ops + aborts). */
  readonly retryRate: number;
  readonly failures: number;
  readonly firstFailure: string | undefined;
  readonly casFailures: number;
  /** CPU seconds per 1,000 operations, one figure per server process; undefined without /proc. */
  readonly cpuSPerKOps: readonly (number | undefined)[];
  /** CPU of the client process (all its threads) over the window, in cores. */
  readonly clientCores: number;
  /** Basalt: Raft log entries (all partition groups) per completed operation over the window. */
  readonly logEntriesPerOp?: number;
  /** Basalt: messages sent between the nodes per completed operation over the window (all nodes). */
  readonly peerMessagesPerOp?: number;
  /** Basalt: socket writes between the nodes per completed operation over the window (all nodes). */
  readonly peerWritesPerOp?: number;
  /** Basalt: storage transactions that applied partition entries per completed operation (all nodes; `apply.steps`). */
  readonly applyStepsPerOp?: number;
  /** The measured window on CLOCK_MONOTONIC, in microseconds (the clock of `.cpuprofile` sample times). */
  readonly monotonicWindowUs: { readonly fromUs: number; readonly toUs: number };
  /** Intent cells: every node's resolution counter deltas over the cell (warm-up included), and writer failures. */
  readonly resolution?: ResolutionDeltas;
  readonly writerFailures?: number;
}

/** Splits `clients` callers over at most `threads` threads, as evenly as possible; no thread gets none. */
export function splitCallers(clients: number, threads: number): number[] {
  const n = Math.max(1, Math.min(clients, threads));
  return Array.from({ length: n }, (_, i) => Math.floor(clients / n) + (i < clients % n ? 1 : 0));
}

/**
 * The client threads of one system, connected once (thread i to address i mod n, its home; a Basalt thread to the
 * other nodes too, for the single-key operations it routes to their primaries) and reused by every cell, so that a
 * cell pays neither thread start-up nor connecting.
 */
export class ClientPool {
  private constructor(
    readonly system: System,
    private readonly workers: readonly Worker[],
  ) {}

  static async open(system: System, addresses: readonly string[], threads: number): Promise<ClientPool> {
    const workers = Array.from({ length: threads }, (_, thread) => {
      const address = addresses[thread % addresses.length]!;
      // A Basalt thread also connects to the other nodes, to send each single-key operation to its key's primary.
      const others = system === 'basalt' ? addresses.filter((a) => a !== address) : [];
      const tls = system === 'basalt' ? benchTls() : undefined;
      const connection: DriverConnection = { system, address, others, ...(tls !== undefined && { tls }) };
      return new Worker(new URL('./driver.js', import.meta.url), { workerData: connection });
    });
    try {
      await Promise.all(workers.map((w) => nextMessage(w, 'connected')));
    } catch (error) {
      await Promise.all(workers.map((w) => w.terminate()));
      throw error;
    }
    return new ClientPool(system, workers);
  }

  get threads(): number {
    return this.workers.length;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }

  async runCell(spec: CellSpec): Promise<CellResult> {
    const split = splitCallers(spec.clients, Math.min(this.workers.length, spec.threadsMax ?? Infinity));
    const workers = this.workers.slice(0, split.length);
    const ready = workers.map((w) => nextMessage(w, 'ready'));
    for (const [thread, w] of workers.entries()) {
      const job: DriverJob = {
        workload: spec.workload,
        callers: split[thread]!,
        thread,
        seed: thread + 1,
        ...(spec.keys !== undefined && { keys: spec.keys }),
      };
      w.postMessage({ kind: 'job', job } satisfies DriverJobMessage);
    }
    await Promise.all(ready);
    const startMs = Date.now() + spec.warmupMs;
    const endMs = startMs + spec.durationMs;
    const results = workers.map((w) => nextMessage<DriverResult>(w, 'result'));
    for (const w of workers) w.postMessage({ kind: 'go', startMs, endMs } satisfies DriverGo);
    await sleepUntil(startMs);
    const entriesBefore = await readEntries(spec);
    const trafficBefore = await readTraffic(spec);
    const cpuBefore = spec.pids.map(cpuSecondsOf);
    const clientBefore = process.cpuUsage();
    const fromUs = monotonicUs();
    await sleepUntil(endMs);
    const window = { fromUs, toUs: monotonicUs() };
    const cpuAfter = spec.pids.map(cpuSecondsOf);
    const client = process.cpuUsage(clientBefore);
    const clientCpuS = (client.user + client.system) / 1e6;
    const entriesAfter = await readEntries(spec);
    const trafficAfter = await readTraffic(spec);
    const cell = combine(spec, await Promise.all(results), cpuBefore, cpuAfter, clientCpuS);
    const entries =
      entriesBefore === undefined || entriesAfter === undefined ? undefined : entriesAfter - entriesBefore;
    return {
      ...cell,
      ...(entries !== undefined && cell.ops > 0 && { logEntriesPerOp: entries / cell.ops }),
      ...(trafficBefore !== undefined &&
        trafficAfter !== undefined &&
        cell.ops > 0 && {
          peerMessagesPerOp: (trafficAfter.messages - trafficBefore.messages) / cell.ops,
          peerWritesPerOp: (trafficAfter.writes - trafficBefore.writes) / cell.ops,
          applyStepsPerOp: (trafficAfter.applySteps - trafficBefore.applySteps) / cell.ops,
        }),
      monotonicWindowUs: window,
    };
  }
}

export interface PeerTrafficCount {
  readonly messages: number;
  readonly writes: number;
  /** Storage transactions that applied partition entries (node counter `apply.steps`). */
  readonly applySteps: number;
}

/** The cluster's peer traffic so far, or undefined when it has none or a scrape failed. */
async function readTraffic(spec: CellSpec): Promise<PeerTrafficCount | undefined> {
  return spec.peerTraffic === undefined ? undefined : spec.peerTraffic().catch(() => undefined);
}

/** The cell's log entry count, or undefined when it has none or the scrape failed (the figure is then left out). */
async function readEntries(spec: CellSpec): Promise<number | undefined> {
  return spec.logEntries === undefined ? undefined : spec.logEntries().catch(() => undefined);
}

function combine(
  spec: CellSpec,
  results: readonly DriverResult[],
  cpuBefore: readonly (number | undefined)[],
  cpuAfter: readonly (number | undefined)[],
  clientCpuS: number,
): Omit<CellResult, 'monotonicWindowUs'> {
  const sum = (f: (r: DriverResult) => number): number => results.reduce((s, r) => s + f(r), 0);
  const latencies = new Float64Array(sum((r) => r.latenciesUs.length));
  let offset = 0;
  for (const r of results) {
    latencies.set(r.latenciesUs, offset);
    offset += r.latenciesUs.length;
  }
  const ops = sum((r) => r.ops);
  const aborts = sum((r) => r.aborts);
  const attempts = sum((r) => r.attempts);
  const durationS = spec.durationMs / 1000;
  const finished = ops + aborts;
  return {
    system: spec.system,
    workload: spec.workload,
    clients: spec.clients,
    threads: results.length,
    durationS,
    ops,
    opsPerSec: ops / durationS,
    latency: summarize(latencies),
    attempts,
    aborts,
    abortRate: finished === 0 ? 0 : aborts / finished,
    retryRate: finished === 0 || !WORKLOADS[spec.workload].transactional ? 0 : (attempts - finished) / finished,
    failures: sum((r) => r.failures),
    firstFailure: results.find((r) => r.firstFailure !== undefined)?.firstFailure,
    casFailures: sum((r) => r.casFailures),
    cpuSPerKOps: cpuBefore.map((before, i) => {
      const after = cpuAfter[i];
      return before === undefined || after === undefined || ops === 0 ? undefined : ((after - before) / ops) * 1000;
    }),
    clientCores: clientCpuS / durationS,
  };
}

function nextMessage<T>(worker: Worker, kind: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: { kind: string; error?: string }): void => {
      if (m.kind === 'error') done(() => reject(new Error(`client thread: ${m.error}`)));
      else if (m.kind === kind) done(() => resolve(m as T));
    };
    const onError = (error: Error): void => done(() => reject(error));
    const onExit = (code: number): void =>
      done(() => reject(new Error(`client thread exited (${code}) before ${kind}`)));
    const done = (settle: () => void): void => {
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      settle();
    };
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
  });
}

function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

function sleepUntil(epochMs: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, epochMs - Date.now())));
}

// ------------------------------------------------------------------ loading the keys

const LOAD_BATCH = 1_000;
const LOAD_CONCURRENCY = 4;
const LOAD_WAIT_MS = 60_000;
const LOAD_RETRY_MS = 50;

/** The keys the given workloads read: accounts, hot accounts (balances), YCSB records (100 B values). */
export function loadEntries(workloads: readonly WorkloadName[]): { key: string; value: number | string }[] {
  const value = 'v'.repeat(VALUE_BYTES);
  const needs = (...names: WorkloadName[]): boolean => names.some((n) => workloads.includes(n));
  return [
    ...(needs('transfer', 'transfer-seq', 'get', 'ro-tx')
      ? Array.from({ length: ACCOUNTS }, (_, i) => ({ key: accountKey(i), value: INITIAL_BALANCE }))
      : []),
    ...(needs('transfer-hot')
      ? Array.from({ length: HOT_ACCOUNTS }, (_, i) => ({ key: hotKey(i), value: INITIAL_BALANCE }))
      : []),
    ...(needs('ycsb-a') ? Array.from({ length: YCSB_RECORDS }, (_, i) => ({ key: userKey(i), value })) : []),
    // An intent cell's reads find an older committed version under every intent.
    ...(workloads.some(isIntentWorkload)
      ? Array.from({ length: INTENT_KEYS }, (_, i) => ({ key: intentKey(i), value }))
      : []),
  ];
}

/** Loads the keys in RW transactions of `LOAD_BATCH` puts, retrying while partitions still elect primaries. */
export async function loadBasalt(address: string, workloads: readonly WorkloadName[]): Promise<void> {
  const client = await connect(address, benchConnectOptions());
  const deadline = Date.now() + LOAD_WAIT_MS;
  try {
    const entries = loadEntries(workloads);
    const batches: (typeof entries)[] = [];
    for (let i = 0; i < entries.length; i += LOAD_BATCH) batches.push(entries.slice(i, i + LOAD_BATCH));
    let next = 0;
    const loader = async (): Promise<void> => {
      while (next < batches.length) {
        const batch = batches[next++]!;
        for (;;) {
          try {
            await client.transaction((tx) => tx.putAll(BENCH_TABLE, batch));
            break;
          } catch (error) {
            if (!isBasaltError(error) || !error.retryable || Date.now() > deadline) throw error;
            await new Promise((r) => setTimeout(r, LOAD_RETRY_MS));
          }
        }
      }
    };
    await Promise.all(Array.from({ length: LOAD_CONCURRENCY }, loader));
  } finally {
    await client.close();
  }
}

export async function loadEtcd(address: string, workloads: readonly WorkloadName[]): Promise<void> {
  const client = new Etcd3({ hosts: `http://${address}` });
  try {
    const entries = loadEntries(workloads);
    let next = 0;
    const loader = async (): Promise<void> => {
      while (next < entries.length) {
        const { key, value } = entries[next++]!;
        await client.put(key).value(String(value));
      }
    };
    await Promise.all(Array.from({ length: LOAD_CONCURRENCY * 2 }, loader));
  } finally {
    client.close();
  }
}
