/**
 * The list-append workload (Elle's): lists under a handful of keys spread over the table's partitions. RW transactions
 * run 1–4 micro-ops, each an append of a unique value to a key's list (read for update, then write the longer list)
 * or a read of a key's list; RO transactions read 2–4 lists at the coordinator's default readTs. A few hot keys take
 * most operations so that transactions conflict. Checked by `checkListAppend` for serializability (G0 to G2 and the
 * read anomalies), plus lost appends: a read that started more than twice maxClockSkew after an append was
 * acknowledged must contain it (commitTs and readTs are both within the skew bound of real time).
 */
import { LIMITS } from '../../core/limits.js';
import type { MicroOp, Operation } from '../check/history.js';
import { checkListAppend } from '../check/list-append.js';
import { perform, transact, type Worker, type Workload, type WorkloadContext } from './workload.js';

const KEYS = Array.from({ length: 8 }, (_, i) => `l${i}`);
const HOT_KEYS = 3;
const HOT_SHARE = 0.7;
const RO_SHARE = 0.25;
const FINAL_READ_ATTEMPTS = 20;
/** Twice maxClockSkew, in nanoseconds. */
export const LOST_APPEND_SLACK_NS = 2 * LIMITS.maxClockSkewMsDefault * 1_000_000;

type TxnOp = Extract<Operation, { f: 'txn' }>;

function pickKey(worker: Worker): string {
  const hot = worker.random.chance(HOT_SHARE);
  return hot ? KEYS[worker.random.int(HOT_KEYS)]! : worker.random.pick(KEYS);
}

function readList(value: unknown): number[] {
  return value === undefined ? [] : [...(value as number[])];
}

async function readOnly(ctx: WorkloadContext, worker: Worker, keys: readonly string[]) {
  const value: MicroOp[] = keys.map((k) => ['r', k, null]);
  return perform<TxnOp>(ctx, worker, { f: 'txn', value }, () =>
    transact(
      worker.client,
      async (tx) => {
        const lists = await tx.getAll(ctx.table, keys);
        return keys.map((k, i): MicroOp => ['r', k, readList(lists[i])]);
      },
      { readOnly: true },
    ),
  );
}

export function listAppendWorkload(): Workload {
  let lastValue = 0;
  return {
    name: 'list-append',

    async setup() {},

    operation(ctx, worker) {
      if (worker.random.chance(RO_SHARE)) {
        const count = 2 + worker.random.int(3);
        const keys = [...new Set(Array.from({ length: count }, () => pickKey(worker)))];
        return readOnly(ctx, worker, keys);
      }
      const value: MicroOp[] = Array.from({ length: 1 + worker.random.int(4) }, () => {
        const key = pickKey(worker);
        return worker.random.chance(0.5) ? ['append', key, ++lastValue] : ['r', key, null];
      });
      return perform<TxnOp>(ctx, worker, { f: 'txn', value }, () =>
        transact(worker.client, async (tx) => {
          const done: MicroOp[] = [];
          for (const op of value) {
            const key = op[1];
            if (op[0] === 'r') {
              done.push(['r', key, readList(await tx.get(ctx.table, key))]);
              continue;
            }
            const list = readList(await tx.get(ctx.table, key, { forUpdate: true }));
            await tx.put(ctx.table, key, [...list, op[2]]);
            done.push(op);
          }
          return done;
        }),
      );
    },

    async final(ctx, worker) {
      for (let i = 0; i < FINAL_READ_ATTEMPTS; i++) {
        if ((await readOnly(ctx, worker, KEYS)) === 'ok') return;
        await ctx.sleep(100);
      }
    },

    check(history) {
      const result = checkListAppend(history, { realtimeSlackNs: LOST_APPEND_SLACK_NS });
      const { ok, fail, info, keys, edges } = result.counts;
      return {
        valid: result.valid,
        summary: `list-append: txns ${ok} ok / ${fail} fail / ${info} info, ${keys} keys, ${edges} dependency edges`,
        anomalies: result.anomalies.map((a) => `${a.kind}: ${a.message} (ops ${a.ops.join(', ')})`),
      };
    },
  };
}
