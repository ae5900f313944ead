/**
 * The client-facing RW transaction (DESIGN §4): a thin object over the coordinator's tx record, and
 * `runTransaction`, which runs a function in a transaction and retries it when it fails with a *retryable* error
 * (lock conflict under wait-die, a primary change, a timeout, ...), each time in a fresh transaction after rolling the
 * failed attempt back. It never retries TX_OUTCOME_UNKNOWN or TX_MISMATCHING_OUTCOME (both not retryable): the
 * attempt may have committed, and running it again could apply it twice (rule 14).
 *
 * Arguments are checked before anything is sent: misuse throws INVALID_ARGUMENT (keys, values, limits in
 * src/core/limits.ts).
 */
import type { NodeId, PartitionId, TxId } from '../../core/ids.js';
import { sleep } from '../../env/timers.js';
import type { Value } from '../../storage/mv-partition-storage.js';
import type { DirectHandoff } from '../core/direct.js';
import type { KeyValue, PutOptions, ReadOptions, ScanRange, TxWrite } from '../core/user-input.js';
import type { CoordinatedTx } from './coordinated-tx.js';
import type { BeginTxOptions, CoordinatorScanOptions, TxCoordinator } from './coordinator.js';
import { commitOrRollBack, type RetryOptions, retryPolicy, withRetries } from './retry.js';

export class Transaction {
  readonly readOnly = false as const;

  constructor(
    private readonly coordinator: TxCoordinator,
    private readonly record: CoordinatedTx,
  ) {}

  get id(): TxId {
    return this.record.id;
  }

  /** `{ forUpdate: true }` locks the row exclusively for a later write of it (ReadOptions). */
  get(table: string, key: string, options?: ReadOptions): Promise<Value | undefined> {
    return this.coordinator.get(this.record, table, key, options);
  }

  getAll(table: string, keys: readonly string[], options?: ReadOptions): Promise<(Value | undefined)[]> {
    return this.coordinator.getAll(this.record, table, keys, options);
  }

  put(table: string, key: string, value: Value, options?: PutOptions): Promise<void> {
    return this.coordinator.put(this.record, table, key, value, options);
  }

  remove(table: string, key: string): Promise<void> {
    return this.coordinator.remove(this.record, table, key);
  }

  putAll(table: string, entries: readonly KeyValue[]): Promise<void> {
    return this.coordinator.putAll(this.record, table, entries);
  }

  scan(table: string, range: ScanRange, options?: CoordinatorScanOptions): Promise<KeyValue[]> {
    return this.coordinator.scan(this.record, table, range, options);
  }

  /** Where a client may send this tx's operations straight to primaries (tx/core/direct.ts), once known. */
  directInfo(): { readonly coordinatorId: NodeId; readonly commitPartitionId: PartitionId } | undefined {
    return this.coordinator.directInfo(this.record);
  }

  /** Takes over what a client learned from its direct operations (before the commit, rollback or an operation). */
  adoptDirect(handoff: DirectHandoff): void {
    this.coordinator.adoptDirect(this.record, handoff);
  }

  commit(): Promise<void> {
    return this.coordinator.commit(this.record);
  }

  /** Commits with writes buffered until now (a client that carries its writes with the commit). */
  commitWith(writes: readonly TxWrite[]): Promise<void> {
    return this.coordinator.commitWith(this.record, writes);
  }

  /** Rolls back; once the tx is finished (committed or not) it is a no-op, so it is safe in a `finally`. */
  rollback(): Promise<void> {
    return this.coordinator.rollback(this.record);
  }
}

/** Begins an RW transaction on `coordinator` (with its own timeout if `options.timeoutMs` is set). */
export function beginTransaction(coordinator: TxCoordinator, options: BeginTxOptions = {}): Transaction {
  return new Transaction(coordinator, coordinator.begin(options));
}

export interface RunTransactionOptions extends BeginTxOptions, RetryOptions {}

/**
 * Runs `fn` in a transaction and commits it; on a retryable failure (of `fn` or of the commit) rolls the attempt back
 * and runs `fn` again in a new transaction (retry.ts). Resolves with `fn`'s result.
 */
export function runTransaction<T>(
  coordinator: TxCoordinator,
  fn: (tx: Transaction) => Promise<T>,
  options: RunTransactionOptions = {},
): Promise<T> {
  // Each retry keeps the age of the attempt before it (BeginTxOptions.retryOf).
  let previous = options.retryOf;
  return withRetries(
    retryPolicy(options, coordinator.retryJitter),
    (delayMs) => sleep(coordinator.timers, delayMs),
    () => {
      const tx = beginTransaction(
        coordinator,
        readWriteBeginOptions({ timeoutMs: options.timeoutMs, retryOf: previous }),
      );
      previous = tx.id;
      return commitOrRollBack(tx, fn);
    },
  );
}

/** Only the begin options of a read-write tx (a caller's options may hold retry or read-only ones), those set. */
export function readWriteBeginOptions(options: BeginTxOptions): BeginTxOptions {
  return {
    ...(options.timeoutMs !== undefined && { timeoutMs: options.timeoutMs }),
    ...(options.retryOf !== undefined && { retryOf: options.retryOf }),
  };
}
