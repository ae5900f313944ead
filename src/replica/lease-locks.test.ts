import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HybridTimestamp, NodeId, PartitionId, TxId } from '../core/ids.js';
import { Scheduler } from '../sim/scheduler.js';
import { rowLockKey } from '../tx/core/lock-modes.js';
import type { LeaseToken } from './lease.js';
import { LeaseLockTable, LOCKING_TXS_SWEEP_MIN } from './lease-locks.js';
import { NO_COUNTERS } from './resolution/ports.js';

const P = 't1p0' as PartitionId;
const token = (start: number): LeaseToken => ({
  holder: { nodeId: 'node-a' as NodeId, incarnation: 'i1' },
  start: BigInt(start) as HybridTimestamp,
});
const tx = (i: number) => `tx-${String(i).padStart(8, '0')}` as TxId;

function table(): LeaseLockTable {
  const scheduler = new Scheduler({ seed: 'lease-locks-test' });
  return new LeaseLockTable({
    timers: scheduler.timers('n1'),
    lockWaitTimeoutMs: 1_000,
    counters: NO_COUNTERS,
    lease: token(1),
  });
}

describe('LeaseLockTable', () => {
  it('remembers only about twice the txs that still hold or await a lock, not every tx of the lease', async () => {
    const locks = table();
    const holders: TxId[] = [];
    for (let i = 0; i < 20 * LOCKING_TXS_SWEEP_MIN; i++) {
      await locks.acquire(tx(i), [{ key: rowLockKey(P, `k${i}`), mode: 'X' }]);
      // One tx in a hundred keeps its lock (still running); the others are cleaned up.
      if (i % 100 === 0) holders.push(tx(i));
      else locks.locks.releaseAll(tx(i));
      assert.ok(locks.lockingTxCount <= 2 * Math.max(LOCKING_TXS_SWEEP_MIN, 2 * holders.length) + 1);
    }
    // A lease change still drops the locks of every tx that holds one.
    locks.leaseApplied(token(2));
    for (const h of holders) assert.equal(locks.locks.locksOf(h).length, 0, `${h}'s locks dropped`);
    assert.equal(locks.lockingTxCount, 0);
  });
});
