/**
 * One client thread of the end-to-end benchmark (a worker_threads worker): it connects once (Basalt: `connectCluster`
 * with its home node's client port first, so that transactions run there and each single-key operation goes to its
 * key's primary; etcd: one `Etcd3` client on one member) and keeps the connection for every cell; per
 * cell it runs `callers` concurrent loops of the cell's workload, and reports what completed inside the measured window [startMs, endMs): latencies, operations,
 * attempts (transaction bodies run, retries included), aborts (retries exhausted) and other failures. Operations that
 * complete before `startMs` are the warm-up. Wall-clock epoch times mark the window because worker threads do not
 * share `performance.now()`'s origin.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Etcd3 } from 'etcd3';
import { transferIn } from '../src/cli/demo.js';
import type { RemoteClient, RemoteTransaction } from '../src/client/remote.js';
import { isBasaltError } from '../src/core/errors.js';
import { SeededRandom } from './stats.js';
import type { BenchTls } from './tls.js';
import {
  ACCOUNTS,
  accountKey,
  HOT_ACCOUNTS,
  hotKey,
  PUT_KEYS_PER_CALLER,
  TRANSFER_RETRIES,
  userKey,
  VALUE_BYTES,
  WORKLOADS,
  type WorkloadName,
  YCSB_RECORDS,
} from './workloads.js';
import { ScrambledZipfian } from './zipf.js';

export const BENCH_TABLE = 'bench';
const VALUE = 'v'.repeat(VALUE_BYTES);
/** A thread stops its loops after this many failures that are not aborts, and reports the first. */
const FAILURES_MAX = 50;

export interface DriverJob {
  readonly workload: WorkloadName;
  readonly callers: number;
  readonly thread: number;
  readonly seed: number;
  /** The keys an intent cell reads (chosen by the main thread, which knows where the intents are). */
  readonly keys?: readonly string[];
}

export interface DriverGo {
  readonly kind: 'go';
  readonly startMs: number;
  readonly endMs: number;
}

export interface DriverResult {
  readonly kind: 'result';
  readonly latenciesUs: Float64Array;
  readonly ops: number;
  readonly attempts: number;
  readonly aborts: number;
  readonly failures: number;
  readonly firstFailure: string | undefined;
  /** etcd single-key CAS only: compares that failed (never expected: each caller owns its key). */
  readonly casFailures: number;
}

/** One operation; resolves with the attempts it took. A rejection with `Abort` is an abort, anything else a failure. */
type Op = () => Promise<number>;

export class Abort extends Error {
  constructor(
    readonly attempts: number,
    cause: unknown,
  ) {
    super(`aborted after ${attempts} attempts: ${describe(cause)}`);
  }
}

export interface Tally {
  casFailures: number;
}

/**
 * Basalt's operations. An implicit get or put that fails retryably (a lock conflict with a transaction it is younger
 * than, a primary moving) counts as an abort, as a transaction that ran out of retries does.
 */
export function basaltOps(client: RemoteClient, job: DriverJob, caller: number): Op {
  const op = basaltOp(client, job, caller);
  if (WORKLOADS[job.workload].transactional) return op;
  return async () => {
    try {
      return await op();
    } catch (error) {
      if (isBasaltError(error) && error.retryable) throw new Abort(1, error);
      throw error;
    }
  };
}

function basaltOp(client: RemoteClient, job: DriverJob, caller: number): Op {
  const random = new SeededRandom(job.seed * 1_000 + caller);
  const table = BENCH_TABLE;
  switch (job.workload) {
    case 'put': {
      let i = 0;
      return async () => {
        await client.put(table, `put/${job.thread}/${caller}/${i++ % PUT_KEYS_PER_CALLER}`, VALUE);
        return 1;
      };
    }
    case 'get':
      return async () => {
        await client.get(table, accountKey(random.int(ACCOUNTS)));
        return 1;
      };
    case 'ro-tx':
      return async () => {
        const [a, b] = random.pair(ACCOUNTS);
        await client.transaction(
          async (tx) => {
            await tx.get(table, accountKey(a));
            await tx.get(table, accountKey(b));
          },
          { readOnly: true },
        );
        return 1;
      };
    case 'transfer':
    case 'transfer-hot':
    case 'transfer-seq': {
      const [count, key] = job.workload === 'transfer-hot' ? [HOT_ACCOUNTS, hotKey] : [ACCOUNTS, accountKey];
      const move = job.workload === 'transfer-seq' ? transferOneByOne : transferIn;
      return async () => {
        const [a, b] = random.pair(count);
        const amount = 1 + random.int(10);
        let attempts = 0;
        try {
          await client.transaction(
            (tx) => {
              attempts++;
              return move(tx, table, key(a), key(b), amount);
            },
            { retries: TRANSFER_RETRIES },
          );
        } catch (error) {
          if (isBasaltError(error)) throw new Abort(attempts, error);
          throw error;
        }
        return attempts;
      };
    }
    case 'ycsb-a': {
      const zipf = new ScrambledZipfian(YCSB_RECORDS, random);
      return async () => {
        const key = userKey(zipf.next());
        if (random.next() < 0.5) await client.get(table, key);
        else await client.put(table, key, VALUE);
        return 1;
      };
    }
    case 'ro-intent-local':
    case 'ro-intent-coordinator':
    case 'ro-intent-commit-partition': {
      const keys = job.keys ?? [];
      if (keys.length === 0) throw new Error(`${job.workload}: the cell names no keys`);
      return async () => {
        await client.get(table, keys[random.int(keys.length)]!);
        return 1;
      };
    }
  }
}

export function etcdOps(client: Etcd3, job: DriverJob, caller: number, tally: Tally): Op {
  const random = new SeededRandom(job.seed * 1_000 + caller);
  switch (job.workload) {
    case 'put': {
      const key = `put/${job.thread}/${caller}`;
      let revision: string | undefined;
      return async () => {
        revision ??= (await client.put(key).value(VALUE).exec()).header.revision;
        const result = await client.if(key, 'Mod', '==', revision).then(client.put(key).value(VALUE)).commit();
        if (result.succeeded) revision = result.header.revision;
        else {
          tally.casFailures++;
          revision = undefined;
        }
        return 1;
      };
    }
    case 'get':
      return async () => {
        await client.get(accountKey(random.int(ACCOUNTS))).string();
        return 1;
      };
    case 'ro-tx':
      return async () => {
        const [a, b] = random.pair(ACCOUNTS);
        await client.get(accountKey(a)).serializable(true).string();
        await client.get(accountKey(b)).serializable(true).string();
        return 1;
      };
    case 'transfer':
    case 'transfer-hot':
    case 'transfer-seq': {
      const [count, key] = job.workload === 'transfer-hot' ? [HOT_ACCOUNTS, hotKey] : [ACCOUNTS, accountKey];
      const oneByOne = job.workload === 'transfer-seq';
      return async () => {
        const [a, b] = random.pair(count);
        const amount = 1 + random.int(10);
        for (let attempt = 1; attempt <= 1 + TRANSFER_RETRIES; attempt++) {
          const [ra, rb] = oneByOne
            ? [await client.get(key(a)).exec(), await client.get(key(b)).exec()]
            : await Promise.all([client.get(key(a)).exec(), client.get(key(b)).exec()]);
          const [kvA, kvB] = [ra.kvs[0], rb.kvs[0]];
          if (kvA === undefined || kvB === undefined) throw new Error(`account ${key(a)} or ${key(b)} is missing`);
          const result = await client
            .if(key(a), 'Mod', '==', kvA.mod_revision)
            .and(key(b), 'Mod', '==', kvB.mod_revision)
            .then(
              client.put(key(a)).value(String(Number(kvA.value.toString()) - amount)),
              client.put(key(b)).value(String(Number(kvB.value.toString()) + amount)),
            )
            .commit();
          if (result.succeeded) return attempt;
        }
        throw new Abort(1 + TRANSFER_RETRIES, 'every compare failed');
      };
    }
    case 'ycsb-a': {
      const zipf = new ScrambledZipfian(YCSB_RECORDS, random);
      return async () => {
        const key = userKey(zipf.next());
        if (random.next() < 0.5) await client.get(key).string();
        else await client.put(key).value(VALUE);
        return 1;
      };
    }
    case 'ro-intent-local':
    case 'ro-intent-coordinator':
    case 'ro-intent-commit-partition':
      throw new Error(`${job.workload}: etcd has no write intents`);
  }
}

/** A transfer one key at a time, as an interactive transaction makes it: each step waits for the one before. */
async function transferOneByOne(tx: RemoteTransaction, table: string, from: string, to: string, amount: number) {
  const a = (await tx.get(table, from, { forUpdate: true })) as number;
  const b = (await tx.get(table, to, { forUpdate: true })) as number;
  await tx.put(table, from, a - amount);
  await tx.put(table, to, b + amount);
}

/** Runs the loops of `ops` until `endMs`, recording what completes inside the window. */
export async function drive(ops: readonly Op[], go: DriverGo, tally: Tally): Promise<DriverResult> {
  const latenciesUs: number[] = [];
  const counts = { ops: 0, attempts: 0, aborts: 0, failures: 0 };
  let firstFailure: string | undefined;
  const loop = async (op: Op): Promise<void> => {
    while (Date.now() < go.endMs && counts.failures < FAILURES_MAX) {
      const t0 = performance.now();
      let attempts = 0;
      let aborted = false;
      let failed = false;
      try {
        attempts = await op();
      } catch (error) {
        if (error instanceof Abort) {
          aborted = true;
          attempts = error.attempts;
        } else {
          failed = true;
          firstFailure ??= describe(error);
        }
      }
      const doneMs = Date.now();
      if (doneMs < go.startMs || doneMs >= go.endMs) continue;
      if (failed) counts.failures++;
      else if (aborted) {
        counts.aborts++;
        counts.attempts += attempts;
      } else {
        counts.ops++;
        counts.attempts += attempts;
        latenciesUs.push((performance.now() - t0) * 1000);
      }
    }
  };
  // Operations still in flight at the window's end would not be counted: report without waiting for them (the
  // thread is terminated next, which closes its connection).
  let timer: NodeJS.Timeout | undefined;
  const windowEnd = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, go.endMs - Date.now()));
  });
  await Promise.race([Promise.all(ops.map(loop)), windowEnd]);
  clearTimeout(timer);
  return {
    kind: 'result',
    latenciesUs: Float64Array.from(latenciesUs),
    ...counts,
    firstFailure,
    casFailures: tally.casFailures,
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export interface DriverConnection {
  readonly system: 'basalt' | 'etcd';
  readonly address: string;
  /** Basalt: the other nodes' client ports (`connectCluster`: single-key operations go to their key's primary). */
  readonly others: readonly string[];
  /** Basalt with `--tls`: the CA and the admin's client certificate. */
  readonly tls?: BenchTls;
}

export interface DriverJobMessage {
  readonly kind: 'job';
  readonly job: DriverJob;
}

/**
 * Connects once, then runs one job per 'job' message: builds its loops, answers 'ready', waits for 'go', answers with
 * the result. Loops of an earlier job still in flight end after their current operation (their window is over).
 */
async function main(connection: DriverConnection): Promise<void> {
  const port = parentPort!;
  let opsOf: (job: DriverJob, tally: Tally) => Op[];
  if (connection.system === 'basalt') {
    // Each thread loads only its own system's client (grpc-js alone takes a noticeable part of a short cell).
    const { connectCluster } = await import('../src/client/routing.js');
    // For before/after runs: BASALT_BUFFERED_WRITES=0 sends each write of a transaction at once;
    // BASALT_LAZY_BEGIN=0 begins each transaction with a request of its own, on the thread's home node;
    // BASALT_DIRECT_MAPPING=1 sends a transaction's single-key operations straight to their primaries.
    const bufferWrites = process.env['BASALT_BUFFERED_WRITES'] !== '0';
    const lazyBegin = process.env['BASALT_LAZY_BEGIN'] !== '0';
    const directMapping = process.env['BASALT_DIRECT_MAPPING'] === '1';
    const client = await connectCluster([connection.address, ...connection.others], {
      ...(connection.tls ?? {}),
      bufferWrites,
      lazyBegin,
      directMapping,
    });
    opsOf = (job) => Array.from({ length: job.callers }, (_, c) => basaltOps(client, job, c));
  } else {
    const { Etcd3 } = await import('etcd3');
    const client = new Etcd3({ hosts: `http://${connection.address}` });
    opsOf = (job, tally) => Array.from({ length: job.callers }, (_, c) => etcdOps(client, job, c, tally));
  }
  let tally: Tally = { casFailures: 0 };
  let ops: Op[] = [];
  port.on('message', (m: DriverJobMessage | DriverGo) => {
    if (m.kind === 'job') {
      tally = { casFailures: 0 };
      ops = opsOf(m.job, tally);
      port.postMessage({ kind: 'ready' });
      return;
    }
    void drive(ops, m, tally).then(
      (result) => port.postMessage(result, [result.latenciesUs.buffer as ArrayBuffer]),
      (error: unknown) => port.postMessage({ kind: 'error', error: describe(error) }),
    );
  });
  port.postMessage({ kind: 'connected' });
}

if (parentPort !== null && workerData !== undefined) {
  main(workerData as DriverConnection).catch((error: unknown) => {
    parentPort!.postMessage({ kind: 'error', error: describe(error) });
  });
}
