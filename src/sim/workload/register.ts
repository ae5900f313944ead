/**
 * The register workload: a few keys, each a register. Workers read with the implicit `client.get` (on the primary at
 * its `now`: the read DESIGN §2b rule 19 promises is linearizable while clocks stay within maxClockSkew), write with
 * an implicit one-phase `client.put` or inside an RW transaction, and compare-and-set in an RW transaction (read for
 * update, compare, write; a mismatch fails). Every written value is unique. Checked per key for linearizability.
 */
import type { Operation, RegisterValue } from '../check/history.js';
import { checkRegister } from '../check/register.js';
import { Abstain, type BodyResult, perform, transact, type Worker, type Workload } from './workload.js';

const KEYS = ['r0', 'r1', 'r2'];

type RegisterOp = Extract<Operation, { f: 'read' | 'write' | 'cas' }>;

export function registerWorkload(): Workload {
  let lastValue = 0;
  /** The value a worker last saw or wrote per key: what its next cas expects. */
  const seen = new Map<Worker, Map<string, RegisterValue>>();
  const seenBy = (worker: Worker): Map<string, RegisterValue> => {
    let map = seen.get(worker);
    if (map === undefined) {
      map = new Map();
      seen.set(worker, map);
    }
    return map;
  };
  return {
    name: 'register',

    async setup() {},

    operation(ctx, worker) {
      const key = worker.random.pick(KEYS);
      const known = seenBy(worker);
      const roll = worker.random.next();
      if (roll < 0.4) {
        return perform<RegisterOp>(ctx, worker, { f: 'read', key, value: null }, async () => {
          const value = ((await worker.client.get(ctx.table, key)) ?? null) as RegisterValue;
          known.set(key, value);
          return { type: 'ok', value };
        });
      }
      const value = ++lastValue;
      if (roll < 0.7) {
        const implicit = worker.random.chance(0.5);
        return perform<RegisterOp>(ctx, worker, { f: 'write', key, value }, async (): Promise<BodyResult<number>> => {
          if (implicit) await worker.client.put(ctx.table, key, value);
          else await transact(worker.client, (tx) => tx.put(ctx.table, key, value));
          known.set(key, value);
          return { type: 'ok', value };
        });
      }
      const expected = known.get(key) ?? null;
      const cas = [expected, value] as const;
      return perform<RegisterOp>(ctx, worker, { f: 'cas', key, value: cas }, () =>
        transact(worker.client, async (tx) => {
          const current = ((await tx.get(ctx.table, key, { forUpdate: true })) ?? null) as RegisterValue;
          known.set(key, current);
          if (current !== expected) throw new Abstain('mismatch');
          await tx.put(ctx.table, key, value);
          known.set(key, value);
          return cas;
        }),
      );
    },

    async final() {},

    check(history) {
      const result = checkRegister(history);
      const ops = result.keys.reduce((s, k) => s + k.ops, 0);
      return {
        valid: result.valid === true,
        summary: `register: ${result.keys.length} keys, ${ops} ops searched: ${result.message}`,
        anomalies: result.valid === true ? [] : [result.message],
      };
    },
  };
}
