/**
 * Pipelined writes on one partition primary (DESIGN §2 "Writes", rules 4, 6 and 7). A write request marked
 * `pipelined` is answered as soon as its locks are held, its lease checked and its command proposed; what it applied
 * as is kept here, per tx, until the coordinator asks with a WriteConfirmRequest before it takes commitTs:
 * - the answer waits until every tracked write of the tx here has its apply result;
 * - all UPDATED: the largest effective timestamp, which the coordinator's clock absorbs (so commitTs exceeds it);
 * - any other result (applied as a no-op under a stale lease, a lost lock that could not be resolved, a proposal
 *   abandoned by a stopping replica): that write's error, and the coordinator makes the tx abort-only;
 * - nothing tracked for the tx (this primary restarted or another replica became primary since): TX_ABORTED, never
 *   a confirmation without evidence.
 * Later operations of the tx on this partition still run after the write applied (the tx's operation chain ends with
 * the apply, not with the answer), so the tx reads its own writes, or fails: once a write answered early failed,
 * its tx is marked failed here (`fail`, before that operation's failure reaches the chain) and every later operation
 * of the tx here fails TX_ABORTED (`failedError`), since it could not see that write and must not read what the
 * write would have replaced (the user already heard "written"). CockroachDB proves a read's in-flight writes before
 * it; here the chain already waits for their applies, so only a failed one needs an answer.
 *
 * Records belong to one applied lease, as locks do (lease-locks.ts): when the lease changes, every record goes
 * (`clear`), and a confirmation waiting meanwhile fails TX_ABORTED at once. Otherwise a tx cleaned up at the new
 * primary would stay here for good, the partition could never rest on this node, and enough of them would stop all
 * pipelining here. Its later requests carry the old token, which this replica refuses (PRIMARY_MISS).
 *
 * Bounded: at most `txsMax` txs are tracked; past it a write is simply answered after its apply, as when not
 * pipelined. A tx's record goes when it is confirmed or cleaned up here, when the lease changes, or when the replica
 * stops.
 */
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { MIN_TIMESTAMP, maxTimestamp } from '../../hlc/timestamp.js';

/** The pipelined writes of one tx here. */
interface TxWrites {
  readonly applied: Promise<HybridTimestamp>[];
  /** The error of the first write that failed after its early answer (its tx's later operations here fail). */
  failure: BasaltError | undefined;
}

/** Why every record was dropped at once. */
export type PipelineClearReason = 'lease-changed' | 'stopped';

export class PipelinedWrites {
  private readonly byTx = new Map<TxId, TxWrites>();
  /** Confirmations waiting (for operations or applies): a clear answers each at once. */
  private readonly waiting = new Set<(reason: PipelineClearReason) => void>();

  constructor(
    private readonly partitionId: PartitionId,
    private readonly txsMax: number = LIMITS.replicaPipelinedTxsMax,
  ) {}

  get size(): number {
    return this.byTx.size;
  }

  /** Whether a write of `txId` may be answered before its apply (its tx is tracked already, or there is room). */
  admits(txId: TxId): boolean {
    return this.byTx.has(txId) || this.byTx.size < this.txsMax;
  }

  /** Keeps the apply result of one write of `txId` that was answered before it applied. */
  track(txId: TxId, applied: Promise<HybridTimestamp>): void {
    // The confirmation reads the outcome; an early failure must not count as unhandled before it does.
    applied.catch(() => {});
    const writes = this.byTx.get(txId);
    if (writes === undefined) this.byTx.set(txId, { applied: [applied], failure: undefined });
    else writes.applied.push(applied);
  }

  /**
   * A write of `txId` answered early failed: its later operations here fail (`failedError`). Nothing is recorded for
   * a tx no longer tracked (cleaned up, confirmed, or dropped with the lease, whose token its requests no longer match).
   */
  fail(txId: TxId, error: BasaltError): void {
    const writes = this.byTx.get(txId);
    if (writes !== undefined && writes.failure === undefined) writes.failure = error;
  }

  /** The error for a later operation of `txId` here once one of its writes answered early failed, else undefined. */
  failedError(txId: TxId): BasaltError | undefined {
    const failure = this.byTx.get(txId)?.failure;
    if (failure === undefined) return undefined;
    return new BasaltError(
      'TX_ABORTED',
      `a write of ${txId} on ${this.partitionId} answered before its apply failed: ${failure.toData().message}`,
      { txId, partitionId: this.partitionId, reason: 'pipelined-write-failed', code: failure.code },
      { cause: failure },
    );
  }

  /**
   * The largest effective timestamp of the tx's tracked writes once all applied; their first failure otherwise.
   * `before` (the tx's operations in flight here) is awaited first. A clear meanwhile answers TX_ABORTED at once.
   */
  async confirm(txId: TxId, before: Promise<void> = Promise.resolve()): Promise<HybridTimestamp> {
    await this.unlessCleared(txId, before);
    const writes = this.byTx.get(txId);
    if (writes === undefined) {
      throw new BasaltError('TX_ABORTED', `no pipelined write of ${txId} is known on ${this.partitionId} here`, {
        txId,
        partitionId: this.partitionId,
        reason: 'write-unconfirmed',
      });
    }
    const seen = writes.applied.length;
    const results = await this.unlessCleared(txId, Promise.allSettled(writes.applied));
    // A write tracked meanwhile (none is, once the coordinator waits for its operations first) stays for a next ask.
    if (this.byTx.get(txId) === writes && writes.applied.length === seen) this.byTx.delete(txId);
    let writeTs = MIN_TIMESTAMP;
    for (const result of results) {
      if (result.status === 'rejected') throw result.reason;
      writeTs = maxTimestamp(writeTs, result.value);
    }
    return writeTs;
  }

  /** The tx was cleaned up here: nothing of it is confirmed any more. */
  forget(txId: TxId): void {
    this.byTx.delete(txId);
  }

  /** Drops every record (the applied lease changed, or the replica stops); waiting confirmations fail at once. */
  clear(reason: PipelineClearReason): void {
    this.byTx.clear();
    const waiting = [...this.waiting];
    this.waiting.clear();
    for (const answer of waiting) answer(reason);
  }

  /** `promise`'s outcome, or TX_ABORTED as soon as the records are cleared first. */
  private unlessCleared<T>(txId: TxId, promise: Promise<T>): Promise<T> {
    return new Promise((resolve, reject) => {
      const answer = (reason: PipelineClearReason): void => reject(this.clearedError(txId, reason));
      this.waiting.add(answer);
      promise.then(
        (value) => {
          this.waiting.delete(answer);
          resolve(value);
        },
        (error: unknown) => {
          this.waiting.delete(answer);
          reject(error);
        },
      );
    });
  }

  private clearedError(txId: TxId, reason: PipelineClearReason): BasaltError {
    const why = reason === 'lease-changed' ? 'the lease changed' : 'the replica stopped';
    const message = `${why} before the pipelined writes of ${txId} on ${this.partitionId} were confirmed`;
    return new BasaltError('TX_ABORTED', message, { txId, partitionId: this.partitionId, reason });
  }
}
