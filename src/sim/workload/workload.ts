/**
 * What a workload of `basalt sim` supplies: a table, a setup, one client operation at a time (each recorded in the
 * history as an invocation and its completion), final reads once the cluster is quiet, and a checker over the
 * history. Operations go through the public client API only. How a completion is classified:
 *   - the body's value: `ok` with what it returned, or `fail` when the operation decided not to act (a failed cas,
 *     an overdraft);
 *   - a coded error before commit, or a coded error of a commit that the protocol reports as a definite abort: `fail`;
 *   - TX_OUTCOME_UNKNOWN or TX_MISMATCHING_OUTCOME from a commit or an implicit write: `info`, and the worker's
 *     client continues under a fresh process id;
 *   - anything else (an uncoded error, INTERNAL, a simulator failure) is not an outcome but a crash of the run.
 */

import type { Client, Transaction } from '../../client/client.js';
import { BasaltError } from '../../core/errors.js';
import type { TxWrite } from '../../tx/core/user-input.js';
import type { HistoryRecorder, Operation, OpType } from '../check/history.js';
import { SimulationError } from '../errors.js';
import type { SeededRandom } from '../random.js';

export type WorkloadName = 'bank' | 'register' | 'list-append';

export const WORKLOADS: readonly WorkloadName[] = ['bank', 'register', 'list-append'];

/** What a workload sees of where it runs: a simulated cluster (virtual time) or real processes (`basalt jepsen`). */
export interface WorkloadContext {
  readonly recorder: HistoryRecorder;
  readonly table: string;
  /** A client for the setup (writes before the history starts). */
  readonly setupClient: Client;
  /** Lets time pass: virtual under the simulator, real against processes. */
  sleep(ms: number): Promise<void>;
}

export interface Worker {
  /** Replaced when a connection to a real node is lost and made again. */
  client: Client;
  readonly random: SeededRandom;
  process: number;
}

export interface CheckOutcome {
  readonly valid: boolean;
  /** One line: what was checked and the counts. */
  readonly summary: string;
  /** One readable line per anomaly found. */
  readonly anomalies: readonly string[];
}

export interface Workload {
  readonly name: WorkloadName;
  setup(ctx: WorkloadContext): Promise<void>;
  /** Runs one operation of `worker` and records it; returns its completion type. */
  operation(ctx: WorkloadContext, worker: Worker): Promise<Exclude<OpType, 'invoke'>>;
  /** Reads taken once the cluster is healed and the workers stopped (recorded like any operation). */
  final(ctx: WorkloadContext, worker: Worker): Promise<void>;
  check(history: readonly Operation[]): CheckOutcome;
}

/** What the body of an operation decided. */
export type BodyResult<V> =
  | { readonly type: 'ok'; readonly value: V }
  | { readonly type: 'fail'; readonly error: string };

/** An error that is an outcome of the operation (a coded client error), as opposed to a crash of the run. */
export function isOutcome(error: unknown): error is BasaltError {
  return error instanceof BasaltError && !(error instanceof SimulationError) && error.code !== 'INTERNAL';
}

function uncertain(error: BasaltError): boolean {
  return error.code === 'TX_OUTCOME_UNKNOWN' || error.code === 'TX_MISMATCHING_OUTCOME';
}

/**
 * Records `invocation`, runs `body` and records its completion; an `info` moves the worker to a fresh process.
 * `body` throws coded errors for failures; `committing()` says whether the failure came from a commit (or an
 * implicit write), where an unknown outcome is possible.
 */
export async function perform<O extends Operation>(
  ctx: WorkloadContext,
  worker: Worker,
  invocation: Omit<O, 'type' | 'time' | 'index' | 'process'>,
  body: () => Promise<BodyResult<O['value']>>,
): Promise<Exclude<OpType, 'invoke'>> {
  const invoked = ctx.recorder.invoke<O>({ ...invocation, process: worker.process } as Omit<
    O,
    'type' | 'time' | 'index'
  >);
  try {
    const result = await body();
    if (result.type === 'ok') ctx.recorder.complete(invoked, 'ok', result.value);
    else ctx.recorder.complete(invoked, 'fail', invoked.value, result.error);
    return result.type;
  } catch (error) {
    if (!isOutcome(error)) throw error;
    const type = uncertain(error) ? 'info' : 'fail';
    ctx.recorder.complete(invoked, type, invoked.value, error.code);
    if (type === 'info') worker.process = ctx.recorder.process();
    return type;
  }
}

/** Signals from a transaction body that it chose not to act: the tx is rolled back and the operation fails. */
export class Abstain extends Error {
  constructor(readonly reason: string) {
    super(reason);
  }
}

/**
 * One RW (or RO) transaction without retries: `fn` runs, then commit. A failure before commit rolls back (the
 * operation had no effect); a commit's error propagates to `perform`, which classifies it.
 */
export async function transact<V>(
  client: Client,
  fn: (tx: Transaction) => Promise<V>,
  options: { readonly readOnly?: boolean; readonly writes?: readonly TxWrite[] } = {},
): Promise<BodyResult<V>> {
  const tx = await client.begin(options.readOnly === true ? { readOnly: true } : {});
  let value: V;
  try {
    value = await fn(tx);
  } catch (error) {
    await tx.rollback();
    if (error instanceof Abstain) return { type: 'fail', error: error.reason };
    if (isOutcome(error) && uncertain(error)) {
      // Before commit nothing can be in doubt: the tx never asked to commit.
      return { type: 'fail', error: error.code };
    }
    throw error;
  }
  // Writes the body kept for the commit are carried by it, as a client that buffers its writes does.
  if (options.writes !== undefined && options.writes.length > 0) await commitWith(tx, options.writes);
  else await tx.commit();
  return { type: 'ok', value };
}

/**
 * The commit carries `writes`: given to it directly (the embedded client), or put first into a transaction that keeps
 * its writes until the commit (a `connect()` client, which buffers them by default) and then committed.
 */
async function commitWith(tx: Transaction, writes: readonly TxWrite[]): Promise<void> {
  const carrying = tx as Transaction & { commitWith?: (writes: readonly TxWrite[]) => Promise<void> };
  if (carrying.commitWith !== undefined) return carrying.commitWith(writes);
  for (const w of writes) await (w.value === undefined ? tx.remove(w.table, w.key) : tx.put(w.table, w.key, w.value));
  await tx.commit();
}
