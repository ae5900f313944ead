/**
 * TxFinishRequest on the commit partition primary (ignite3-protocol.md §7.5–7.7; rules 8, 13, 14, 15), and the
 * cleanup it drives.
 *
 * Finish: a commit with commitTs ≥ D is refused first (rule 15: TX_TIMEOUT, the coordinator aborts instead; checked
 * before absorbing, so a bad commitTs cannot push the clock); then absorb commitTs (rule 8); act as primary (no
 * token: any current lease); read the *durable* state and never wait on FINISHING (rule 14): a stored outcome is the
 * answer (TX_MISMATCHING_OUTCOME with `{ outcome }` when it differs from the request). Otherwise FinishTx is proposed
 * and the answer comes from its apply result: the stored outcome (mismatch → TX_MISMATCHING_OUTCOME), or
 * TX_OUTCOME_UNKNOWN below the vacuum horizon. The primary's map goes final ('finish-marker'). Then cleanup; the
 * coordinator gets its answer only after every enlisted primary answered (its locks are released), and
 * TxCleanupCompleted is proposed afterwards so vacuum may remove the record later.
 *
 * Cleanup: enlisted partitions are grouped by their primary node (the coordinator's hint first), one
 * TxCleanupRequest per node; partitions not reported cleaned (PRIMARY_MISS, timeout, failure) have their primary
 * re-resolved through the PrimaryLocator and are retried with doubling backoff, at most `cleanupAttemptsMax`
 * rounds. If rounds run out, the finish still answers the durable outcome (it is decided) and the record stays "not
 * cleaned up", so `recoverCleanups` on a later primacy picks it up again. Concurrent cleanups of one tx share one
 * run. A new commit partition primary calls `recoverCleanups` to re-run cleanup for every finished record whose
 * cleanup did not complete.
 */
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { NodeName, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { sleep, type Timers } from '../../env/timers.js';
import { formatTimestamp } from '../../hlc/timestamp.js';
import type { StoredTxMeta } from '../../storage/tx-state-storage.js';
import type {
  EnlistedPartition,
  TxCleanupRequest,
  TxCleanupResponse,
  TxFinishRequest,
  TxFinishResponse,
  TxOutcome,
} from '../../tx/messages.js';
import type { ApplyResult } from '../apply-result.js';
import { assertHosted, type HostedPartition, type PartitionRegistry } from './hosted-partition.js';

/** Sends one TxCleanupRequest to a node (the messenger's `request`, with a timeout). */
export interface CleanupSender {
  request(to: NodeName, body: TxCleanupRequest): Promise<TxCleanupResponse>;
}

/** The part of the Messenger a CleanupSender needs. */
export interface RequestChannel {
  request(to: NodeName, body: TxCleanupRequest, options: { readonly timeoutMs: number }): Promise<unknown>;
}

/** A CleanupSender over the node's messenger, each request bounded by `timeoutMs`. */
export function messengerCleanupSender(
  channel: RequestChannel,
  timeoutMs: number = LIMITS.cleanupRequestTimeoutMs,
): CleanupSender {
  return {
    request: async (to, body) => {
      const response = (await channel.request(to, body, { timeoutMs })) as Partial<TxCleanupResponse> | undefined;
      if (response?.kind !== 'TxCleanupResponse' || !Array.isArray(response.cleaned)) {
        throw new BasaltError('INTERNAL', `${to} answered a cleanup with ${String(response?.kind)}`);
      }
      return response as TxCleanupResponse;
    },
  };
}

/** Finds the current primary of a partition (waiting for one if needed; rejects when none can be found). */
export interface PrimaryLocator {
  locate(partitionId: PartitionId): Promise<NodeName>;
}

export interface TxFinishOptions {
  readonly partitions: PartitionRegistry;
  readonly sender: CleanupSender;
  readonly locator: PrimaryLocator;
  readonly timers: Timers;
  /** Background failures (cleanup rounds exhausted, TxCleanupCompleted not applied). */
  readonly onError?: (error: unknown) => void;
  readonly cleanupAttemptsMax?: number;
  readonly cleanupBackoffMsMin?: number;
  readonly cleanupBackoffMsMax?: number;
  readonly finishesInFlightMax?: number;
}

interface CleanupTarget {
  readonly partitionId: PartitionId;
  /** Where to send first: the coordinator's enlistment hint, or the last known primary. */
  hint: NodeName | undefined;
}

export class TxFinishHandler {
  private readonly partitions: PartitionRegistry;
  private readonly sender: CleanupSender;
  private readonly locator: PrimaryLocator;
  private readonly timers: Timers;
  private readonly onError: (error: unknown) => void;
  private readonly attemptsMax: number;
  private readonly backoffMsMin: number;
  private readonly backoffMsMax: number;
  private readonly inFlightMax: number;
  /** Cleanup runs in progress, by tx: concurrent finishes and recoveries of one tx share one. */
  private readonly cleanups = new Map<TxId, Promise<boolean>>();

  constructor(options: TxFinishOptions) {
    this.partitions = options.partitions;
    this.sender = options.sender;
    this.locator = options.locator;
    this.timers = options.timers;
    this.onError = options.onError ?? (() => {});
    this.attemptsMax = options.cleanupAttemptsMax ?? LIMITS.cleanupAttemptsMax;
    this.backoffMsMin = options.cleanupBackoffMsMin ?? LIMITS.cleanupBackoffMsMin;
    this.backoffMsMax = options.cleanupBackoffMsMax ?? LIMITS.cleanupBackoffMsMax;
    this.inFlightMax = options.finishesInFlightMax ?? LIMITS.finishesInFlightMax;
  }

  get cleanupsInFlight(): number {
    return this.cleanups.size;
  }

  async handle(request: TxFinishRequest): Promise<TxFinishResponse> {
    validate(request);
    const p = assertHosted(this.partitions.get(request.commitPartitionId), request.commitPartitionId);
    // Refused before its commitTs is absorbed: a commitTs past the deadline must not push this node's clock.
    checkDeadline(p, request);
    const absorbed = request.commitTs === undefined ? p.clock.now() : p.clock.update(request.commitTs);
    p.actingLease(await p.untilLeaseStart(absorbed));
    const stored = p.txState.get(request.txId);
    const outcome = stored !== undefined ? outcomeOf(stored) : await this.finishDurably(p, request);
    const targets = mergeTargets(request.enlisted, stored?.enlistedPartitions ?? []);
    if (differs(outcome, request)) {
      // The first outcome won (recovery, or another finish): its own cleanup runs (or recovers); tell the caller.
      if (stored !== undefined && !stored.cleanupCompleted) void this.ensureCleanup(p, request.txId, outcome, targets);
      throw mismatch(request.txId, outcome);
    }
    if (stored === undefined || !stored.cleanupCompleted) await this.ensureCleanup(p, request.txId, outcome, targets);
    else {
      // The decider (e.g. a recovery) may have known only part of the enlisted set: clean what it did not know.
      const unknown = targets.filter((t) => !stored.enlistedPartitions.includes(t.partitionId));
      if (unknown.length > 0) await this.ensureCleanup(p, request.txId, outcome, unknown);
    }
    return { kind: 'TxFinishResponse', outcome };
  }

  /** Proposes FinishTx (the durable compare-and-set) and answers from its apply result. */
  private async finishDurably(p: HostedPartition, request: TxFinishRequest): Promise<TxOutcome> {
    const applied = await p.replica.propose((proposal) => ({
      kind: 'FinishTx',
      ts: proposal.ts,
      proposalId: proposal.id,
      txId: request.txId,
      commit: request.commit,
      commitTs: request.commitTs ?? null,
      enlistedPartitions: request.enlisted.map((e) => e.partitionId),
    }));
    const outcome = finishedOutcome(request.txId, applied);
    p.txStateMap.update(request.txId, {
      state: outcome.state,
      commitTimestamp: outcome.state === 'COMMITTED' ? outcome.commitTs : undefined,
      commitPartitionId: p.partitionId,
      reason: 'finish-marker',
      retainUntilCleanup: true,
    });
    return outcome;
  }

  // ---------------------------------------------------------------------------------------- cleanup

  /**
   * Runs (or joins) the cleanup of `txId`; resolves true once every target partition's primary reported it cleaned
   * (TxCleanupCompleted is then proposed in the background), false if rounds ran out (the record stays "not cleaned
   * up" for recoverCleanups).
   */
  ensureCleanup(
    p: HostedPartition,
    txId: TxId,
    outcome: TxOutcome,
    targets: readonly { readonly partitionId: PartitionId; readonly hint?: NodeName }[],
  ): Promise<boolean> {
    const running = this.cleanups.get(txId);
    if (running !== undefined) return running;
    if (this.cleanups.size >= this.inFlightMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many finishes in progress'));
    }
    // TxCleanupCompleted is not awaited: the coordinator's answer waits only for the enlisted primaries (a finish
    // repeated before it applies runs cleanup again, which is idempotent).
    const run = this.cleanup(txId, outcome, targets)
      .then((done) => {
        if (done) void this.markCleaned(p, txId);
        return done;
      })
      .finally(() => this.cleanups.delete(txId));
    this.cleanups.set(txId, run);
    return run;
  }

  private async cleanup(
    txId: TxId,
    outcome: TxOutcome,
    targets: readonly { readonly partitionId: PartitionId; readonly hint?: NodeName }[],
  ): Promise<boolean> {
    const pending = new Map<PartitionId, CleanupTarget>(
      targets.map((t) => [t.partitionId, { partitionId: t.partitionId, hint: t.hint }]),
    );
    let backoffMs = this.backoffMsMin;
    for (let round = 0; round < this.attemptsMax && pending.size > 0; round++) {
      if (round > 0) {
        await sleep(this.timers, backoffMs);
        backoffMs = Math.min(backoffMs * 2, this.backoffMsMax);
      }
      await this.locateMissing(pending);
      await Promise.all(
        [...groupByNode(pending)].map(([node, partitionIds]) =>
          this.sendOne(txId, outcome, node, partitionIds, pending),
        ),
      );
    }
    if (pending.size === 0) return true;
    this.onError(
      new BasaltError('TIMEOUT', `cleanup of ${txId} gave up after ${this.attemptsMax} rounds`, {
        txId,
        pending: [...pending.keys()],
      }),
    );
    return false;
  }

  private async locateMissing(pending: Map<PartitionId, CleanupTarget>): Promise<void> {
    await Promise.all(
      [...pending.values()]
        .filter((t) => t.hint === undefined)
        .map(async (t) => {
          t.hint = await this.locator.locate(t.partitionId).catch(() => undefined);
        }),
    );
  }

  private async sendOne(
    txId: TxId,
    outcome: TxOutcome,
    node: NodeName,
    partitionIds: readonly PartitionId[],
    pending: Map<PartitionId, CleanupTarget>,
  ): Promise<void> {
    const body: TxCleanupRequest = {
      kind: 'TxCleanupRequest',
      txId,
      partitions: partitionIds,
      unlockOnly: false,
      outcome,
    };
    const cleaned = await this.sender.request(node, body).then(
      (response) => new Set(response.cleaned),
      () => new Set<PartitionId>(),
    );
    for (const partitionId of partitionIds) {
      if (cleaned.has(partitionId)) pending.delete(partitionId);
      else {
        // Not its primary any more (or unreachable): ask the locator again next round.
        const target = pending.get(partitionId);
        if (target !== undefined) target.hint = undefined;
      }
    }
  }

  private async markCleaned(p: HostedPartition, txId: TxId): Promise<void> {
    try {
      await p.replica.propose((proposal) => ({
        kind: 'TxCleanupCompleted',
        ts: proposal.ts,
        proposalId: proposal.id,
        txIds: [txId],
      }));
    } catch (error) {
      // The record stays "not cleaned up": a later recoverCleanups runs cleanup again (idempotent) and marks it.
      this.onError(error);
    }
  }

  /**
   * On gaining primacy of commit partition `partitionId`: re-runs cleanup for every finished tx whose cleanup did not
   * complete (from durable state; primaries are located afresh). Resolves with the number of txs fully cleaned.
   */
  async recoverCleanups(partitionId: PartitionId): Promise<number> {
    const p = assertHosted(this.partitions.get(partitionId), partitionId);
    let cleaned = 0;
    let after: TxId | undefined;
    for (;;) {
      const page = p.txState.finishedNotCleanedUp(after, LIMITS.txStateListMax);
      const done = await Promise.all(
        page.map((record) =>
          this.ensureCleanup(
            p,
            record.txId,
            outcomeOf(record),
            record.enlistedPartitions.map((partitionId) => ({ partitionId })),
          ).catch((error: unknown) => {
            this.onError(error);
            return false;
          }),
        ),
      );
      cleaned += done.filter(Boolean).length;
      const last = page.at(-1);
      if (last === undefined || page.length < LIMITS.txStateListMax) return cleaned;
      after = last.txId;
    }
  }
}

// ------------------------------------------------------------------------------------------ helpers

function validate(request: TxFinishRequest): void {
  if (request.commit !== (request.commitTs !== undefined)) {
    throw invalidArgument('a commit carries its commitTs, an abort none', { txId: request.txId });
  }
  if (request.enlisted.length > LIMITS.finishEnlistedPartitionsMax) {
    throw invalidArgument('too many enlisted partitions', { enlisted: request.enlisted.length });
  }
}

/** Rule 15: no commit with commitTs ≥ D is accepted (the coordinator aborts instead). */
function checkDeadline(p: HostedPartition, request: TxFinishRequest): void {
  const deadline = p.deadlineOf(request.txId);
  if (request.commitTs === undefined || request.commitTs < deadline) return;
  throw new BasaltError('TX_TIMEOUT', `commitTs of ${request.txId} is not below its deadline`, {
    txId: request.txId,
    commitTs: formatTimestamp(request.commitTs),
    deadline: formatTimestamp(deadline),
  });
}

function outcomeOf(stored: StoredTxMeta): TxOutcome {
  if (stored.state === 'ABORTED') return { state: 'ABORTED' };
  if (stored.commitTs === undefined)
    throw new BasaltError('STORAGE_CORRUPTED', `COMMITTED ${stored.txId} lacks commitTs`);
  return { state: 'COMMITTED', commitTs: stored.commitTs };
}

function finishedOutcome(txId: TxId, applied: ApplyResult): TxOutcome {
  switch (applied.kind) {
    case 'FINISHED': {
      const { state, commitTs } = applied.outcome;
      if (state === 'ABORTED') return { state };
      if (commitTs === undefined) throw new BasaltError('INTERNAL', `COMMITTED ${txId} applied without commitTs`);
      return { state, commitTs };
    }
    case 'TX_OUTCOME_UNKNOWN':
      throw new BasaltError('TX_OUTCOME_UNKNOWN', `tx ${txId} is below the vacuum horizon: its outcome is unknown`, {
        txId,
      });
    default:
      throw new BasaltError('INTERNAL', `FinishTx answered ${applied.kind}`);
  }
}

/** True if the stored outcome is not what the request asked for (rule 14). */
function differs(outcome: TxOutcome, request: TxFinishRequest): boolean {
  if (outcome.state === 'ABORTED') return request.commit;
  return !request.commit || request.commitTs !== outcome.commitTs;
}

function mismatch(txId: TxId, outcome: TxOutcome): BasaltError {
  return new BasaltError('TX_MISMATCHING_OUTCOME', `tx ${txId} already finished as ${outcome.state}`, { outcome });
}

/** The request's enlisted partitions with their hints, plus any stored one it lacks. */
function mergeTargets(
  enlisted: readonly EnlistedPartition[],
  stored: readonly PartitionId[],
): { partitionId: PartitionId; hint?: NodeName }[] {
  const out = new Map<PartitionId, { partitionId: PartitionId; hint?: NodeName }>();
  for (const e of enlisted) out.set(e.partitionId, { partitionId: e.partitionId, hint: e.primaryName });
  for (const partitionId of stored) if (!out.has(partitionId)) out.set(partitionId, { partitionId });
  return [...out.values()];
}

function groupByNode(pending: ReadonlyMap<PartitionId, CleanupTarget>): Map<NodeName, PartitionId[]> {
  const groups = new Map<NodeName, PartitionId[]>();
  for (const t of pending.values()) {
    if (t.hint === undefined) continue;
    const group = groups.get(t.hint) ?? [];
    group.push(t.partitionId);
    groups.set(t.hint, group);
  }
  return groups;
}
