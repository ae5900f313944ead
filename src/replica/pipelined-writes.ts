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
 * the apply, not with the answer), so the tx reads its own writes.
 *
 * Bounded: at most `txsMax` txs are tracked; past it a write is simply answered after its apply, as when not
 * pipelined. A tx's record goes when it is confirmed or cleaned up here, or when the replica stops.
 */
import { BasaltError } from '../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { MIN_TIMESTAMP, maxTimestamp } from '../hlc/timestamp.js';

export class PipelinedWrites {
  private readonly byTx = new Map<TxId, Promise<HybridTimestamp>[]>();

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
    if (writes === undefined) this.byTx.set(txId, [applied]);
    else writes.push(applied);
  }

  /** The largest effective timestamp of the tx's tracked writes once all applied; their first failure otherwise. */
  async confirm(txId: TxId): Promise<HybridTimestamp> {
    const writes = this.byTx.get(txId);
    if (writes === undefined) {
      throw new BasaltError('TX_ABORTED', `no pipelined write of ${txId} is known on ${this.partitionId} here`, {
        txId,
        partitionId: this.partitionId,
        reason: 'write-unconfirmed',
      });
    }
    const seen = writes.length;
    const results = await Promise.allSettled(writes);
    // A write tracked meanwhile (none is, once the coordinator waits for its operations first) stays for a next ask.
    if (this.byTx.get(txId) === writes && writes.length === seen) this.byTx.delete(txId);
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

  clear(): void {
    this.byTx.clear();
  }
}
