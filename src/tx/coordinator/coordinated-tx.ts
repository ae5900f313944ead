/**
 * What a coordinator knows of one RW transaction it runs: a synchronous record, changed only by the coordinator.
 *
 * - Enlistment: per partition, the primary and lease token learned from the first response (ignite3-protocol.md §7.2)
 *   and the highest lease expiration heard since. The first partition a request was sent to is the commit partition
 *   (it is named in every request, so it is fixed before the first response).
 * - Partitions whose first request failed with an unknown outcome are *uncertain*: the primary tried may hold locks
 *   or an intent of the tx under a lease the coordinator never learned. They are cleaned up directly at rollback.
 * - Lifecycle: `active` → `finishing` (commit or rollback started: new operations are refused) → `finished`.
 *   `abortCause` set makes the tx abort-only (rule 7: an unknown outcome, a lock conflict, a primary change).
 * - Operations in flight are counted; commit waits until none is left (rule 6), reads included.
 * - `opSeq` increases by one per request (rule 7).
 */
import { assert } from '../../core/assert.js';
import { BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, NodeName, PartitionId, TxId } from '../../core/ids.js';
import type { TimerHandle } from '../../env/timers.js';
import type { CarriedWrite, EnlistedPartition, EnlistmentToken, LeaseInfo, TxOutcome } from '../core/messages.js';

export interface Enlistment {
  readonly partitionId: PartitionId;
  readonly primaryName: NodeName;
  readonly token: EnlistmentToken;
  /** Highest lease expiration heard for this token. */
  expiration: HybridTimestamp;
  /** A write request was sent to this partition. */
  wrote: boolean;
  /** A write here was answered before it applied: commit confirms its apply result first. */
  unconfirmed: boolean;
  /**
   * Keys of the writes here answered before they applied, which a parallel commit names as in flight; undefined once
   * more than LIMITS.updateAllWritesMax were noted (the commit then confirms them before its record).
   */
  pipelinedKeys: Set<string> | undefined;
  /**
   * Rows the tx holds X-locked here (its `forUpdate` reads), whose writes may ride with the commit when this is the
   * commit partition; undefined once more than LIMITS.txBatchKeysMax were noted (no longer tracked).
   */
  xLocked: Set<string> | undefined;
}

/**
 * The writes a commit carries to its commit partition (DESIGN §4b "Fewer rounds per commit"): rows the tx holds
 * X-locked there, where it wrote nothing before.
 */
export interface CarriedPlan {
  readonly partitionId: PartitionId;
  readonly writes: readonly CarriedWrite[];
}

export type FinishKind = 'commit' | 'rollback';

export interface FinishRecord {
  readonly kind: FinishKind;
  /** Set when the rollback was started by the tx timeout. */
  readonly timedOut: boolean;
  /** Set when the coordinator rolled the tx back by itself for this cause (e.g. its locks were lost). */
  readonly cause?: BasaltError;
}

export class CoordinatedTx {
  readonly id: TxId;
  readonly beginTs: HybridTimestamp;
  /** Rule 15: no commit with commitTs ≥ deadline. */
  readonly deadline: HybridTimestamp;
  private phase: 'active' | 'finishing' | 'finished' = 'active';
  private opSeqLast = 0;
  private inFlight = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly enlistments = new Map<PartitionId, Enlistment>();
  /** Partitions whose enlistment (first request) is under way: later operations wait for it. */
  readonly enlisting = new Map<PartitionId, Promise<unknown>>();
  private readonly uncertainPrimaries = new Map<PartitionId, Set<NodeName>>();
  commitPartitionId: PartitionId | undefined;
  /** A write request was sent somewhere: the tx may own intents, so its finish goes through the commit partition. */
  mayHaveWritten = false;
  /** The earliest expiry among the versions this tx read: it commits only below it (DESIGN §4b). */
  readExpiresAt: HybridTimestamp | undefined;
  /** Abort-only: why the tx can no longer commit. */
  abortCause: BasaltError | undefined;
  finish: FinishRecord | undefined;
  /** The first commit or rollback's result (later calls derive theirs from it, see the coordinator). */
  finishPromise: Promise<void> | undefined;
  /** Writes the commit carries to the commit partition (commitWith), if any. */
  carried: CarriedPlan | undefined;
  /** This coordinator installed FINISHING for the tx (commit or abort); later steps must not try again. */
  finishingInstalled = false;
  /** The stored outcome once known (rule 14), whether learned in the foreground or by background retries. */
  outcome: TxOutcome | undefined;
  timeoutTimer: TimerHandle | undefined;

  constructor(id: TxId, beginTs: HybridTimestamp, deadline: HybridTimestamp) {
    assert(deadline > beginTs, 'a tx deadline lies after its begin');
    this.id = id;
    this.beginTs = beginTs;
    this.deadline = deadline;
  }

  /** A read returned a version expiring at `at`: the commit must come before it. */
  noteReadExpiry(at: HybridTimestamp): void {
    if (this.readExpiresAt === undefined || at < this.readExpiresAt) this.readExpiresAt = at;
  }

  get isActive(): boolean {
    return this.phase === 'active';
  }

  get isFinished(): boolean {
    return this.phase === 'finished';
  }

  get operationsInFlight(): number {
    return this.inFlight;
  }

  /** Commit or rollback started: from now on new operations are refused. */
  startFinishing(kind: FinishKind, timedOut: boolean, cause?: BasaltError): void {
    assert(this.phase === 'active' && this.finish === undefined, 'a tx starts finishing once');
    this.phase = 'finishing';
    this.finish = cause === undefined ? { kind, timedOut } : { kind, timedOut, cause };
  }

  /** The outcome is settled (idempotent). */
  markFinished(): void {
    assert(this.phase !== 'active', 'a tx finishes after it started finishing');
    this.phase = 'finished';
  }

  nextOpSeq(): number {
    this.opSeqLast += 1;
    return this.opSeqLast;
  }

  /** Operations sent with opSeqs up to `opSeq` by another sender (direct mapping): the next one goes above them. */
  raiseOpSeq(opSeq: number): void {
    if (opSeq > this.opSeqLast) this.opSeqLast = opSeq;
  }

  /** Marks the tx abort-only; the first cause wins (it is what commit reports). */
  makeAbortOnly(cause: BasaltError): void {
    this.abortCause ??= cause;
  }

  // ------------------------------------------------------------------------------------- operations in flight

  operationStarted(): void {
    this.inFlight += 1;
  }

  operationEnded(): void {
    assert(this.inFlight > 0, 'an operation ends after it started');
    this.inFlight -= 1;
    if (this.inFlight > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Resolves once no operation is in flight. */
  idle(): Promise<void> {
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  // ------------------------------------------------------------------------------------- enlistment

  enlistment(partitionId: PartitionId): Enlistment | undefined {
    return this.enlistments.get(partitionId);
  }

  get enlistedPartitions(): readonly Enlistment[] {
    return [...this.enlistments.values()];
  }

  /** Records the lease a partition's first response named; the partition is enlisted under it from now on. */
  enlist(partitionId: PartitionId, lease: LeaseInfo, wrote: boolean): Enlistment {
    assert(!this.enlistments.has(partitionId), `partition ${partitionId} is enlisted once`);
    const e: Enlistment = {
      partitionId,
      primaryName: lease.holderName,
      token: lease.token,
      expiration: lease.expiration,
      wrote,
      unconfirmed: false,
      pipelinedKeys: new Set(),
      xLocked: new Set(),
    };
    this.enlistments.set(partitionId, e);
    this.uncertainPrimaries.delete(partitionId);
    return e;
  }

  /** A first request to `partitionId` at `primary` ended with an unknown outcome. */
  noteUncertain(partitionId: PartitionId, primary: NodeName): void {
    if (this.enlistments.has(partitionId)) return;
    let set = this.uncertainPrimaries.get(partitionId);
    if (set === undefined) {
      set = new Set();
      this.uncertainPrimaries.set(partitionId, set);
    }
    set.add(primary);
  }

  /** Uncertain partitions with every primary a first request of theirs may have reached. */
  get uncertain(): readonly { readonly partitionId: PartitionId; readonly primaries: readonly NodeName[] }[] {
    return [...this.uncertainPrimaries].map(([partitionId, set]) => ({ partitionId, primaries: [...set] }));
  }

  /** The enlisted set as the finish request carries it. */
  finishEnlisted(): EnlistedPartition[] {
    return this.enlistedPartitions.map((e) => ({
      partitionId: e.partitionId,
      primaryName: e.primaryName,
      token: e.token,
    }));
  }

  /** True if the tx sent no request at all (nothing to check, nothing to clean up). */
  get untouched(): boolean {
    return this.commitPartitionId === undefined;
  }
}

/** The abort-only cause of a tx whose enlisted partition's primary changed under it. */
export function primaryChangedError(
  tx: CoordinatedTx,
  partitionId: PartitionId,
  why: string,
  cause?: BasaltError,
): BasaltError {
  return new BasaltError(
    'TX_ABORTED',
    `the primary of ${partitionId} changed under tx ${tx.id} (${why})`,
    { txId: tx.id, partitionId, reason: 'primary-changed' },
    { cause },
  );
}

/** Two enlistment tokens name the same lease. */
export function sameEnlistmentToken(a: EnlistmentToken, b: EnlistmentToken): boolean {
  return a.start === b.start && a.holder.nodeId === b.holder.nodeId && a.holder.incarnation === b.holder.incarnation;
}
