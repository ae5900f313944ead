/**
 * TxFinishRequest on the commit partition primary (ignite3-protocol.md §7.5; DESIGN §2 "Commit acknowledgement";
 * rules 8, 13, 14, 15).
 *
 * A commit with commitTs ≥ D is refused first (rule 15: TX_TIMEOUT, the coordinator aborts instead; checked before
 * absorbing, so a bad commitTs cannot push the clock); then absorb commitTs (rule 8); act as primary (no token: any
 * current lease); read the *durable* state and never wait on FINISHING (rule 14): a stored outcome is the answer
 * (TX_MISMATCHING_OUTCOME with `{ outcome }` when it differs from the request). Otherwise FinishTx is proposed and the
 * answer comes from its apply result: the stored outcome (mismatch → TX_MISMATCHING_OUTCOME), or TX_OUTCOME_UNKNOWN
 * below the vacuum horizon. The primary's map goes final ('finish-marker').
 *
 * The coordinator is answered as soon as the outcome is durable: cleanup of the enlisted partitions is started (or
 * joined) on the cleanup driver and not awaited (cleanup-driver.ts re-drives it until it completes). FinishTx also
 * switches the tx's intents on the commit partition itself, in the same entry, to the stored outcome
 * (`switchIntents`): the commit partition's own cleanup then only releases the locks (it still switches an intent
 * that applied after the finish), which saves it a Raft entry per tx. A finish for a
 * record whose cleanup completed cleans only the partitions the decider did not know (a recovery knows part of the
 * enlisted set).
 */
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { formatTimestamp, type HybridTimestamp } from '../../hlc/timestamp.js';
import { rowLockKey } from '../../tx/core/lock-modes.js';
import type {
  CarriedCommit,
  EnlistedPartition,
  TxFinishRequest,
  TxFinishResponse,
  TxOutcome,
} from '../../tx/core/messages.js';
import type { CleanupDriver, CleanupTargetInput } from '../cleanup/cleanup-driver.js';
import type { CarriedWrites } from '../partition/commands.js';
import { type Lease, sameToken, tokenOf } from '../partition/lease.js';
import { assertHosted, type PartitionRegistry, type PartitionReplica } from '../partition/partition-replica.js';
import { outcomeOfRecord } from '../resolution/answers.js';
import { type Decided, decideOutcome, type Settle, stageCommit } from './outcome-decision.js';

export interface TxFinishOptions {
  readonly partitions: PartitionRegistry;
  readonly cleanups: Pick<CleanupDriver, 'ensureCleanup'>;
  /** Cleanups that could not be started (OVERLOADED: the rescan starts them later). */
  readonly onError?: (error: unknown) => void;
  readonly counters?: CounterSink;
  /** Settles a parallel commit's committing record (committing-settle.ts); without it such a record is an error. */
  readonly settle?: Settle;
}

/** Names of the node counters bumped here. */
export const TX_FINISH_COUNTERS = {
  /** Commits that carried writes and committed them in the finish entry. */
  carriedCommits: 'finish.carriedCommits',
  /** Commits that carried writes and were aborted instead (locks or lease lost, bound reached, an intent). */
  carriedRefusals: 'finish.carriedRefusals',
  /** Parallel commits whose committing record this commit partition stored. */
  committingRecords: 'finish.committingRecords',
} as const;

export class TxFinishHandler {
  private readonly partitions: PartitionRegistry;
  private readonly cleanups: Pick<CleanupDriver, 'ensureCleanup'>;
  private readonly onError: (error: unknown) => void;
  private readonly counters: CounterSink;
  private readonly settle: Settle;

  constructor(options: TxFinishOptions) {
    this.settle =
      options.settle ??
      ((_p, txId) => Promise.reject(new BasaltError('INTERNAL', `tx ${txId} is committing and nothing can settle it`)));
    this.partitions = options.partitions;
    this.cleanups = options.cleanups;
    this.onError = options.onError ?? (() => {});
    this.counters = options.counters ?? NO_COUNTERS;
  }

  async handle(request: TxFinishRequest): Promise<TxFinishResponse> {
    validate(request);
    const p = assertHosted(this.partitions.get(request.commitPartitionId), request.commitPartitionId);
    // Refused before its commitTs is absorbed: a commitTs past the deadline must not push this node's clock.
    checkDeadline(p, request);
    const absorbed = request.commitTs === undefined ? p.clock.now() : p.clock.update(request.commitTs);
    const lease = p.actingLease(await p.untilLeaseStart(absorbed));
    const stored = p.txState.get(request.txId);
    const staged = stored !== undefined ? outcomeOfRecord(stored) : await this.decideOrStage(p, request, lease);
    if ('committing' in staged) return { kind: 'TxFinishResponse', committing: staged.committing };
    const decided = staged;
    const { refused, ...outcome } = decided as TxOutcome & { readonly refused?: string };
    if (stored === undefined && request.carried !== undefined) {
      this.counters.add(refused === undefined ? TX_FINISH_COUNTERS.carriedCommits : TX_FINISH_COUNTERS.carriedRefusals);
    }
    const targets = mergeTargets(request.enlisted, stored?.enlistedPartitions ?? []);
    if (stored === undefined || !stored.cleanupCompleted) this.cleanUp(p, request, outcome, targets);
    else {
      // The decider (e.g. a recovery) may have known only part of the enlisted set: clean what it did not know.
      const unknown = targets.filter((t) => !stored.enlistedPartitions.includes(t.partitionId));
      if (unknown.length > 0) this.cleanUp(p, request, outcome, unknown);
    }
    // The first outcome won (recovery, or another finish): its cleanup runs with it; tell the caller.
    if (differs(outcome, request)) throw mismatch(request.txId, outcome, refused);
    return { kind: 'TxFinishResponse', outcome };
  }

  /** Starts (or joins) the cleanup without waiting for it: the outcome is durable, the answer goes out now. */
  private cleanUp(
    p: PartitionReplica,
    request: TxFinishRequest,
    outcome: TxOutcome,
    targets: readonly CleanupTargetInput[],
  ): void {
    this.cleanups.ensureCleanup(p, request.txId, outcome, targets).catch(this.onError);
  }

  /**
   * A tx with a committing record (a parallel commit): its own repeated first request is answered with the record,
   * its coordinator's confirmation stores COMMITTED, and anything else settles it from its in-flight writes
   * (committing-settle.ts). Without one: the durable compare-and-set, or a parallel commit's record.
   */
  private async decideOrStage(
    p: PartitionReplica,
    request: TxFinishRequest,
    lease: Lease,
  ): Promise<Exclude<Decided, 'vacuumed'> | { readonly committing: HybridTimestamp }> {
    const staged = p.txState.committing(request.txId);
    if (staged === undefined && request.settle !== undefined) {
      // A settle follows a stored committing record: with no record at all nothing may be stored unchecked.
      throw new BasaltError('INTERNAL', `tx ${request.txId} has no committing record to settle`, {
        txId: request.txId,
      });
    }
    if (staged === undefined) return this.finishDurably(p, request, lease);
    if (request.committing !== undefined) return { committing: staged.commitTs };
    const decided =
      request.settle === 'confirmed' && request.commit
        ? await decideOutcome(p, {
            txId: request.txId,
            commit: true,
            commitTs: staged.commitTs,
            enlistedPartitions: staged.enlistedPartitions,
            settled: true,
          })
        : await this.settle(p, request.txId);
    return known(request, decided);
  }

  /** The durable compare-and-set (outcome-decision.ts); the answer is what it stored. */
  private async finishDurably(
    p: PartitionReplica,
    request: TxFinishRequest,
    lease: Lease,
  ): Promise<Exclude<Decided, 'vacuumed'> | { readonly committing: HybridTimestamp }> {
    const carried = request.carried === undefined ? undefined : carriedWrites(p, request, request.carried, lease);
    // Carried writes whose locks this primary no longer holds for the tx cannot commit: the tx is aborted instead.
    const lost = carried === null;
    const proposal = {
      txId: request.txId,
      commit: request.commit && !lost,
      commitTs: lost ? undefined : request.commitTs,
      enlistedPartitions: request.enlisted.map((e) => e.partitionId),
      ...(carried !== undefined && carried !== null && { carried }),
    };
    const decided =
      request.committing !== undefined && !lost
        ? await stageCommit(p, { ...proposal, committing: request.committing.inflight })
        : await decideOutcome(p, proposal, this.settle);
    if (decided !== 'vacuumed' && 'committing' in decided) {
      this.counters.add(TX_FINISH_COUNTERS.committingRecords);
      return decided;
    }
    const outcome = known(request, decided);
    if (lost && outcome.state === 'ABORTED') return { ...outcome, refused: 'locks-lost' };
    return outcome;
  }
}

/** A decision that is an outcome; below the vacuum horizon none will ever be (TX_OUTCOME_UNKNOWN). */
function known(request: TxFinishRequest, decided: Decided): Exclude<Decided, 'vacuumed'> {
  if (decided === 'vacuumed') {
    throw new BasaltError(
      'TX_OUTCOME_UNKNOWN',
      `tx ${request.txId} is below the vacuum horizon: its outcome is unknown`,
      { txId: request.txId },
    );
  }
  return decided;
}

/**
 * The carried writes as FinishTx carries them, or null when the tx does not hold every one of their rows X-locked
 * here under the lease it names (a lease change lost its locks).
 */
function carriedWrites(
  p: PartitionReplica,
  request: TxFinishRequest,
  carried: CarriedCommit,
  lease: Lease,
): CarriedWrites | null {
  if (!sameToken(carried.token, tokenOf(lease))) return null;
  for (const w of carried.writes) {
    if (p.locks.heldMode(request.txId, rowLockKey(p.partitionId, w.key)) !== 'X') return null;
  }
  return carried;
}

// ------------------------------------------------------------------------------------------ helpers

function validate(request: TxFinishRequest): void {
  if (request.commit !== (request.commitTs !== undefined)) {
    throw invalidArgument('a commit carries its commitTs, an abort none', { txId: request.txId });
  }
  if (request.carried !== undefined) {
    const keys = new Set(request.carried.writes.map((w) => w.key));
    if (!request.commit || keys.size !== request.carried.writes.length || keys.size === 0) {
      throw invalidArgument('a commit carries distinct keys, an abort none', { txId: request.txId });
    }
    if (keys.size > LIMITS.updateAllWritesMax) {
      throw invalidArgument('too many carried writes', { writes: keys.size });
    }
  }
  if (request.enlisted.length > LIMITS.finishEnlistedPartitionsMax) {
    throw invalidArgument('too many enlisted partitions', { enlisted: request.enlisted.length });
  }
}

/** Rule 15: no commit with commitTs ≥ D is accepted (the coordinator aborts instead). */
function checkDeadline(p: PartitionReplica, request: TxFinishRequest): void {
  const deadline = p.deadlineOf(request.txId);
  if (request.commitTs === undefined || request.commitTs < deadline) return;
  throw new BasaltError('TX_TIMEOUT', `commitTs of ${request.txId} is not below its deadline`, {
    txId: request.txId,
    commitTs: formatTimestamp(request.commitTs),
    deadline: formatTimestamp(deadline),
  });
}

/**
 * True if the stored outcome is not what the request asked for (rule 14). A carried commit's commitTs is a lower
 * bound: the one stored is the commit partition's, at or above it.
 */
function differs(outcome: TxOutcome, request: TxFinishRequest): boolean {
  if (outcome.state === 'ABORTED') return request.commit;
  if (!request.commit || request.commitTs === undefined) return true;
  return request.carried === undefined ? request.commitTs !== outcome.commitTs : outcome.commitTs < request.commitTs;
}

function mismatch(txId: TxId, outcome: TxOutcome, refused: string | undefined): BasaltError {
  return new BasaltError(
    'TX_MISMATCHING_OUTCOME',
    `tx ${txId} already finished as ${outcome.state}${refused === undefined ? '' : ` (${refused})`}`,
    { outcome, ...(refused !== undefined && { refused }) },
    { hint: { kind: 'mismatched-outcome', outcome } },
  );
}

/** The request's enlisted partitions with their hints, plus any stored one it lacks. */
function mergeTargets(enlisted: readonly EnlistedPartition[], stored: readonly PartitionId[]): CleanupTargetInput[] {
  const out = new Map<PartitionId, CleanupTargetInput>();
  for (const e of enlisted) out.set(e.partitionId, { partitionId: e.partitionId, hint: e.primaryName });
  for (const partitionId of stored) if (!out.has(partitionId)) out.set(partitionId, { partitionId });
  return [...out.values()];
}
