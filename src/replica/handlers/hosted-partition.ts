/**
 * What one node keeps per hosted partition for the request handlers: the `PartitionReplica` (lease, proposals, state
 * machine), the partition's lock manager (locks live only on the primary, in memory), the per-tx operation records,
 * read views of the partition's MVCC and tx state storage, and waiters for an RO read's readTs to become readable.
 *
 * Shared helpers of the handlers live here too: acting as primary (rule 1: `now` is read after the messenger absorbed
 * the envelope timestamp; PRIMARY_MISS carries the holder hint), the lease info every RW response carries, and lock
 * acquisition under wait-die with a bounded wait.
 *
 * Readability (rules 9, 11, 19): a readTs is readable here once applied safe time covers it, or, while this replica
 * acts as primary, once its readable safe time (now, or just below its smallest proposal in flight) covers it.
 * Waiters are re-checked after every apply; each has a timeout on the injected timers.
 */
import { assert } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { sleep, type TimerHandle, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import { formatTimestamp, physicalMs } from '../../hlc/timestamp.js';
import type { MvPartitionStorage } from '../../storage/mv-partition-storage.js';
import type { StorageEngine } from '../../storage/storage-engine.js';
import type { TxStateStorage } from '../../storage/tx-state-storage.js';
import { type LockDenial, LockManager, type LockWaitHandle, lockDenialError } from '../../tx/lock-manager.js';
import type { LockStep } from '../../tx/lock-modes.js';
import type { LeaseInfo, ReadWriteResponse } from '../../tx/messages.js';
import { txDeadline } from '../../tx/tx-id.js';
import type { TxStateMap } from '../../tx/tx-state-map.js';
import { type Lease, type LeaseToken, sameToken, tokenOf } from '../lease.js';
import type { PartitionReplica } from '../partition-replica.js';
import type { PrimaryCheck } from '../primary.js';
import { type CounterSink, NO_COUNTERS } from '../resolution/ports.js';
import { PipelinedWrites } from './pipelined-writes.js';
import { TxOperations } from './tx-operations.js';

export interface HostedPartitionOptions {
  readonly replica: PartitionReplica;
  /** The node's storage engine (the partition's storages are read from it; only the state machine writes). */
  readonly engine: StorageEngine;
  readonly txStateMap: TxStateMap;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txTimeoutMs?: number;
  readonly lockWaitTimeoutMs?: number;
  readonly readWaitMs?: number;
  readonly readWaitersMax?: number;
  readonly leaseStartWaitMs?: number;
  readonly locks?: LockManager;
  readonly counters?: CounterSink;
}

/** Names of the node counters bumped here. */
export const HOSTED_PARTITION_COUNTERS = {
  /** Lock requests that died under wait-die (blocked by an older tx). */
  waitDieDeaths: 'locks.waitDieDeaths',
  /** Txs that held or awaited locks here when the lease changed under them (their locks were dropped). */
  leaseChangeTxs: 'lease.txsLosingLocks',
} as const;

export type UnprotectedIntentListener = (txId: TxId, commitPartitionId: PartitionId) => void;

interface ReadWaiter {
  readonly readTs: HybridTimestamp;
  readonly resolve: () => void;
  readonly reject: (error: BasaltError) => void;
  timer: TimerHandle | undefined;
}

export class HostedPartition {
  readonly partitionId: PartitionId;
  readonly replica: PartitionReplica;
  readonly locks: LockManager;
  readonly operations = new TxOperations<ReadWriteResponse>();
  /** Writes answered before they applied, until the coordinator confirms them (pipelined-writes.ts). */
  readonly pipeline: PipelinedWrites;
  readonly mv: MvPartitionStorage;
  readonly txState: TxStateStorage;
  readonly txStateMap: TxStateMap;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txTimeoutMs: number;
  readonly lockWaitTimeoutMs: number;
  readonly readWaitMs: number;
  readonly leaseStartWaitMs: number;
  private readonly readWaitersMax: number;
  private readonly readWaiters = new Set<ReadWaiter>();
  /** Txs that asked this lock table for a lock since the lease last changed (to drop their locks at the change). */
  private readonly lockingTxs = new Set<TxId>();
  /** The applied lease the lock table belongs to. */
  private lockTableLease: LeaseToken | undefined;
  private readonly intentListeners = new Set<UnprotectedIntentListener>();
  private readonly heldIntentListeners = new Set<(txId: TxId) => void>();
  private readonly unsubscribe: () => void;
  private readonly counters: CounterSink;
  private stopped = false;

  constructor(options: HostedPartitionOptions) {
    this.replica = options.replica;
    this.partitionId = options.replica.partitionId;
    this.pipeline = new PipelinedWrites(this.partitionId);
    this.locks = options.locks ?? new LockManager();
    this.counters = options.counters ?? NO_COUNTERS;
    this.mv = options.engine.mvPartition(this.partitionId);
    this.txState = options.engine.txStatePartition(this.partitionId);
    this.txStateMap = options.txStateMap;
    this.clock = options.clock;
    this.timers = options.timers;
    this.txTimeoutMs = options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault;
    this.lockWaitTimeoutMs = options.lockWaitTimeoutMs ?? LIMITS.replicaLockWaitTimeoutMsDefault;
    this.readWaitMs = options.readWaitMs ?? LIMITS.replicaReadWaitMsDefault;
    this.readWaitersMax = options.readWaitersMax ?? LIMITS.safeTimeWaitersMax;
    this.leaseStartWaitMs = options.leaseStartWaitMs ?? LIMITS.replicaLeaseStartWaitMsMax;
    this.lockTableLease = this.currentToken();
    this.unsubscribe = this.replica.stateMachine.onApplied(() => {
      this.checkLockTableLease();
      this.wakeReaders();
    });
  }

  /** The tx's hard deadline D (rule 15). */
  deadlineOf(txId: TxId): HybridTimestamp {
    return txDeadline(txId, this.txTimeoutMs);
  }

  // ---------------------------------------------------------------------------------------- acting as primary

  /** Rules 1, 19: the lease this replica acts under at `now` (matching `token` if given), else PRIMARY_MISS. */
  actingLease(now: HybridTimestamp, token?: LeaseToken): Lease {
    const check = this.replica.checkPrimary(now, token);
    if (check.kind !== 'ok') throw this.primaryMiss(check);
    return check.lease;
  }

  /**
   * `actingLease` for a request that takes locks: a holder handing its lease over grants no new locks (rule 5), so it
   * answers PRIMARY_MISS `handing-over` (retryable: the next lease starts at this one's expiration).
   */
  lockingLease(now: HybridTimestamp, token?: LeaseToken): Lease {
    const lease = this.actingLease(now, token);
    if (this.replica.isHandingOver) throw primaryMissError(this.partitionId, 'handing-over', lease);
    return lease;
  }

  /**
   * Rule 1 lets a holder whose applied lease has not started yet wait for its start rather than refuse: when that is
   * the only obstacle and the start is at most `leaseStartWaitMs` away, resolves with `now` read after the wait;
   * otherwise at once with `now` (the caller's primacy check then answers).
   */
  async untilLeaseStart(now: HybridTimestamp, token?: LeaseToken): Promise<HybridTimestamp> {
    const check = this.replica.checkPrimary(now, token);
    if (check.kind === 'ok' || check.reason !== 'not-started' || check.start === undefined) return now;
    const waitMs = physicalMs(check.start) - physicalMs(now) + 1;
    if (waitMs > this.leaseStartWaitMs || this.stopped) return now;
    await sleep(this.timers, waitMs);
    return this.clock.now();
  }

  primaryMiss(check: Exclude<PrimaryCheck, { kind: 'ok' }>): BasaltError {
    return primaryMissError(this.partitionId, check.reason, this.replica.stateMachine.currentLease());
  }

  /** What an RW response carries: the applied lease under `token` (renewals raise its expiration). */
  leaseInfo(token: LeaseToken, fallback: Lease): LeaseInfo {
    const current = this.replica.stateMachine.currentLease();
    const lease = current !== null && sameToken(tokenOf(current), token) ? current : fallback;
    return { token: tokenOf(lease), holderName: lease.holderName, expiration: lease.expiration };
  }

  // ---------------------------------------------------------------------------------------- locks

  /**
   * Acquires `steps` in order for `txId` under wait-die; each wait is bounded by lockWaitTimeoutMs (then
   * TX_LOCK_CONFLICT). Locks already granted stay held (released at cleanup, or by the caller for one-phase).
   */
  async acquire(txId: TxId, steps: readonly LockStep[]): Promise<void> {
    for (const step of steps) await this.acquireOne(txId, step);
  }

  private acquireOne(txId: TxId, step: LockStep): Promise<void> {
    this.noteLocking(txId);
    return new Promise((resolve, reject) => {
      let timer: TimerHandle | undefined;
      const settle = (error?: BasaltError): void => {
        if (timer !== undefined) this.timers.clearTimer(timer);
        if (error === undefined) resolve();
        else reject(error);
      };
      const result = this.locks.acquire(txId, step.key, step.mode, {
        onGranted: () => settle(),
        onDenied: (denial) => settle(this.denied(denial)),
      });
      if (result.kind === 'granted') return resolve();
      if (result.kind === 'denied') return reject(this.denied(result.denial));
      const handle: LockWaitHandle = result.handle;
      timer = this.timers.setTimer(() => {
        if (!handle.cancel()) return;
        reject(
          new BasaltError('TX_LOCK_CONFLICT', `lock wait on ${step.key} timed out`, {
            txId,
            key: step.key,
            mode: step.mode,
            reason: 'timeout',
          }),
        );
      }, this.lockWaitTimeoutMs);
    });
  }

  private denied(denial: LockDenial): BasaltError {
    if (denial.reason === 'wait-die') this.counters.add(HOSTED_PARTITION_COUNTERS.waitDieDeaths);
    return lockDenialError(denial);
  }

  /**
   * Locks live on the primary only, for one lease: when the applied lease changes (a new lease, whoever holds it),
   * every lock and lock waiter of the previous one is dropped. Otherwise a tx whose cleanup reached the new holder
   * while this replica was not primary would keep its locks here, and block everyone once this replica holds a lease
   * again. (An extension keeps the token, and the locks.)
   */
  private checkLockTableLease(): void {
    const token = this.currentToken();
    const same =
      token === undefined || this.lockTableLease === undefined
        ? token === this.lockTableLease
        : sameToken(token, this.lockTableLease);
    if (same) return;
    this.lockTableLease = token;
    let losing = 0;
    for (const txId of this.lockingTxs) {
      if (this.locks.locksOf(txId).length > 0 || this.locks.waitsOf(txId).length > 0) losing++;
    }
    if (losing > 0) this.counters.add(HOSTED_PARTITION_COUNTERS.leaseChangeTxs, losing);
    // Waiters first: a release would grant them a lock of the dropped table.
    for (const txId of this.lockingTxs) this.locks.failWaiters(txId);
    for (const txId of this.lockingTxs) this.locks.releaseAll(txId);
    this.lockingTxs.clear();
  }

  private currentToken(): LeaseToken | undefined {
    const lease = this.replica.stateMachine.currentLease();
    return lease === null ? undefined : tokenOf(lease);
  }

  /** Remembers a locking tx; past the bound, forgets those that hold and await nothing any more. */
  private noteLocking(txId: TxId): void {
    if (this.lockingTxs.size >= LIMITS.replicaTxRecordsMax && !this.lockingTxs.has(txId)) {
      for (const t of this.lockingTxs) {
        if (this.locks.locksOf(t).length === 0 && this.locks.waitsOf(t).length === 0) this.lockingTxs.delete(t);
      }
    }
    this.lockingTxs.add(txId);
  }

  /**
   * Observers of foreign write intents met without a lock (their writer lost its locks with a primary change): such
   * an intent blocks every RW request on its row until its tx is cleaned up here, so orphan recovery listens.
   */
  onUnprotectedIntent(listener: UnprotectedIntentListener): () => void {
    this.intentListeners.add(listener);
    return () => this.intentListeners.delete(listener);
  }

  /** Called by the RW handler before it refuses a request on an unprotected foreign intent. */
  reportUnprotectedIntent(txId: TxId, commitPartitionId: PartitionId): void {
    for (const listener of this.intentListeners) listener(txId, commitPartitionId);
  }

  /**
   * Observers of a tx whose intent here was asked about on the primary-replica path (its commit partition has no
   * record at or below its vacuum horizon): the in-line cleanup settles such a tx, so the intent does not wait for
   * a writer to meet it.
   */
  onHeldIntentQueried(listener: (txId: TxId) => void): () => void {
    this.heldIntentListeners.add(listener);
    return () => this.heldIntentListeners.delete(listener);
  }

  reportHeldIntent(txId: TxId): void {
    for (const listener of this.heldIntentListeners) listener(txId);
  }

  // ---------------------------------------------------------------------------------------- readability

  /** True if a read at `readTs` sees everything that will ever be visible at it (see the module header). */
  readableAt(readTs: HybridTimestamp): boolean {
    const sm = this.replica.stateMachine;
    if (sm.safeTime.current() >= readTs) return true;
    const now = this.clock.current();
    if (this.replica.checkPrimary(now).kind !== 'ok') return false;
    return this.replica.readableSafeTime(now) >= readTs;
  }

  /** Resolves once `readTs` is readable here; TIMEOUT after `timeoutMs`, OVERLOADED when too many wait. */
  waitReadable(readTs: HybridTimestamp, timeoutMs: number = this.readWaitMs): Promise<void> {
    if (this.readableAt(readTs)) return Promise.resolve();
    if (this.stopped) return Promise.reject(stoppedError(this.partitionId));
    if (this.readWaiters.size >= this.readWaitersMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many reads waiting for safe time'));
    }
    return new Promise((resolve, reject) => {
      const waiter: ReadWaiter = { readTs, resolve, reject, timer: undefined };
      this.readWaiters.add(waiter);
      waiter.timer = this.timers.setTimer(() => {
        if (!this.readWaiters.delete(waiter)) return;
        reject(
          new BasaltError('TIMEOUT', `safe time of ${this.partitionId} did not reach ${formatTimestamp(readTs)}`, {
            partitionId: this.partitionId,
            readTs: formatTimestamp(readTs),
            safeTime: formatTimestamp(this.replica.stateMachine.safeTime.current()),
            timeoutMs,
          }),
        );
      }, timeoutMs);
    });
  }

  get readWaiterCount(): number {
    return this.readWaiters.size;
  }

  private wakeReaders(): void {
    for (const waiter of [...this.readWaiters]) {
      if (!this.readableAt(waiter.readTs)) continue;
      this.readWaiters.delete(waiter);
      if (waiter.timer !== undefined) this.timers.clearTimer(waiter.timer);
      waiter.resolve();
    }
  }

  /** The replica stops being hosted: waiting reads fail NODE_UNAVAILABLE. (The replica object is stopped by its host.) */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.unsubscribe();
    this.pipeline.clear();
    for (const waiter of [...this.readWaiters]) {
      this.readWaiters.delete(waiter);
      if (waiter.timer !== undefined) this.timers.clearTimer(waiter.timer);
      waiter.reject(stoppedError(this.partitionId));
    }
  }
}

function stoppedError(partitionId: PartitionId): BasaltError {
  return new BasaltError('NODE_UNAVAILABLE', `replica of ${partitionId} stopped`, { partitionId });
}

/** PRIMARY_MISS with its typed hint (the partition, why, and the lease this replica knows: where to go next). */
export function primaryMissError(partitionId: PartitionId, reason: string, lease: Lease | null): BasaltError {
  const details: Record<string, unknown> = { partitionId, reason };
  if (lease !== null) details['holderName'] = lease.holderName;
  const holder =
    lease === null
      ? undefined
      : {
          name: lease.holderName,
          token: { holder: { nodeId: lease.holder.nodeId, incarnation: lease.holder.incarnation }, start: lease.start },
        };
  const hint = { kind: 'primary-miss', partitionId, reason, ...(holder !== undefined && { holder }) } as const;
  return new BasaltError('PRIMARY_MISS', `not the primary of ${partitionId} (${reason})`, details, { hint });
}

/** Registry of the partitions hosted on a node, as handlers look them up. */
export interface PartitionRegistry {
  get(partitionId: PartitionId): HostedPartition | undefined;
}

export function assertHosted(partition: HostedPartition | undefined, partitionId: PartitionId): HostedPartition {
  assert(partition === undefined || partition.partitionId === partitionId, 'registry maps a partition to itself');
  if (partition === undefined) {
    throw primaryMissError(partitionId, 'not-hosted', null);
  }
  return partition;
}
