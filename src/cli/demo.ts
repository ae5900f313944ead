/**
 * `basalt demo`: a bank workload against a running cluster over `connect()` (several addresses: `connectCluster`). Writers move money between accounts in
 * read-write transactions; an auditor repeatedly reads every account in one read-only transaction and checks that the
 * snapshot sums to the total (a snapshot that does not is a failed check). A progress line each second shows
 * throughput, p99 commit latency, RO checks passed and, when the nodes' metrics endpoints answer, the write intent
 * resolution counters summed over the nodes. The final report repeats them and checks the total once more; the exit
 * code is 1 if any check failed.
 */
import { connect, type RemoteClient } from '../client/remote.js';
import { connectCluster } from '../client/routing.js';
import { isBasaltError } from '../core/errors.js';
import { parseMetrics } from './admin.js';
import { log } from './common.js';

export interface DemoOptions {
  /** One client port, or several comma separated (`connectCluster`: a transfer begins on its first key's node). */
  readonly connect: string;
  readonly metrics: readonly string[];
  readonly table: string;
  readonly accounts: number;
  readonly workers: number;
  readonly durationMs: number;
}

const INITIAL_BALANCE = 1_000;
const LATENCIES_KEPT_MAX = 100_000;
const PROGRESS_MS = 1_000;

interface Tally {
  transfers: number;
  failures: number;
  roPassed: number;
  roFailed: number;
  readonly latenciesMs: number[];
}

export async function demo(options: DemoOptions): Promise<boolean> {
  const addresses = options.connect.split(',').filter((a) => a.length > 0);
  const client = addresses.length > 1 ? await connectCluster(addresses) : await connect(options.connect);
  try {
    await prepare(client, options);
    const tally: Tally = { transfers: 0, failures: 0, roPassed: 0, roFailed: 0, latenciesMs: [] };
    const startMs = Date.now();
    const endMs = startMs + options.durationMs;
    const progress = setInterval(() => void progressLine(tally, startMs, options), PROGRESS_MS);
    try {
      await Promise.all([
        ...Array.from({ length: options.workers }, (_, w) => writer(client, options, tally, endMs, w)),
        auditor(client, options, tally, endMs),
      ]);
    } finally {
      clearInterval(progress);
    }
    const total = await sumBalances(client, options, false);
    const expected = options.accounts * INITIAL_BALANCE;
    const seconds = (Date.now() - startMs) / 1000;
    if (process.stdout.isTTY) process.stdout.write('\n');
    log('demo report:');
    log(`  transfers committed ${tally.transfers} in ${seconds.toFixed(1)} s (${rate(tally.transfers, seconds)}/s)`);
    log(`  transfers failed ${tally.failures}`);
    log(`  commit latency p50 ${percentile(tally.latenciesMs, 0.5)} ms, p99 ${percentile(tally.latenciesMs, 0.99)} ms`);
    log(`  read-only snapshot checks passed ${tally.roPassed}, failed ${tally.roFailed}`);
    log(`  resolution ${await resolutionText(options.metrics)}`);
    log(`  total ${total} (expected ${expected}): ${total === expected ? 'conserved' : 'BROKEN'}`);
    return total === expected && tally.roFailed === 0;
  } finally {
    await client.close();
  }
}

const accountKey = (i: number): string => `account/${i}`;

async function prepare(client: RemoteClient, options: DemoOptions): Promise<void> {
  const tables = await client.tables();
  if (!tables.some((t) => t.name === options.table)) {
    await client.createTable(options.table, { partitions: 8, replicas: Math.min(3, options.metrics.length || 3) });
    log(`table ${options.table} created`);
  }
  // Accounts are created once: a rerun continues from the balances it finds.
  await client.transaction(
    async (tx) => {
      const keys = Array.from({ length: options.accounts }, (_, i) => accountKey(i));
      const found = await tx.getAll(options.table, keys);
      const missing = keys.filter((_, i) => found[i] === undefined);
      if (missing.length === keys.length) {
        await tx.putAll(
          options.table,
          keys.map((key) => ({ key, value: INITIAL_BALANCE })),
        );
      } else if (missing.length > 0) {
        throw new Error(`table ${options.table} holds a different number of accounts: use another --table`);
      }
    },
    { retries: 30 },
  );
}

/** One step of a writer's deterministic transfer stream: the next state, two distinct accounts and an amount. */
export function nextTransfer(
  state: number,
  accounts: number,
): { state: number; from: number; to: number; amount: number } {
  const n = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
  const from = n % accounts;
  const to = (from + 1 + ((n >> 8) % (accounts - 1))) % accounts;
  return { state: n, from, to, amount: 1 + ((n >> 16) % 10) };
}

/** What a transfer needs of a read-write transaction. */
interface TransferTx {
  getAll(table: string, keys: readonly string[], options: { forUpdate: boolean }): Promise<unknown[]>;
  putAll(table: string, entries: readonly { readonly key: string; readonly value: number }[]): Promise<void>;
}

/**
 * Moves `amount` between two accounts inside `tx`. Both are read forUpdate: X-locked now, so a concurrent transfer
 * waits instead of dying at an S→X upgrade. Both are written in one putAll: one call, the two partitions' writes
 * in parallel.
 */
export async function transferIn(tx: TransferTx, table: string, fromKey: string, toKey: string, amount: number) {
  const [a, b] = (await tx.getAll(table, [fromKey, toKey], { forUpdate: true })) as [number, number];
  await tx.putAll(table, [
    { key: fromKey, value: a - amount },
    { key: toKey, value: b + amount },
  ]);
}

async function writer(client: RemoteClient, o: DemoOptions, tally: Tally, endMs: number, w: number): Promise<void> {
  let n = w;
  while (Date.now() < endMs && !client.closed) {
    const next = nextTransfer(n, o.accounts);
    n = next.state;
    const t0 = Date.now();
    try {
      await client.transaction(
        (tx) => transferIn(tx, o.table, accountKey(next.from), accountKey(next.to), next.amount),
        { retries: 20 },
      );
      tally.transfers++;
      if (tally.latenciesMs.length < LATENCIES_KEPT_MAX) tally.latenciesMs.push(Date.now() - t0);
    } catch (error) {
      tally.failures++;
      if (!isBasaltError(error)) throw error;
    }
  }
}

async function auditor(client: RemoteClient, options: DemoOptions, tally: Tally, endMs: number): Promise<void> {
  const expected = options.accounts * INITIAL_BALANCE;
  while (Date.now() < endMs && !client.closed) {
    try {
      const total = await sumBalances(client, options, true);
      if (total === expected) tally.roPassed++;
      else tally.roFailed++;
    } catch (error) {
      if (!isBasaltError(error)) throw error;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function sumBalances(client: RemoteClient, options: DemoOptions, readOnly: boolean): Promise<number> {
  const keys = Array.from({ length: options.accounts }, (_, i) => accountKey(i));
  const values = await client.transaction((tx) => tx.getAll(options.table, keys), { readOnly, retries: 30 });
  return (values as number[]).reduce((s, v) => s + v, 0);
}

async function progressLine(tally: Tally, startMs: number, options: DemoOptions): Promise<void> {
  const seconds = (Date.now() - startMs) / 1000;
  const line =
    `${seconds.toFixed(0)}s: ${tally.transfers} transfers (${rate(tally.transfers, seconds)}/s), ` +
    `p99 ${percentile(tally.latenciesMs, 0.99)} ms, RO checks ${tally.roPassed} passed ${tally.roFailed} failed, ` +
    `resolution ${await resolutionText(options.metrics)}`;
  if (process.stdout.isTTY) process.stdout.write(`\r${line}\x1b[K`);
  else log(line);
}

/** Resolution counters summed over the nodes whose metrics answer. */
async function resolutionText(addresses: readonly string[]): Promise<string> {
  const sums = new Map<string, number>();
  let answered = 0;
  await Promise.all(
    addresses.map(async (address) => {
      try {
        const body = await (await fetch(`http://${address}/metrics`, { signal: AbortSignal.timeout(1_000) })).text();
        answered++;
        for (const s of parseMetrics(body)) {
          if (s.name !== 'basalt_resolution_total') continue;
          const path = s.labels['path'] ?? '?';
          sums.set(path, (sums.get(path) ?? 0) + s.value);
        }
      } catch {
        // A node that does not answer is left out of the sums; the count of nodes says so.
      }
    }),
  );
  if (answered === 0) return 'n/a (no metrics endpoint answered)';
  const paths = ['local', 'coordinator', 'commit_partition'].map((p) => `${p}=${sums.get(p) ?? 0}`).join(' ');
  return `${paths} (${answered}/${addresses.length} nodes)`;
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

function rate(count: number, seconds: number): string {
  return seconds > 0 ? (count / seconds).toFixed(1) : '0';
}
