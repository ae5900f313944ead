/**
 * Orphan detection (ignite3-protocol.md §9 "Orphaned locks"; DESIGN §2 "Recovery", §2b rule 17). A lock conflict on
 * a primary names the holders that block a request (LockManager `onConflict`). A holder is an orphan when this node's
 * map has it neither final nor FINISHING and its coordinator id is *gone* (rule 17: superseded or unheard for the
 * liveness timeout; an id never seen is not gone). For an orphan:
 *
 * 1. the map entry moves to ABANDONED (reason `coordinator-gone`; the transition table keeps a final state final);
 * 2. one TxRecoveryRequest goes to the commit partition's primary, and not again for that tx and partition within
 *    `intervalMs` (a named limit; the remembered pairs are bounded, oldest forgotten first); the commit partition
 *    aborts the tx through its compare-and-set and cleans up this partition, which releases the orphan's locks;
 * 3. the requester fails retryably: once its request is queued (deferred to a microtask, because the conflict is
 *    reported before the lock manager queues it), its waiting lock requests here are denied with TX_ABORTED
 *    (retryable), so the client retries in a new tx instead of waiting out the lock timeout. A requester that
 *    wait-die already denied is left alone.
 *
 * The node's tx sweep (tx-sweep.ts) sends its recovery requests through `requestRecovery`, so both share one rate
 * limit per tx.
 *
 * A final answer to a recovery request is what the commit partition's compare-and-set stored (rule 11): the reporter
 * caches it in the map (reason `recovery-answer`), so that its next reader, conflict or sweep does not ask again, and,
 * while it acts as the reporter partition's primary and still holds an intent or lock of the tx there, cleans that
 * partition up in line with it (cleanup/partition-cleanup.ts `cleanupPartition`, as the commit partition's cleanup would). The
 * commit partition cleans the reporter's partition too, but it learned that partition only from this request, and
 * its durable record may not name it: the reporter, which knows what it holds, does not rely on that cleanup alone.
 * UNKNOWN (below the vacuum horizon) is neither cached nor acted on (rule 16).
 *
 * A holder the map has ABORTED yet still holding a lock here missed its cleanup of this partition (a recovery's abort
 * knows only the commit partition and its reporter as enlisted): the same request (rate-limited alike, counted as an
 * orphan) makes the commit partition clean this partition up; the requester is left alone (wait-die decided for it).
 */

import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import type { PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import type { TxCleanupRequest, TxOutcome, TxRequestFn, TxStateResponse } from '../../tx/core/messages.js';
import { nodeIdOf } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { PartitionRegistry, PartitionReplica } from '../partition/partition-replica.js';
import { type PeerDirectory, RESOLUTION_COUNTERS } from '../ports.js';
import { answerOf, isFinalAnswer } from './answers.js';
import { markCoordinatorGone } from './coordinator-gone.js';
import { requestPrimary } from './primary-requests.js';

export interface OrphanDetectorOptions {
  readonly txStates: TxStateMap;
  /** The node's hosted partitions: a reporter partition is cleaned in line once its recovery is answered. */
  readonly partitions: PartitionRegistry;
  /** One partition's cleanup on its primary (cleanup/partition-cleanup.ts, wired from above this layer). */
  readonly cleanLocally: (p: PartitionReplica, request: TxCleanupRequest) => Promise<void>;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  readonly physicalClock: Pick<Clock, 'monotonicMs'>;
  readonly counters?: CounterSink;
  readonly onError?: (error: unknown) => void;
  readonly intervalMs?: number;
  readonly trackedMax?: number;
  readonly requestTimeoutMs?: number;
  /** Runs `fn` once the current synchronous step is over (default: a microtask). */
  readonly defer?: (fn: () => void) => void;
}

export class OrphanDetector {
  private readonly o: OrphanDetectorOptions;
  private readonly counters: CounterSink;
  private readonly onError: (error: unknown) => void;
  private readonly intervalMs: number;
  private readonly trackedMax: number;
  private readonly requestTimeoutMs: number;
  private readonly defer: (fn: () => void) => void;
  /**
   * (txId, reporter partition) → monotonic ms of the last recovery request, oldest first. Per reporter partition,
   * because a request makes the commit partition clean up only the partition it names.
   */
  private readonly sentAtMs = new Map<string, number>();

  constructor(options: OrphanDetectorOptions) {
    this.o = options;
    this.counters = options.counters ?? NO_COUNTERS;
    this.onError = options.onError ?? (() => {});
    this.intervalMs = options.intervalMs ?? LIMITS.orphanRecoveryIntervalMs;
    this.trackedMax = options.trackedMax ?? LIMITS.orphanRecoveriesTrackedMax;
    this.requestTimeoutMs = options.requestTimeoutMs ?? LIMITS.resolutionRequestTimeoutMs;
    this.defer = options.defer ?? ((fn) => queueMicrotask(fn));
  }

  /** Watches the lock conflicts and unprotected intents of `partition`; returns the function that stops watching. */
  attach(partition: PartitionReplica): () => void {
    const conflicts = partition.locks.onConflict((holder, requester) => {
      this.onConflict(partition, holder, requester);
    });
    const intents = partition.onUnprotectedIntent((txId, commitPartitionId) => {
      this.onUnprotectedIntent(partition, txId, commitPartitionId);
    });
    return () => {
      conflicts();
      intents();
    };
  }

  /**
   * A foreign intent without a lock (its writer lost its locks with a primary change) whose coordinator is gone: the
   * same recovery as for a lock holder. Without a map entry here the coordinator named in the tx id is asked about.
   * True if recovery was asked for.
   */
  onUnprotectedIntent(partition: PartitionReplica, txId: TxId, commitPartitionId: PartitionId): boolean {
    const entry = this.o.txStates.entry(txId);
    if (entry !== undefined && (isFinal(entry.state) || entry.state === 'FINISHING')) return false;
    const coordinatorId = entry?.coordinatorId ?? nodeIdOf(txId);
    if (!this.o.peers.isGone(coordinatorId)) return false;
    markCoordinatorGone(this.o.txStates, this.o.peers, txId, coordinatorId);
    this.requestRecovery(txId, commitPartitionId, partition.partitionId);
    return true;
  }

  /**
   * Handles one conflict; true if `holder` is an orphan (then the requester is failed). A holder already ABORTED in
   * this node's map still holding a lock here was not cleaned up on this partition: the map is shared by every
   * partition of the node, so the entry may come from another of them (e.g. this node's commit partition primary
   * recovered the tx knowing only some enlisted partitions), and a non-final entry is what makes a holder an orphan.
   * The commit partition answers a recovery request from its durable outcome and cleans this partition up; without
   * it the lock would stay until the lease moves.
   */
  onConflict(partition: PartitionReplica, holder: TxId, requester: TxId): boolean {
    const entry = this.o.txStates.entry(holder);
    if (entry === undefined || entry.state === 'FINISHING') return false;
    if (isFinal(entry.state)) {
      // Only ABORTED: a recovery's abort can never contradict it, while a COMMITTED entry may have no record at the
      // commit partition (a one-phase tx) that recovery would then abort. Missed cleanups are of recovered aborts.
      if (entry.state === 'ABORTED' && entry.commitPartitionId !== undefined) {
        this.requestRecovery(holder, entry.commitPartitionId, partition.partitionId);
      }
      return false;
    }
    const coordinatorId = entry.coordinatorId;
    if (coordinatorId === undefined || !this.o.peers.isGone(coordinatorId)) return false;
    markCoordinatorGone(this.o.txStates, this.o.peers, holder, coordinatorId);
    if (entry.commitPartitionId !== undefined)
      this.requestRecovery(holder, entry.commitPartitionId, partition.partitionId);
    this.defer(() => partition.locks.failWaiters(requester));
    return true;
  }

  /**
   * Sends one TxRecoveryRequest for `txId` naming `reporterPartitionId` to its commit partition's primary unless one
   * was sent for the pair within `intervalMs` (the bookkeeping the node's tx sweep shares); true if sent.
   */
  requestRecovery(txId: TxId, commitPartitionId: PartitionId, reporterPartitionId: PartitionId): boolean {
    const nowMs = this.o.physicalClock.monotonicMs();
    const key = `${txId}\u0000${reporterPartitionId}`;
    const last = this.sentAtMs.get(key);
    if (last !== undefined && nowMs - last < this.intervalMs) return false;
    this.sentAtMs.delete(key);
    if (this.sentAtMs.size >= this.trackedMax) {
      const oldest = this.sentAtMs.keys().next().value;
      if (oldest !== undefined) this.sentAtMs.delete(oldest);
    }
    this.sentAtMs.set(key, nowMs);
    this.counters.add(RESOLUTION_COUNTERS.orphans);
    requestPrimary(
      this.o,
      commitPartitionId,
      { kind: 'TxRecoveryRequest', txId, commitPartitionId, reporterPartitionId },
      { timeoutMs: this.requestTimeoutMs },
    )
      .then((response) => this.onAnswer(txId, commitPartitionId, reporterPartitionId, response))
      .catch(this.onError);
    return true;
  }

  /** A recovery request was answered (see the module header). */
  private async onAnswer(
    txId: TxId,
    commitPartitionId: PartitionId,
    reporterPartitionId: PartitionId,
    response: TxStateResponse,
  ): Promise<void> {
    const answer = answerOf(response);
    if (answer === null || !isFinalAnswer(answer)) return;
    this.o.txStates.update(txId, {
      state: answer.state,
      commitTimestamp: answer.state === 'COMMITTED' ? answer.commitTs : undefined,
      commitPartitionId,
      reason: 'recovery-answer',
    });
    const p = this.o.partitions.get(reporterPartitionId);
    if (p === undefined || !holdsHere(p, txId) || p.checkPrimary(p.clock.current()).kind !== 'ok') return;
    await this.o.cleanLocally(p, cleanupOf(txId, p.partitionId, answer));
  }
}

function holdsHere(p: PartitionReplica, txId: TxId): boolean {
  return p.mv.rowsWrittenBy(txId).length > 0 || p.locks.locksOf(txId).length > 0;
}

function cleanupOf(txId: TxId, partitionId: PartitionId, outcome: TxOutcome): TxCleanupRequest {
  return { kind: 'TxCleanupRequest', txId, partitions: [partitionId], unlockOnly: false, outcome };
}
