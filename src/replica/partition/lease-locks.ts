/**
 * The lock table of one partition replica, scoped to one applied lease. Locks live on the primary only, in memory,
 * for one lease: when the applied lease changes (a new lease, whoever holds it), every lock and lock waiter of the
 * previous one is dropped. Otherwise a tx whose cleanup reached the new holder while this replica was not primary
 * would keep its locks here, and block everyone once this replica holds a lease again. An extension keeps the token,
 * and the locks.
 *
 * Acquisition runs under wait-die (lock-manager.ts) with patient requests: each wait is bounded by `lockWaitTimeoutMs`
 * on the injected timers, then fails TX_LOCK_CONFLICT; a wait for an older tx only by `lockPatienceMs`, then it fails
 * as a wait-die death (TX_LOCK_CONFLICT, reason wait-die, naming that tx), which ends any wait-for cycle it closed.
 * A one-phase write's requests have a patience of their own (`onePhaseLockPatienceMs`, longer): such a write holds
 * its locks for one Raft round and takes no other, so behind older writers of a hot key it waits its turn.
 * The txs that asked for a lock since the last lease change are remembered so that a change drops exactly theirs;
 * those that hold and await nothing any more are forgotten each time the set doubles, so it stays within about twice
 * the txs that hold or await a lock here.
 */
import type { CounterSink } from '../../core/counters.js';
import { BasaltError } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { type LockDenial, LockManager, type LockWaitHandle, lockDenialError } from '../../tx/core/lock-manager.js';
import type { LockStep } from '../../tx/core/lock-modes.js';
import { type LeaseToken, sameToken } from './lease.js';

/** Names of the node counters bumped here. */
export const LEASE_LOCK_COUNTERS = {
  /** Lock requests that died under wait-die (blocked by an older tx; a patient one once its patience ran out). */
  waitDieDeaths: 'locks.waitDieDeaths',
  /** Lock requests that waited patiently for an older tx, and those of them that were granted in the end. */
  patientWaits: 'locks.patientWaits',
  patientGrants: 'locks.patientGrants',
  /** Txs that held or awaited locks here when the lease changed under them (their locks were dropped). */
  leaseChangeTxs: 'lease.txsLosingLocks',
} as const;

/** The smallest size at which the remembered locking txs are swept. */
export const LOCKING_TXS_SWEEP_MIN = 1_024;

export interface LeaseLockTableOptions {
  readonly locks?: LockManager;
  readonly timers: Timers;
  readonly lockWaitTimeoutMs: number;
  /** How long a request blocked by an older tx waits for it (default LIMITS.replicaLockPatienceMsDefault). */
  readonly lockPatienceMs?: number;
  /** The same for a one-phase write's request (default LIMITS.replicaOnePhaseLockPatienceMsDefault). */
  readonly onePhaseLockPatienceMs?: number;
  readonly counters: CounterSink;
  /** The token of the lease applied when the table is created (undefined: none yet). */
  readonly lease: LeaseToken | undefined;
}

export class LeaseLockTable {
  readonly locks: LockManager;
  private readonly timers: Timers;
  private readonly lockWaitTimeoutMs: number;
  private readonly lockPatienceMs: number;
  private readonly onePhaseLockPatienceMs: number;
  private readonly counters: CounterSink;
  /** Txs that asked this lock table for a lock since the lease last changed (to drop their locks at the change). */
  private readonly lockingTxs = new Set<TxId>();
  /** The applied lease the lock table belongs to. */
  private lease: LeaseToken | undefined;
  /** `lockingTxs` is swept of txs that hold and await nothing when it reaches this size. */
  private sweepAt = LOCKING_TXS_SWEEP_MIN;

  constructor(options: LeaseLockTableOptions) {
    this.locks = options.locks ?? new LockManager();
    this.timers = options.timers;
    this.lockWaitTimeoutMs = options.lockWaitTimeoutMs;
    this.lockPatienceMs = Math.min(
      options.lockPatienceMs ?? LIMITS.replicaLockPatienceMsDefault,
      options.lockWaitTimeoutMs,
    );
    this.onePhaseLockPatienceMs = Math.min(
      options.onePhaseLockPatienceMs ?? LIMITS.replicaOnePhaseLockPatienceMsDefault,
      options.lockWaitTimeoutMs,
    );
    this.counters = options.counters;
    this.lease = options.lease;
  }

  /**
   * Acquires `steps` in order for `txId` under wait-die; each wait is bounded by lockWaitTimeoutMs (then
   * TX_LOCK_CONFLICT). Locks already granted stay held (released at cleanup, or by the caller for one-phase).
   */
  /** `onePhase`: the requests of a one-phase write, patient for `onePhaseLockPatienceMs`. */
  async acquire(txId: TxId, steps: readonly LockStep[], onePhase = false): Promise<void> {
    const patienceMs = onePhase ? this.onePhaseLockPatienceMs : this.lockPatienceMs;
    for (const step of steps) await this.acquireOne(txId, step, patienceMs);
  }

  /**
   * The applied lease is now `token` (undefined: none): a different lease drops the locks of the previous one. True
   * if it was a different lease (what else belongs to one lease goes too: pipelined-writes.ts).
   */
  leaseApplied(token: LeaseToken | undefined): boolean {
    const same = token === undefined || this.lease === undefined ? token === this.lease : sameToken(token, this.lease);
    if (same) return false;
    this.lease = token;
    let losing = 0;
    for (const txId of this.lockingTxs) {
      if (this.locks.locksOf(txId).length > 0 || this.locks.waitsOf(txId).length > 0) losing++;
    }
    if (losing > 0) this.counters.add(LEASE_LOCK_COUNTERS.leaseChangeTxs, losing);
    // Waiters first: a release would grant them a lock of the dropped table.
    for (const txId of this.lockingTxs) this.locks.failWaiters(txId);
    for (const txId of this.lockingTxs) this.locks.releaseAll(txId);
    this.lockingTxs.clear();
    return true;
  }

  private acquireOne(txId: TxId, step: LockStep, patienceMs: number): Promise<void> {
    this.noteLocking(txId);
    return new Promise((resolve, reject) => {
      let timer: TimerHandle | undefined;
      let patient = false;
      const settle = (error?: BasaltError): void => {
        if (timer !== undefined) this.timers.clearTimer(timer);
        if (error === undefined) {
          if (patient) this.counters.add(LEASE_LOCK_COUNTERS.patientGrants);
          resolve();
        } else reject(error);
      };
      const result = this.locks.acquire(
        txId,
        step.key,
        step.mode,
        { onGranted: () => settle(), onDenied: (denial) => settle(this.denied(denial)) },
        { patient: true },
      );
      if (result.kind === 'granted') return resolve();
      if (result.kind === 'denied') return reject(this.denied(result.denial));
      const handle: LockWaitHandle = result.handle;
      const timedOut = (): void => {
        if (!handle.cancel()) return;
        reject(
          new BasaltError('TX_LOCK_CONFLICT', `lock wait on ${step.key} timed out`, {
            txId,
            key: step.key,
            mode: step.mode,
            reason: 'timeout',
          }),
        );
      };
      if (result.olderBlocker === undefined) {
        timer = this.timers.setTimer(timedOut, this.lockWaitTimeoutMs);
        return;
      }
      patient = true;
      this.counters.add(LEASE_LOCK_COUNTERS.patientWaits);
      // A wait for an older tx ends with the patience; once no older tx blocks it (a waiter's blockers only go), it
      // waits out the rest of the timeout as wait-die lets it.
      timer = this.timers.setTimer(() => {
        const blocker = handle.olderBlocker();
        if (blocker === undefined) {
          timer = this.timers.setTimer(timedOut, this.lockWaitTimeoutMs - patienceMs);
          return;
        }
        if (!handle.cancel()) return;
        const denial: LockDenial = {
          txId,
          key: step.key,
          mode: step.mode,
          code: 'TX_LOCK_CONFLICT',
          reason: 'wait-die',
          blocker,
        };
        reject(this.denied(denial));
      }, patienceMs);
    });
  }

  private denied(denial: LockDenial): BasaltError {
    if (denial.reason === 'wait-die') this.counters.add(LEASE_LOCK_COUNTERS.waitDieDeaths);
    return lockDenialError(denial);
  }

  /**
   * Remembers a locking tx. Once the set doubled since its last sweep (at least LOCKING_TXS_SWEEP_MIN, at most the
   * named limit), forgets those that hold and await nothing any more: the set stays within about twice the txs that
   * hold or await a lock here, at a constant cost per lock request, instead of keeping every tx id of the lease.
   */
  private noteLocking(txId: TxId): void {
    if (this.lockingTxs.size >= this.sweepAt && !this.lockingTxs.has(txId)) {
      for (const t of this.lockingTxs) {
        if (this.locks.locksOf(t).length === 0 && this.locks.waitsOf(t).length === 0) this.lockingTxs.delete(t);
      }
      this.sweepAt = Math.min(LIMITS.replicaTxRecordsMax, Math.max(LOCKING_TXS_SWEEP_MIN, 2 * this.lockingTxs.size));
    }
    this.lockingTxs.add(txId);
  }

  /** Txs remembered as locking here (diagnostics and tests). */
  get lockingTxCount(): number {
    return this.lockingTxs.size;
  }
}
