/**
 * Client benchmark: what a user sees end to end. Three `basalt start` processes (TCP loopback, LMDB with fsync, the
 * default) in a fresh temp directory, one table `bench:8:3`, and one `connect()` client to n1, which coordinates every
 * transaction. After a warm-up (every partition has a primary and has served writes), each workload runs until its
 * operation count or its time cap, whichever comes first, and reports throughput and latency p50/p99, a latency being
 * one call as the caller awaits it (a transaction: `client.transaction()` from begin to commit, retries included).
 * Latency p50 is quoted as a multiple of the floors measured in the same run: fsync p50 + loopback RTT p50 for a
 * write (one replicated durable write cannot be faster), the loopback RTT p50 for a read.
 * A workload that fails is reported with its error and the next one runs; the children are always stopped (SIGINT,
 * then SIGKILL after `STOP_WAIT_MS`), also when the bench process exits early, and the temp directory is removed.
 * Run alone: `npm run bench -- client`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ChildNode } from '../src/cli/child-node.js';
import { nextTransfer, transferIn } from '../src/cli/demo.js';
import { freePorts } from '../src/cli/test-support.js';
import { connect, type RemoteClient } from '../src/client/remote.js';
import { isBasaltError } from '../src/core/errors.js';
import { type LatencySummary, summarize } from './floors.js';

export interface ClientBenchFloors {
  readonly fsyncP50Us: number;
  readonly rttP50Us: number;
}

export interface ClientBenchOptions {
  readonly floors: ClientBenchFloors;
  /** One line as each phase starts (default: to stderr). */
  readonly onProgress?: (line: string) => void;
}

export interface WorkloadResult {
  readonly name: string;
  /** Which floor its latency is quoted against. */
  readonly kind: 'write' | 'read';
  readonly ops: number;
  readonly opsPerSec: number;
  readonly latency: LatencySummary;
  /** Calls that failed (not counted in `ops`), with the first failure. */
  readonly errors: number;
  readonly firstError: string | undefined;
  /** Set when the workload stopped early on errors. */
  readonly stoppedBy: string | undefined;
  /** Extra figures of the workload (the bank's retries, aborts and checks). */
  readonly note: string | undefined;
}

export interface ClientBenchResult {
  readonly floors: ClientBenchFloors;
  readonly readyMs: number;
  readonly workloads: readonly WorkloadResult[];
  /** Workloads that could not run at all, with their error. */
  readonly failures: readonly { readonly name: string; readonly error: string }[];
  /** How the children ended (`exit code 0` each when they stopped cleanly). */
  readonly exits: readonly string[];
  /** The last lines each child printed, shown when something failed. */
  readonly outputTails: readonly string[];
}

const NAMES = ['n1', 'n2', 'n3'] as const;
const TABLE = 'bench';
const READY_WAIT_MS = 60_000;
const STOP_WAIT_MS = 10_000;
const WARMUP_MS_MAX = 30_000;
/** Each workload stops at its operation count or after this long, so that the section stays within ~60 s. */
const WORKLOAD_MS_MAX = 6_000;
/** A workload with more failed calls than this stops and reports its first error. */
const WORKLOAD_ERRORS_MAX = 20;
const VALUE = 'v'.repeat(100);
const OUTPUT_TAIL_LINES = 12;

const BANK = { accounts: 20, workers: 4, durationMs: 5_000, initialBalance: 1_000, retries: 20, auditEveryMs: 100 };

export async function runClientBench(options: ClientBenchOptions): Promise<ClientBenchResult> {
  const progress = options.onProgress ?? ((line: string) => process.stderr.write(`${line}\n`));
  const dir = mkdtempSync(join(tmpdir(), 'basalt-client-bench-'));
  const cluster = new BenchCluster(dir);
  const workloads: WorkloadResult[] = [];
  const failures: { name: string; error: string }[] = [];
  let readyMs = 0;
  try {
    progress('client: starting 3 basalt processes...');
    const t0 = performance.now();
    const address = await cluster.start();
    readyMs = performance.now() - t0;
    const client = await connect(address);
    try {
      progress(`client: cluster ready in ${(readyMs / 1000).toFixed(1)} s; warming up...`);
      await warmUp(client);
      for (const w of workloadsOf(client)) {
        progress(`client: ${w.name}...`);
        try {
          workloads.push(await w.run());
        } catch (error) {
          failures.push({ name: w.name, error: describe(error) });
        }
      }
    } finally {
      await client.close();
    }
  } finally {
    progress('client: stopping the processes...');
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return { floors: options.floors, readyMs, workloads, failures, exits: cluster.exits(), outputTails: cluster.tails() };
}

// ------------------------------------------------------------------ the cluster

/** Three `basalt start` children; `stop()` ends every one of them, and so does the bench process's exit. */
class BenchCluster {
  private readonly children: ChildNode[] = [];
  /** On an early exit of the bench process: no child and no data left behind. */
  private readonly killOnExit = (): void => {
    for (const c of this.children) c.signal('SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  };
  /** Ctrl-C while the section runs: exit through `killOnExit` (a process ended by a signal emits no 'exit'). */
  private readonly exitOnInterrupt = (): void => process.exit(130);

  constructor(private readonly dir: string) {}

  /** Starts the children, waits for every ready line; resolves with n1's client address. */
  async start(): Promise<string> {
    process.on('exit', this.killOnExit);
    process.on('SIGINT', this.exitOnInterrupt);
    const ports = await freePorts(NAMES.length);
    const peerAddress = (i: number): string => `${NAMES[i]}=127.0.0.1:${ports[i]}`;
    for (const [i, name] of NAMES.entries()) {
      const peers = NAMES.flatMap((_, j) => (j === i ? [] : [peerAddress(j)])).join(',');
      this.children.push(
        new ChildNode([
          'start',
          ...['--name', name, '--data', join(this.dir, name), '--port', String(ports[i])],
          ...['--peers', peers, '--client-port', '0', '--table', `${TABLE}:8:3`, '--log-level', 'warn'],
        ]),
      );
    }
    await Promise.all(this.children.map((c, i) => c.waitFor(new RegExp(`node ${NAMES[i]} ready`), READY_WAIT_MS)));
    const match = await this.children[0]!.waitFor(/client port of n1 on (\S+):/, READY_WAIT_MS);
    return match[1]!;
  }

  /** SIGINT to every child, then SIGKILL to those still running after `STOP_WAIT_MS`. */
  async stop(): Promise<void> {
    for (const c of this.children) c.signal('SIGINT');
    await Promise.all(
      this.children.map(async (c) => {
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, STOP_WAIT_MS);
        });
        await Promise.race([c.exited, timedOut]);
        clearTimeout(timer);
        c.signal('SIGKILL');
        await c.exited;
      }),
    );
    process.off('exit', this.killOnExit);
    process.off('SIGINT', this.exitOnInterrupt);
  }

  tails(): string[] {
    return this.children.map((c, i) => {
      const lines = c.output.trimEnd().split('\n').slice(-OUTPUT_TAIL_LINES);
      return `${NAMES[i]}:\n${lines.map((l) => `    ${l}`).join('\n')}`;
    });
  }

  exits(): string[] {
    return this.children.map((c, i) => `${NAMES[i]}: ${c.describeExit()}`);
  }
}

// ------------------------------------------------------------------ workloads

interface Workload {
  readonly name: string;
  readonly run: () => Promise<WorkloadResult>;
}

/** Writes to 64 keys (every partition) and runs a few transactions, retrying until primaries serve them. */
async function warmUp(client: RemoteClient): Promise<void> {
  const deadline = performance.now() + WARMUP_MS_MAX;
  const retrying = async (op: () => Promise<unknown>): Promise<void> => {
    for (;;) {
      try {
        await op();
        return;
      } catch (error) {
        if (!isBasaltError(error) || !error.retryable || performance.now() > deadline) throw error;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  for (let i = 0; i < 64; i++) await retrying(() => client.put(TABLE, `warm/${i}`, VALUE));
  for (let i = 0; i < 64; i++) await retrying(() => client.get(TABLE, `warm/${i}`));
  for (let i = 0; i < 16; i++) {
    await retrying(() =>
      client.transaction(async (tx) => {
        await tx.put(TABLE, `warm/${i}`, VALUE);
        await tx.put(TABLE, `warm/${i + 16}`, VALUE);
      }),
    );
    await retrying(() => client.transaction((tx) => tx.get(TABLE, `warm/${i}`), { readOnly: true }));
  }
}

function workloadsOf(client: RemoteClient): Workload[] {
  const rwPair = async (a: string, b: string): Promise<void> => {
    await client.transaction(async (tx) => {
      await tx.put(TABLE, a, VALUE);
      await tx.put(TABLE, b, VALUE);
    });
  };
  const spec = (name: string, kind: 'write' | 'read', callers: number, ops: number, op: Op): Workload => ({
    name,
    run: () => measure({ name, kind, callers, ops, op }),
  });
  return [
    spec('implicit put, sequential', 'write', 1, 300, (i) => client.put(TABLE, `put/${i}`, VALUE)),
    spec('implicit put, 16 concurrent', 'write', 16, 1_600, (i) => client.put(TABLE, `put16/${i}`, VALUE)),
    // Reads the keys the sequential puts wrote: every read finds a committed value.
    spec('implicit get, sequential', 'read', 1, 300, (i) => client.get(TABLE, `put/${i}`)),
    spec('RW tx (2 puts), sequential', 'write', 1, 200, (i) => rwPair(`rw/${i}/a`, `rw/${i}/b`)),
    // Fresh keys per call: no two calls touch the same key, so no lock waits and no intents left to resolve.
    spec('RW tx (2 puts), 8 concurrent', 'write', 8, 800, (i) => rwPair(`rw8/${i}/a`, `rw8/${i}/b`)),
    spec('RO tx (2 gets), sequential', 'read', 1, 300, (i) =>
      client.transaction(
        async (tx) => {
          await tx.get(TABLE, `rw/${i % 200}/a`);
          await tx.get(TABLE, `rw/${i % 200}/b`);
        },
        { readOnly: true },
      ),
    ),
    { name: `bank transfers, ${BANK.accounts} accounts, ${BANK.workers} workers`, run: () => bank(client) },
  ];
}

type Op = (index: number) => Promise<unknown>;

interface MeasureSpec {
  readonly name: string;
  readonly kind: 'write' | 'read';
  readonly callers: number;
  /** Calls over all callers; each caller takes the next index until they are used up or the time cap passes. */
  readonly ops: number;
  readonly op: Op;
}

async function measure(spec: MeasureSpec): Promise<WorkloadResult> {
  const latenciesUs: number[] = [];
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  let stoppedBy: string | undefined;
  const t0 = performance.now();
  const deadline = t0 + WORKLOAD_MS_MAX;
  const caller = async (): Promise<void> => {
    while (next < spec.ops && stoppedBy === undefined && performance.now() < deadline) {
      const index = next++;
      const start = performance.now();
      try {
        await spec.op(index);
        latenciesUs.push((performance.now() - start) * 1000);
      } catch (error) {
        errors++;
        firstError ??= describe(error);
        if (errors > WORKLOAD_ERRORS_MAX || !isBasaltError(error)) stoppedBy = firstError;
      }
    }
  };
  await Promise.all(Array.from({ length: spec.callers }, caller));
  const elapsedS = (performance.now() - t0) / 1000;
  return {
    name: spec.name,
    kind: spec.kind,
    ops: latenciesUs.length,
    opsPerSec: latenciesUs.length / elapsedS,
    latency: summarize(latenciesUs),
    errors,
    firstError,
    stoppedBy,
    note: undefined,
  };
}

/**
 * The workload of `basalt demo` (src/cli/demo.ts), which exports no figures: writers move money between random
 * accounts in RW transactions (getAll of both `{ forUpdate: true }`, then two puts; retried up to `BANK.retries` times), an auditor sums
 * every account in an RO transaction every `BANK.auditEveryMs`; the total must be conserved.
 */
async function bank(client: RemoteClient): Promise<WorkloadResult> {
  const key = (i: number): string => `bank/${i}`;
  const keys = Array.from({ length: BANK.accounts }, (_, i) => key(i));
  await client.transaction((tx) =>
    tx.putAll(
      TABLE,
      keys.map((k) => ({ key: k, value: BANK.initialBalance })),
    ),
  );
  const latenciesUs: number[] = [];
  const tally = { attempts: 0, aborts: 0, checksPassed: 0, checksFailed: 0, auditErrors: 0 };
  let firstError: string | undefined;
  const sum = async (readOnly: boolean): Promise<number> => {
    const values = await client.transaction((tx) => tx.getAll(TABLE, keys), { readOnly, retries: 30 });
    return (values as number[]).reduce((s, v) => s + v, 0);
  };
  const expected = BANK.accounts * BANK.initialBalance;
  const t0 = performance.now();
  const end = t0 + BANK.durationMs;
  const writer = async (w: number): Promise<void> => {
    let n = w + 1;
    while (performance.now() < end) {
      const next = nextTransfer(n, BANK.accounts);
      n = next.state;
      const start = performance.now();
      try {
        await client.transaction(
          (tx) => {
            tally.attempts++;
            return transferIn(tx, TABLE, key(next.from), key(next.to), next.amount);
          },
          { retries: BANK.retries },
        );
        latenciesUs.push((performance.now() - start) * 1000);
      } catch (error) {
        if (!isBasaltError(error)) throw error;
        tally.aborts++;
        firstError ??= describe(error);
      }
    }
  };
  const auditor = async (): Promise<void> => {
    while (performance.now() < end) {
      try {
        if ((await sum(true)) === expected) tally.checksPassed++;
        else tally.checksFailed++;
      } catch (error) {
        if (!isBasaltError(error)) throw error;
        tally.auditErrors++;
        firstError ??= describe(error);
      }
      await new Promise((r) => setTimeout(r, BANK.auditEveryMs));
    }
  };
  await Promise.all([...Array.from({ length: BANK.workers }, (_, w) => writer(w)), auditor()]);
  const elapsedS = (performance.now() - t0) / 1000;
  const total = await sum(false);
  const transfers = latenciesUs.length;
  return {
    name: `bank transfers, ${BANK.accounts} accounts, ${BANK.workers} workers, ${BANK.durationMs / 1000} s`,
    kind: 'write',
    ops: transfers,
    opsPerSec: transfers / elapsedS,
    latency: summarize(latenciesUs),
    errors: tally.aborts + tally.auditErrors,
    firstError,
    stoppedBy: undefined,
    note:
      `retries ${tally.attempts - transfers - tally.aborts}, aborts (retries exhausted) ${tally.aborts}, ` +
      `RO audits ${tally.checksPassed} passed ${tally.checksFailed} failed ${tally.auditErrors} errors, ` +
      `total ${total === expected ? 'conserved' : `BROKEN (${total}, expected ${expected})`}`,
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

// ------------------------------------------------------------------ report

export function formatClientBench(r: ClientBenchResult): string {
  const ms = (us: number): string => `${(us / 1000).toFixed(2)} ms`;
  const writeFloorUs = r.floors.fsyncP50Us + r.floors.rttP50Us;
  const readFloorUs = r.floors.rttP50Us;
  const lines = [
    `client: 3 basalt start processes, TCP loopback, LMDB with fsync, table ${TABLE}:8:3, one connect() client to n1`,
    `  cluster ready in ${(r.readyMs / 1000).toFixed(1)} s; floors: fsync p50 ${r.floors.fsyncP50Us.toFixed(0)} us, ` +
      `loopback RTT p50 ${r.floors.rttP50Us.toFixed(0)} us; write floor = fsync + RTT = ${ms(writeFloorUs)}, ` +
      `read floor = RTT = ${ms(readFloorUs)}`,
  ];
  for (const w of r.workloads) {
    const floorUs = w.kind === 'write' ? writeFloorUs : readFloorUs;
    const latency =
      w.ops === 0
        ? 'no call succeeded'
        : `p50 ${ms(w.latency.p50Us).padStart(9)} (${(w.latency.p50Us / floorUs).toFixed(1)}x ${w.kind} floor)  ` +
          `p99 ${ms(w.latency.p99Us).padStart(9)}`;
    lines.push(
      `  ${w.name.padEnd(46)} ${String(w.ops).padStart(5)} ops ${w.opsPerSec.toFixed(0).padStart(6)} ops/s  ${latency}`,
    );
    if (w.note !== undefined) lines.push(`      ${w.note}`);
    if (w.errors > 0) lines.push(`      ${w.errors} calls failed; first: ${w.firstError}`);
    if (w.stoppedBy !== undefined) lines.push(`      stopped early: ${w.stoppedBy}`);
  }
  for (const f of r.failures) lines.push(`  ${f.name.padEnd(46)} FAILED: ${f.error}`);
  const unclean = r.exits.some((e) => !e.endsWith('exit code 0'));
  if (unclean) lines.push(`  node exits: ${r.exits.join(', ')}`);
  if (unclean || r.failures.length > 0 || r.workloads.some((w) => w.errors > 0)) {
    lines.push('  last output of each node:', ...r.outputTails.map((t) => `  ${t}`));
  }
  return lines.join('\n');
}
