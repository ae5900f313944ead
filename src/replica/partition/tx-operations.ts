/**
 * The RW operations of each tx on one partition primary: which opSeqs were executed (rule 7), the responses of the
 * most recent ones (to answer a duplicate without executing it twice), the operations in flight (commit and cleanup
 * wait for them, rule 6), and whether cleanup closed the tx here.
 *
 * Model: the operations of one tx on one partition run one at a time, in arrival order (a chain of promises). That
 * keeps one tx from waiting twice for one lock and makes "the tx's in-flight operations" a single tail to await.
 * Admission is synchronous: an opSeq above the highest seen is recorded at once, before any await, so a duplicate
 * arriving a moment later finds it (and shares its response).
 *
 * Invariants: `highestOpSeq` only rises; a closed record never runs a new operation; a closed record is kept until
 * the tx's deadline has passed (after which every RW request of the tx is rejected by the deadline check, rule 15),
 * so a late duplicate cannot re-acquire locks nobody would release. At most `recordsMax` records exist (when full, the
 * oldest closed record is evicted early); at most `resultsPerTxMax` responses are kept per tx.
 */
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';

interface TxRecord<R> {
  readonly txId: TxId;
  readonly deadline: HybridTimestamp;
  highestOpSeq: number;
  /** Responses of the most recent operations by opSeq, in insertion (= opSeq) order. */
  readonly results: Map<number, Promise<R>>;
  /** Settles when every operation admitted so far has finished. */
  tail: Promise<void>;
  inFlight: number;
  closed: boolean;
}

export interface TxOperationsOptions {
  readonly recordsMax?: number;
  readonly resultsPerTxMax?: number;
}

export class TxOperations<R> {
  readonly recordsMax: number;
  readonly resultsPerTxMax: number;
  private readonly records = new Map<TxId, TxRecord<R>>();
  /** Closed records in closing order, purged once their deadline passed. */
  private closedQueue: TxId[] = [];

  constructor(options: TxOperationsOptions = {}) {
    this.recordsMax = options.recordsMax ?? LIMITS.replicaTxRecordsMax;
    this.resultsPerTxMax = options.resultsPerTxMax ?? LIMITS.replicaOpResultsPerTxMax;
  }

  get size(): number {
    return this.records.size;
  }

  /** Operations of `txId` admitted and not finished yet. */
  inFlight(txId: TxId): number {
    return this.records.get(txId)?.inFlight ?? 0;
  }

  isClosed(txId: TxId): boolean {
    return this.records.get(txId)?.closed === true;
  }

  /**
   * Runs `operation` as `opSeq` of `txId` after the tx's earlier operations here. A duplicate of a kept opSeq gets
   * that operation's response; an older opSeq whose response is gone fails TX_OP_STALE; a closed tx fails
   * TX_ALREADY_FINISHED; a full table fails OVERLOADED.
   */
  execute(txId: TxId, opSeq: number, deadline: HybridTimestamp, operation: () => Promise<R>): Promise<R> {
    let record = this.records.get(txId);
    const kept = record?.results.get(opSeq);
    if (kept !== undefined) return kept;
    if (record?.closed === true) return Promise.reject(finished(txId));
    if (record !== undefined && opSeq <= record.highestOpSeq) {
      return Promise.reject(
        new BasaltError('TX_OP_STALE', `operation ${opSeq} of ${txId} is older than ${record.highestOpSeq}`, {
          txId,
          opSeq,
          highestOpSeq: record.highestOpSeq,
        }),
      );
    }
    if (record === undefined) {
      if (this.records.size >= this.recordsMax && !this.evictClosed()) {
        return Promise.reject(new BasaltError('OVERLOADED', 'too many tx records on this partition primary'));
      }
      record = newRecord<R>(txId, deadline);
      this.records.set(txId, record);
    }
    return this.chain(record, opSeq, operation);
  }

  private chain(record: TxRecord<R>, opSeq: number, operation: () => Promise<R>): Promise<R> {
    record.highestOpSeq = opSeq;
    record.inFlight += 1;
    const run = async (): Promise<R> => {
      if (record.closed) throw finished(record.txId);
      return operation();
    };
    const result = record.tail.then(run);
    record.tail = result.then(
      () => this.done(record),
      () => this.done(record),
    );
    record.results.set(opSeq, result);
    if (record.results.size > this.resultsPerTxMax) {
      const [oldest] = record.results.keys();
      if (oldest !== undefined) record.results.delete(oldest);
    }
    // The caller awaits `result`; the copies kept for duplicates must not count as unhandled.
    result.catch(() => {});
    return result;
  }

  private done(record: TxRecord<R>): void {
    record.inFlight -= 1;
  }

  /** Settles once every operation of `txId` admitted so far has finished (whatever their outcome). */
  whenIdle(txId: TxId): Promise<void> {
    return this.records.get(txId)?.tail ?? Promise.resolve();
  }

  /**
   * Cleanup: no new operation of `txId` runs here any more (queued ones fail TX_ALREADY_FINISHED when their turn
   * comes). The record is kept until the tx's deadline passed; `now` purges the records whose deadline has.
   */
  close(txId: TxId, deadline: HybridTimestamp, now: HybridTimestamp): void {
    this.purge(now);
    let record = this.records.get(txId);
    if (record === undefined) {
      // A record for a tx never seen here keeps a late first request out; skip it when the table is full (the
      // deadline check still stops requests after D).
      if (this.records.size >= this.recordsMax && !this.evictClosed()) return;
      record = newRecord<R>(txId, deadline);
      this.records.set(txId, record);
    }
    if (record.closed) return;
    record.closed = true;
    this.closedQueue.push(txId);
  }

  /**
   * Under pressure (the table is full) the oldest closed record without operations in flight goes before its
   * deadline: duplicates of a tx closed long ago are then caught only by the map and deadline checks. True if one
   * was removed.
   */
  private evictClosed(): boolean {
    const at = this.closedQueue.findIndex((txId) => (this.records.get(txId)?.inFlight ?? 0) === 0);
    if (at < 0) return false;
    const [txId] = this.closedQueue.splice(at, 1);
    return txId !== undefined && this.records.delete(txId);
  }

  /**
   * Forgets closed records whose deadline is ≤ now, oldest closed first, stopping at the first one still needed
   * (a later one may wait a little longer than its own deadline; the bound is recordsMax).
   */
  purge(now: HybridTimestamp): number {
    let removed = 0;
    let head = 0;
    while (head < this.closedQueue.length) {
      const txId = this.closedQueue[head]!;
      const record = this.records.get(txId);
      if (record !== undefined && record.deadline > now) break;
      if (record !== undefined && record.inFlight === 0) {
        this.records.delete(txId);
        removed += 1;
      } else if (record !== undefined) {
        break;
      }
      head += 1;
    }
    if (head > 0) this.closedQueue = this.closedQueue.slice(head);
    return removed;
  }
}

function newRecord<R>(txId: TxId, deadline: HybridTimestamp): TxRecord<R> {
  return { txId, deadline, highestOpSeq: 0, results: new Map(), tail: Promise.resolve(), inFlight: 0, closed: false };
}

function finished(txId: TxId): BasaltError {
  return new BasaltError('TX_ALREADY_FINISHED', `tx ${txId} is finished on this partition`, { txId });
}
