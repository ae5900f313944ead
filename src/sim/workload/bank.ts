/**
 * The bank workload: accounts start with equal balances; workers transfer a fixed amount between two random accounts
 * in one RW transaction that reads both balances for update and abstains (fails) when the source holds too little,
 * or read every balance in one RO transaction. Checked by `checkBank`: every read sums to the total with no negative
 * balance, and the final read is explained by the acknowledged transfers plus some of the indeterminate ones.
 */

import type { TxWrite } from '../../tx/core/user-input.js';
import { type BankModel, checkBank } from '../check/bank.js';
import type { Operation, Transfer } from '../check/history.js';
import { Abstain, perform, transact, type Worker, type Workload, type WorkloadContext } from './workload.js';

const ACCOUNTS = Array.from({ length: 6 }, (_, i) => `acct-${i}`);
const INITIAL_BALANCE = 100;
const AMOUNT_MAX = 40;
const READ_SHARE = 0.3;
const FINAL_READ_ATTEMPTS = 20;
const CARRIED_SHARE = 0.5;

export const BANK_MODEL: BankModel = { accounts: ACCOUNTS, initialBalance: INITIAL_BALANCE };

type TransferOp = Extract<Operation, { f: 'transfer' }>;
type ReadOp = Extract<Operation, { f: 'read' }>;

async function readAll(ctx: WorkloadContext, worker: Worker) {
  return perform<ReadOp>(ctx, worker, { f: 'read', value: null }, () =>
    transact(
      worker.client,
      async (tx) => {
        const values = await tx.getAll(ctx.table, ACCOUNTS);
        return Object.fromEntries(ACCOUNTS.map((a, i) => [a, values[i] as number]));
      },
      { readOnly: true },
    ),
  );
}

export function bankWorkload(): Workload {
  return {
    name: 'bank',

    async setup(ctx) {
      const client = ctx.setupClient;
      for (const a of ACCOUNTS) await client.put(ctx.table, a, INITIAL_BALANCE);
    },

    operation(ctx, worker) {
      if (worker.random.chance(READ_SHARE)) return readAll(ctx, worker);
      const from = worker.random.pick(ACCOUNTS);
      const to = worker.random.pick(ACCOUNTS.filter((a) => a !== from));
      const value: Transfer = { from, to, amount: 1 + worker.random.int(AMOUNT_MAX) };
      // Half the transfers keep their writes for the commit, which carries them (as a TCP client's are).
      const carried: TxWrite[] | undefined = worker.random.chance(CARRIED_SHARE) ? [] : undefined;
      return perform<TransferOp>(ctx, worker, { f: 'transfer', value }, () =>
        transact(
          worker.client,
          async (tx) => {
            const a = (await tx.get(ctx.table, from, { forUpdate: true })) as number;
            const b = (await tx.get(ctx.table, to, { forUpdate: true })) as number;
            if (a < value.amount) throw new Abstain('insufficient');
            const writes = [
              { table: ctx.table, key: from, value: a - value.amount },
              { table: ctx.table, key: to, value: b + value.amount },
            ];
            if (carried !== undefined) carried.push(...writes);
            else for (const w of writes) await tx.put(w.table, w.key, w.value);
            return value;
          },
          carried === undefined ? {} : { writes: carried },
        ),
      );
    },

    async final(ctx, worker) {
      for (let i = 0; i < FINAL_READ_ATTEMPTS; i++) {
        if ((await readAll(ctx, worker)) === 'ok') return;
        await ctx.sleep(100);
      }
    },

    check(history) {
      const result = checkBank(history, BANK_MODEL);
      const { reads, ok, fail, info } = result.counts;
      return {
        valid: result.valid,
        summary: `bank: ${reads} reads, transfers ${ok} ok / ${fail} fail / ${info} info`,
        anomalies: result.anomalies.map((a) => `${a.kind}: ${a.message}${a.op === undefined ? '' : ` (op ${a.op})`}`),
      };
    },
  };
}
