/**
 * Settling a parallel commit's committing record on its commit partition (DESIGN §4b "Fewer rounds per commit").
 *
 * The rule: a tx whose commit partition holds a committing record committed at the record's commitTs iff every write
 * the record names as in flight applied (an intent of the tx on each key). Its coordinator reports COMMITTED once it
 * saw the record stored and confirmed every such write itself (`settle: 'confirmed'` then replaces the record); any
 * other party that needs the outcome (the coordinator when a confirmation failed or got no answer, a recovery whose
 * coordinator is gone, a finish or abort meeting the record) comes here, where each in-flight partition's primary
 * is asked with a WriteCheckRequest (write-check.ts). That check is definitive: once its own proposal applied there,
 * a write that has not applied never will, so a missing write cannot land later and make a tx committed that was
 * decided aborted. The decision is stored by the same compare-and-set as every outcome (`settled`), so concurrent
 * settles, and a coordinator's confirmation racing one, store one outcome, and both compute the same one.
 *
 * Concurrent settles of one tx on this node share one run. A check that gets no answer fails the settle (retryable):
 * the record stays, and whoever asks next settles again.
 */
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Timers } from '../../env/timers.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import type { InflightWrites } from '../../storage/tx-state-storage.js';
import type { TxRequestFn } from '../../tx/core/messages.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import { outcomeOfRecord } from '../resolution/answers.js';
import { requestPrimary } from '../resolution/primary-requests.js';
import { type Decided, decideOutcome, type Settle } from './outcome-decision.js';

export interface CommittingSettlerOptions {
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  readonly timers: Timers;
  readonly counters?: CounterSink;
  readonly requestTimeoutMs?: number;
}

/** Names of the node counters bumped here. */
export const SETTLE_COUNTERS = {
  /** Committing records settled as COMMITTED by a check of their writes. */
  committed: 'committing.settledCommitted',
  /** Committing records settled as ABORTED (a write had not applied). */
  aborted: 'committing.settledAborted',
} as const;

export class CommittingSettler {
  private readonly running = new Map<TxId, Promise<Decided>>();
  private readonly counters: CounterSink;
  private readonly requestTimeoutMs: number;

  constructor(private readonly o: CommittingSettlerOptions) {
    this.counters = o.counters ?? NO_COUNTERS;
    this.requestTimeoutMs = o.requestTimeoutMs ?? LIMITS.resolutionRequestTimeoutMs;
  }

  /** The tx's outcome, deciding it from its in-flight writes when the record is still committing. */
  readonly settle: Settle = (p, txId) => {
    const running = this.running.get(txId);
    if (running !== undefined) return running;
    const run = this.run(p, txId).finally(() => this.running.delete(txId));
    this.running.set(txId, run);
    return run;
  };

  private async run(p: PartitionReplica, txId: TxId): Promise<Decided> {
    const staged = p.txState.committing(txId);
    if (staged === undefined) {
      const record = p.txState.get(txId);
      if (record === undefined)
        throw new BasaltError('INTERNAL', `tx ${txId} has neither a record nor a committing one`);
      return outcomeOfRecord(record);
    }
    const applied = await Promise.all(staged.inflight.map((w) => this.check(txId, w)));
    const commit = applied.every((a) => a);
    const decided = await decideOutcome(p, {
      txId,
      commit,
      commitTs: commit ? staged.commitTs : undefined,
      enlistedPartitions: staged.enlistedPartitions,
      settled: true,
    });
    if (decided !== 'vacuumed') {
      this.counters.add(decided.state === 'COMMITTED' ? SETTLE_COUNTERS.committed : SETTLE_COUNTERS.aborted);
    }
    return decided;
  }

  private async check(txId: TxId, w: InflightWrites): Promise<boolean> {
    const response = await requestPrimary(
      this.o,
      w.partitionId,
      { kind: 'WriteCheckRequest', partitionId: w.partitionId, txId, keys: w.keys },
      { timeoutMs: this.requestTimeoutMs, timers: this.o.timers },
    );
    return response.applied;
  }
}
