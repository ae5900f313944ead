/**
 * In-line cleanup of a finished lock holder, on an enlisted primary (DESIGN §2 "Commit acknowledgement"; rules 11,
 * 14, 15; as CockroachDB's intent resolution). A finish is answered once its outcome is durable and the enlisted
 * partitions are cleaned up after it, so a request may meet the locks and intents of a tx whose `commit()` or
 * `rollback()` has already returned. Such a holder must not make it wait or die: when a lock request is blocked by a
 * holder (LockManager `onConflict`), the holder is *settled* here:
 *
 * 1. local: a final entry in this node's map is the outcome;
 * 2. coordinator: a holder coordinated on this very node and not final here is open (its own entry says so); a
 *    holder whose coordinator is reachable and not gone (rule 17) is asked with a TxStateCoordinatorRequest (one hop:
 *    the coordinator's entry goes final from the stored outcome before `commit()` returns, rule 14). A final answer
 *    is the outcome, PENDING means open; no state (it forgot the tx, or dropped it as unknowable) or no answer → 3;
 * 3. commit partition: a TxStateCommitPartitionRequest flagged `holder` goes to the holder's commit partition
 *    primary (its id from the map entry, else from one of the holder's intents here). One question per holder tx is
 *    in flight per node; a final answer serves everyone waiting on it, a non-final one only those who came after it
 *    was asked (an earlier answer may predate the holder's finish);
 * 4. a final outcome: the holder's cleanup of this partition runs here as its commit partition would send it
 *    (tx-cleanup.ts `cleanupPartition`: map final, intents switched through Raft, locks released), one run per
 *    partition and holder at a time, and the blocked request takes its lock again (a waiter is simply granted);
 * 5. "no record, at or below the vacuum horizon" while this primary still holds the holder's intent or lock: the
 *    holder never committed (a committed record is vacuumed only after cleanup completed on every enlisted
 *    partition, which removes both; and no finish at or below the horizon is ever applied), so it is cleaned up
 *    here as ABORTED.
 *
 * A reader's resolution triggers the same settle when its commit partition, finding no record at or below the
 * horizon, asks this primary about an intent it still holds (rule 16's primary-replica path): the intent is then
 * aborted without waiting for a writer to meet it.
 *
 * Anything else (PENDING, no answer, no commit partition known) leaves the wait-die decision as it stands; no outcome
 * is ever guessed. Bounded: at most `holderStateRequestsMax` holders asked about and settling at once (past it the
 * request waits or dies as wait-die says).
 */

import { assert } from '../../core/assert.js';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import type { NodeId, NodeIdentity, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import type { TxOutcome, TxRequestFn, TxStateCommitPartitionRequest } from '../../tx/core/messages.js';
import { outcomeOfEntry } from '../../tx/core/outcome.js';
import { nodeIdOf } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import type { PeerDirectory } from '../ports.js';
import { answerOf, isFinalAnswer, isTrueOutcome } from '../resolution/answers.js';
import { requestPrimary } from '../resolution/primary-requests.js';
import { cleanupPartition } from './partition-cleanup.js';

export interface InlineCleanupOptions {
  readonly self: NodeIdentity;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  readonly counters?: CounterSink;
  readonly onError?: (error: unknown) => void;
  readonly requestTimeoutMs?: number;
  readonly inFlightMax?: number;
}

/** What the holder's commit partition said. */
type HolderState =
  | { readonly kind: 'final'; readonly outcome: TxOutcome }
  /** No record at or below the vacuum horizon: no finish of the tx can ever be applied. */
  | { readonly kind: 'vacuumed' }
  | { readonly kind: 'open' };

interface Shared<T> {
  /** The conflict count when it started: it serves callers whose conflict came no later. */
  readonly startedAt: number;
  readonly promise: Promise<T>;
}

export const INLINE_CLEANUP_COUNTERS = {
  local: 'inlineCleanup.local',
  coordinator: 'inlineCleanup.coordinator',
  commitPartition: 'inlineCleanup.commitPartition',
  vacuumed: 'inlineCleanup.vacuumedAborts',
  asked: 'inlineCleanup.stateRequests',
} as const;

export class InlineCleanup {
  private readonly o: InlineCleanupOptions;
  private readonly counters: CounterSink;
  private readonly onError: (error: unknown) => void;
  private readonly requestTimeoutMs: number;
  private readonly inFlightMax: number;
  /** Counts conflicts (and settle calls): orders a caller against the shared work it may join. */
  private clock = 0;
  private readonly asking = new Map<TxId, Shared<HolderState>>();
  private readonly settling = new Map<string, Shared<boolean>>();

  constructor(options: InlineCleanupOptions) {
    this.o = options;
    this.counters = options.counters ?? NO_COUNTERS;
    this.onError = options.onError ?? (() => {});
    this.requestTimeoutMs = options.requestTimeoutMs ?? LIMITS.holderStateRequestTimeoutMs;
    this.inFlightMax = options.inFlightMax ?? LIMITS.holderStateRequestsMax;
  }

  /**
   * Settles every holder that blocks a lock request on `partition`, and every tx whose intent there a reader's
   * resolution asked about on the primary-replica path; returns the function that stops watching.
   */
  watch(partition: PartitionReplica): () => void {
    const settle = (txId: TxId): void => {
      this.settle(partition, txId).catch(this.onError);
    };
    const conflicts = partition.locks.onConflict(settle);
    const queried = partition.onHeldIntentQueried(settle);
    return () => {
      conflicts();
      queried();
    };
  }

  /** A point in the order of conflicts: settles started from now on serve a caller holding it. */
  mark(): number {
    return ++this.clock;
  }

  /**
   * Resolves true once `holder` is known final and its cleanup of `p` ran here (its locks and intents on `p` are
   * gone), false if it is not known final. Joins a settle of the same holder started at or after `since`.
   */
  settle(p: PartitionReplica, holder: TxId, since: number = this.mark()): Promise<boolean> {
    const key = `${p.partitionId}\u0000${holder}`;
    const running = this.settling.get(key);
    if (running !== undefined) {
      if (running.startedAt >= since) return running.promise;
      // It may have asked before the holder finished: a false from it does not hold for this caller.
      return running.promise.then((done) => done || this.settle(p, holder, since));
    }
    if (this.settling.size >= this.inFlightMax) return Promise.resolve(false);
    const promise = this.runSettle(p, holder, since).finally(() => this.settling.delete(key));
    this.settling.set(key, { startedAt: this.mark(), promise });
    assert(this.settling.size <= this.inFlightMax, 'settles in flight stay within their limit', this.settling.size);
    return promise;
  }

  private async runSettle(p: PartitionReplica, holder: TxId, since: number): Promise<boolean> {
    const outcome = await this.outcomeOf(p, holder, since);
    if (outcome === undefined) return false;
    // Rule 11: only a true final outcome (local, the commit partition's, or rule 15's abort) cleans a holder.
    assert(isTrueOutcome(outcome), 'a holder is cleaned with a true final outcome', holder);
    try {
      await cleanupPartition(p, {
        kind: 'TxCleanupRequest',
        txId: holder,
        partitions: [p.partitionId],
        unlockOnly: false,
        outcome,
      });
      return true;
    } catch (error) {
      // Not primary any more, or the switch failed: the request goes on as wait-die says; the driver cleans later.
      this.onError(error);
      return false;
    }
  }

  private async outcomeOf(p: PartitionReplica, holder: TxId, since: number): Promise<TxOutcome | undefined> {
    const entry = p.txStateMap.entry(holder);
    if (entry !== undefined && isFinal(entry.state)) {
      this.counters.add(INLINE_CLEANUP_COUNTERS.local);
      return outcomeOfEntry(entry);
    }
    const commitPartitionId = entry?.commitPartitionId ?? intentCommitPartition(p, holder);
    if (commitPartitionId === undefined) return undefined;
    const state = await this.ask(p, holder, commitPartitionId, since);
    if (state.kind === 'final') {
      this.counters.add(INLINE_CLEANUP_COUNTERS.commitPartition);
      return state.outcome;
    }
    // Rule 15: it never committed if this primary still holds what a completed cleanup would have removed.
    if (state.kind === 'vacuumed' && holdsHere(p, holder)) {
      this.counters.add(INLINE_CLEANUP_COUNTERS.vacuumed);
      return { state: 'ABORTED' };
    }
    return undefined;
  }

  /** The holder's state at its commit partition, sharing a request in flight as the module header says. */
  private ask(p: PartitionReplica, holder: TxId, commitPartitionId: PartitionId, since: number): Promise<HolderState> {
    const running = this.asking.get(holder);
    if (running !== undefined) {
      if (running.startedAt >= since) return running.promise;
      return running.promise.then((state) =>
        state.kind === 'open' ? this.ask(p, holder, commitPartitionId, since) : state,
      );
    }
    if (this.asking.size >= this.inFlightMax) return Promise.resolve({ kind: 'open' });
    const promise = this.askOnce(p, holder, commitPartitionId).finally(() => this.asking.delete(holder));
    this.asking.set(holder, { startedAt: this.mark(), promise });
    assert(
      this.asking.size <= this.inFlightMax,
      'holder questions in flight stay within their limit',
      this.asking.size,
    );
    return promise;
  }

  private async askOnce(p: PartitionReplica, holder: TxId, commitPartitionId: PartitionId): Promise<HolderState> {
    this.counters.add(INLINE_CLEANUP_COUNTERS.asked);
    const entry = p.txStateMap.entry(holder);
    const coordinatorId = entry?.coordinatorId ?? coordinatorOf(holder);
    if (coordinatorId !== undefined) {
      const state = await this.askCoordinator(p, holder, coordinatorId, entry !== undefined);
      if (state !== undefined) return state;
    }
    return this.askCommitPartition(p, holder, commitPartitionId, coordinatorId);
  }

  /** Step 2 of the module header; undefined when the commit partition must be asked. */
  private async askCoordinator(
    p: PartitionReplica,
    holder: TxId,
    coordinatorId: NodeId,
    known: boolean,
  ): Promise<HolderState | undefined> {
    // This node's own coordinator entry is here and not final (else the local step answered): the tx is open.
    if (coordinatorId === this.o.self.id) return known ? { kind: 'open' } : undefined;
    const name = this.o.peers.nameOf(coordinatorId);
    if (name === undefined || this.o.peers.isGone(coordinatorId)) return undefined;
    try {
      const response = await this.o.request(
        name,
        { kind: 'TxStateCoordinatorRequest', txId: holder, readTs: p.clock.now() },
        { timeoutMs: this.requestTimeoutMs },
      );
      const answer = answerOf(response);
      if (answer === null || answer.state === 'UNKNOWN') return undefined;
      this.counters.add(INLINE_CLEANUP_COUNTERS.coordinator);
      return isFinalAnswer(answer) ? { kind: 'final', outcome: answer } : { kind: 'open' };
    } catch {
      return undefined;
    }
  }

  private async askCommitPartition(
    p: PartitionReplica,
    holder: TxId,
    commitPartitionId: PartitionId,
    coordinatorId: NodeId | undefined,
  ): Promise<HolderState> {
    const body: TxStateCommitPartitionRequest = {
      kind: 'TxStateCommitPartitionRequest',
      txId: holder,
      commitPartitionId,
      readTs: p.clock.now(),
      ...(coordinatorId === undefined ? {} : { coordinatorId }),
      intentPartitionId: p.partitionId,
      key: intentKey(p, holder) ?? '',
      holder: true,
    };
    try {
      const response = await requestPrimary(this.o, commitPartitionId, body, {
        timeoutMs: this.requestTimeoutMs,
        attemptsMax: LIMITS.holderStateRequestAttemptsMax,
      });
      const answer = answerOf(response);
      if (answer !== null && isFinalAnswer(answer)) return { kind: 'final', outcome: answer };
      if (answer?.state === 'UNKNOWN' && response.vacuumed === true) return { kind: 'vacuumed' };
      return { kind: 'open' };
    } catch {
      // No answer is no outcome (rule 12): the request waits or dies as wait-die says.
      return { kind: 'open' };
    }
  }
}

/** The commit partition one of the holder's intents here names. */
function intentCommitPartition(p: PartitionReplica, holder: TxId): PartitionId | undefined {
  const [rowId] = p.mv.rowsWrittenBy(holder);
  if (rowId === undefined) return undefined;
  const read = p.mv.readLatest(rowId);
  return read.kind === 'intent' && read.txId === holder ? read.commitPartitionId : undefined;
}

function intentKey(p: PartitionReplica, holder: TxId): string | undefined {
  const [rowId] = p.mv.rowsWrittenBy(holder);
  return rowId === undefined ? undefined : p.mv.keyOf(rowId);
}

function holdsHere(p: PartitionReplica, holder: TxId): boolean {
  return p.mv.rowsWrittenBy(holder).length > 0 || p.locks.locksOf(holder).length > 0;
}

function coordinatorOf(txId: TxId): NodeId | undefined {
  try {
    return nodeIdOf(txId);
  } catch {
    return undefined;
  }
}
