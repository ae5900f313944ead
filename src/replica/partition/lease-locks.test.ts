import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { isBasaltError } from '../../core/errors.js';
import { type HybridTimestamp, type NodeId, nodeId, type PartitionId, type TxId } from '../../core/ids.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import { Scheduler } from '../../sim/scheduler.js';
import { rowLockKey } from '../../tx/core/lock-modes.js';
import { makeTxId } from '../../tx/core/tx-id.js';
import type { LeaseToken } from './lease.js';
import { LEASE_LOCK_COUNTERS, LeaseLockTable, LOCKING_TXS_SWEEP_MIN } from './lease-locks.js';

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

/** aged(1) is the oldest; a larger number began later. */
const aged = (age: number): TxId =>
  makeTxId({ beginTimestamp: hybridTimestamp(1_000 + age), nodeId: nodeId('n1'), counter: age });

function patientTable(): { locks: LeaseLockTable; scheduler: Scheduler; counts: Map<string, number> } {
  const scheduler = new Scheduler({ seed: 'lease-locks-patience' });
  const counts = new Map<string, number>();
  const counters: CounterSink = { add: (name, n = 1) => counts.set(name, (counts.get(name) ?? 0) + n) };
  const locks = new LeaseLockTable({
    timers: scheduler.timers('n1'),
    lockWaitTimeoutMs: 1_000,
    lockPatienceMs: 50,
    onePhaseLockPatienceMs: 400,
    counters,
    lease: token(1),
  });
  return { locks, scheduler, counts };
}

describe('LeaseLockTable: patient waits', () => {
  const K = rowLockKey(P, 'k');

  it('a younger request waits for an older holder and gets the lock when it releases within the patience', async () => {
    const { locks, scheduler, counts } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'X' }]);
    let granted = false;
    const young = locks.acquire(aged(2), [{ key: K, mode: 'X' }]).then(() => {
      granted = true;
    });
    await scheduler.run({ forMs: 40 });
    assert.equal(granted, false);
    locks.locks.releaseAll(aged(1));
    await young;
    assert.equal(locks.locks.heldMode(aged(2), K), 'X');
    assert.equal(counts.get(LEASE_LOCK_COUNTERS.patientWaits), 1);
    assert.equal(counts.get(LEASE_LOCK_COUNTERS.patientGrants), 1);
    assert.equal(counts.get(LEASE_LOCK_COUNTERS.waitDieDeaths), undefined);
  });

  it('past the patience it dies as wait-die says, naming the older tx, and leaves no waiter behind', async () => {
    const { locks, scheduler, counts } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'X' }]);
    const young = locks.acquire(aged(2), [{ key: K, mode: 'X' }]);
    const outcome = young.then(
      () => 'granted',
      (error: unknown) => error,
    );
    await scheduler.run({ forMs: 49 });
    assert.equal(locks.locks.waitsOf(aged(2)).length, 1, 'still waiting before the patience ends');
    await scheduler.run({ forMs: 2 });
    const error = await outcome;
    assert.ok(isBasaltError(error, 'TX_LOCK_CONFLICT'));
    assert.equal(error.details?.['reason'], 'wait-die');
    assert.equal(error.details?.['blocker'], aged(1));
    assert.equal(error.retryable, true);
    assert.equal(locks.locks.waitsOf(aged(2)).length, 0);
    assert.equal(counts.get(LEASE_LOCK_COUNTERS.waitDieDeaths), 1);
  });

  it("a one-phase write's request waits out its own, longer patience behind an older waiter, then gets the lock", async () => {
    const { locks, scheduler, counts } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'X' }]);
    // An older one-phase write queued ahead of both younger ones.
    const older = locks.acquire(aged(2), [{ key: K, mode: 'X' }], true);
    const plain = locks.acquire(aged(3), [{ key: K, mode: 'X' }]).then(
      () => 'granted',
      (error: unknown) => error,
    );
    let granted = false;
    const onePhase = locks.acquire(aged(4), [{ key: K, mode: 'X' }], true).then(() => {
      granted = true;
    });
    await scheduler.run({ forMs: 60 });
    assert.ok(isBasaltError(await plain, 'TX_LOCK_CONFLICT'), 'a plain request died at 50 ms');
    assert.equal(locks.locks.waitsOf(aged(4)).length, 1, 'the one-phase request still waits');
    await scheduler.run({ forMs: 200 });
    locks.locks.releaseAll(aged(1));
    await older;
    assert.equal(granted, false);
    locks.locks.releaseAll(aged(2));
    await onePhase;
    assert.equal(locks.locks.heldMode(aged(4), K), 'X');
    assert.equal(counts.get(LEASE_LOCK_COUNTERS.waitDieDeaths), 1);
  });

  it("past its own patience a one-phase write's request dies as wait-die says", async () => {
    const { locks, scheduler } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'X' }]);
    const outcome = locks.acquire(aged(2), [{ key: K, mode: 'X' }], true).then(
      () => 'granted',
      (error: unknown) => error,
    );
    await scheduler.run({ forMs: 399 });
    assert.equal(locks.locks.waitsOf(aged(2)).length, 1);
    await scheduler.run({ forMs: 2 });
    const error = await outcome;
    assert.ok(isBasaltError(error, 'TX_LOCK_CONFLICT'));
    assert.equal(error.details?.['reason'], 'wait-die');
  });

  it('a wait the older holder no longer blocks is not cut at the patience: it waits for the younger one', async () => {
    const { locks, scheduler } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'S' }]);
    await locks.acquire(aged(3), [{ key: K, mode: 'S' }]);
    let granted = false;
    const mid = locks.acquire(aged(2), [{ key: K, mode: 'X' }]).then(() => {
      granted = true;
    });
    await scheduler.run({ forMs: 10 });
    locks.locks.releaseAll(aged(1));
    await scheduler.run({ forMs: 500 });
    assert.equal(granted, false);
    assert.equal(locks.locks.waitsOf(aged(2)).length, 1, 'waits past the patience for the younger holder');
    locks.locks.releaseAll(aged(3));
    await mid;
    assert.equal(locks.locks.heldMode(aged(2), K), 'X');
  });

  it('a younger wait still ends at the lock wait timeout once nothing older blocks it', async () => {
    const { locks, scheduler } = patientTable();
    await locks.acquire(aged(1), [{ key: K, mode: 'S' }]);
    await locks.acquire(aged(3), [{ key: K, mode: 'S' }]);
    const outcome = locks.acquire(aged(2), [{ key: K, mode: 'X' }]).then(
      () => 'granted',
      (error: unknown) => error,
    );
    locks.locks.releaseAll(aged(1));
    await scheduler.run({ forMs: 1_001 });
    const error = await outcome;
    assert.ok(isBasaltError(error, 'TX_LOCK_CONFLICT'));
    assert.equal(error.details?.['reason'], 'timeout');
  });
});
