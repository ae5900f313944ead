/**
 * The simulated runs themselves: a seed replays bit for bit, and a run whose workload breaks isolation on purpose is
 * caught by its checker, with the failure class the CLI turns into its exit code. So a passing seed means something.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { MicroOp, Operation, RegisterValue } from '../../src/sim/check/history.js';
import { bankWorkload } from '../../src/sim/workload/bank.js';
import { parseFaults } from '../../src/sim/workload/faults.js';
import { listAppendWorkload } from '../../src/sim/workload/list-append.js';
import { registerWorkload } from '../../src/sim/workload/register.js';
import { simRun } from '../../src/sim/workload/run.js';
import { perform, transact, type Workload } from '../../src/sim/workload/workload.js';

const QUICK = { durationMs: 2_000, faults: parseFaults('none') } as const;

type ReadOp = Extract<Operation, { f: 'read' }>;
type TxnOp = Extract<Operation, { f: 'txn' }>;
type RegisterOp = Extract<Operation, { f: 'write' }>;

/** Bank reads that read each account in its own RO transaction: no snapshot, so sums tear under transfers. */
function tornBank(): Workload {
  const inner = bankWorkload();
  return {
    ...inner,
    operation(ctx, worker) {
      if (!worker.random.chance(0.5)) return inner.operation(ctx, worker);
      return perform<ReadOp>(ctx, worker, { f: 'read', value: null }, async () => {
        const balances: Record<string, number> = {};
        for (let i = 0; i < 6; i++) {
          const key = `acct-${i}`;
          const read = await transact(worker.client, (tx) => tx.get(ctx.table, key), { readOnly: true });
          if (read.type === 'fail') return read;
          balances[key] = read.value as number;
        }
        return { type: 'ok', value: balances };
      });
    },
  };
}

/** List-append transactions whose reads run outside the transaction (implicit gets): not atomic with the appends. */
function splitListAppend(): Workload {
  const inner = listAppendWorkload();
  let next = 1_000_000;
  return {
    ...inner,
    operation(ctx, worker) {
      const keys = ['l0', 'l1'];
      const [r, a] = worker.random.chance(0.5) ? keys : [...keys].reverse();
      const value: MicroOp[] = [
        ['r', r!, null],
        ['append', a!, next++],
      ];
      return perform<TxnOp>(ctx, worker, { f: 'txn', value }, async () => {
        const seen = ((await worker.client.get(ctx.table, r!)) ?? []) as number[];
        const done = await transact(worker.client, async (tx) => {
          const list = ((await tx.get(ctx.table, a!, { forUpdate: true })) ?? []) as number[];
          await tx.put(ctx.table, a!, [...list, value[1]![2] as number]);
        });
        if (done.type === 'fail') return done;
        return { type: 'ok', value: [['r', r!, seen], value[1]!] };
      });
    },
  };
}

/** Writes acknowledged without being written. */
function lyingRegister(): Workload {
  const inner = registerWorkload();
  let next = 1_000_000;
  return {
    ...inner,
    operation(ctx, worker) {
      if (!worker.random.chance(0.3)) return inner.operation(ctx, worker);
      const value: RegisterValue = next++;
      return perform<RegisterOp>(ctx, worker, { f: 'write', key: 'r0', value }, async () => ({ type: 'ok', value }));
    },
  };
}

describe('simulated runs', () => {
  it('a seed replays the same history and the same trace; another seed does not', async () => {
    const faulty = { ...QUICK, durationMs: 1_500, faults: parseFaults('all') };
    const first = await simRun({ seed: 11, workload: 'list-append', ...faulty });
    const again = await simRun({ seed: 11, workload: 'list-append', ...faulty });
    const other = await simRun({ seed: 12, workload: 'list-append', ...QUICK, durationMs: 1_000 });
    assert.equal(again.historyHash, first.historyHash);
    assert.equal(again.traceHash, first.traceHash);
    assert.equal(again.history.length, first.history.length);
    assert.ok(first.faultLog.length > 0, 'faults were injected');
    assert.notEqual(other.historyHash, first.historyHash);
    assert.notEqual(other.traceHash, first.traceHash);
    assert.ok(first.history.length > 50, `a history of ${first.history.length} operations`);
  });

  it('the bank checker catches the torn sums of reads outside one snapshot', async () => {
    const result = await simRun({ seed: 1, workload: tornBank(), ...QUICK });
    assert.equal(result.failure?.class, 'checker', result.failure?.message);
    assert.ok(result.check?.anomalies.some((a) => a.startsWith('wrong-total')));
  });

  it('the list-append checker finds cycles when reads are not in the appending transaction', async () => {
    const result = await simRun({ seed: 1, workload: splitListAppend(), ...QUICK });
    assert.equal(result.failure?.class, 'checker', result.failure?.message);
    const kinds = new Set(result.check?.anomalies.map((a) => a.split(':')[0]));
    assert.ok(kinds.has('G-single') || kinds.has('G2'), [...kinds].join(', '));
  });

  it('the register checker rejects acknowledged writes that never happened', async () => {
    const result = await simRun({ seed: 1, workload: lyingRegister(), ...QUICK });
    assert.equal(result.failure?.class, 'checker', result.failure?.message);
    assert.match(result.check?.anomalies[0] ?? '', /key r0: not linearizable/);
  });
});
