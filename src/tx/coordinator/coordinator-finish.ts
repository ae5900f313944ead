/**
 * Commit and rollback on the coordinator (ignite3-protocol.md §7.4; DESIGN §2b rules 6, 13, 14, 15).
 *
 * Commit, once every operation in flight has answered:
 * 1. abort-only → roll back and report the cause; looked at again once the pipelined writes are confirmed, since a
 *    lost-lock abort (coordinator.ts) may have installed its decision meanwhile and left the rollback to this commit;
 * 2. in one synchronous step: commitTs = now(), refuse it if commitTs ≥ D (rule 15), and the compare-and-set to
 *    FINISHING carrying commitTs (rule 13). No await separates them, so no state request can see PENDING once
 *    commitTs is chosen; since every write's timestamp was absorbed on arrival, commitTs exceeds them all;
 * 3. the lease check of every enlisted partition, read-only ones included (rule 6): `commitTs < expiration` as last
 *    heard, else a LeaseConfirmRequest to that primary; a failed check aborts instead (retryable error);
 * 4. a tx that wrote nothing: unlock-only cleanup, its entry goes final and is removed (no durable state);
 *    otherwise TxFinishRequest to the commit partition primary, routed as every primary-only request is
 *    (route/send-to-primary.ts: a PRIMARY_MISS hint followed, a target tried again after a backoff), timeouts retried too,
 *    always with the same commitTs. The commit partition answers once the outcome is durable
 *    and cleans up the enlisted partitions after it (DESIGN §2 "Commit acknowledgement"), so the answer costs no
 *    cleanup round trip. COMMITTED is reported only from the stored outcome (rule 14); a mismatch sets the map to
 *    the real outcome, cleans up the whole enlisted set and is reported (not retryable); after `finishAttemptsMax`
 *    attempts without an answer commit reports TX_OUTCOME_UNKNOWN (not retryable) and the same request goes on being
 *    retried in the background until an answer settles the map. A finish refused below the commit partition's vacuum
 *    horizon (TX_OUTCOME_UNKNOWN from the commit partition) can never be answered: the entry is dropped (see
 *    `forgetUnknowable`).
 *
 * Rollback (also the tx timeout, and a commit that cannot commit): the compare-and-set to FINISHING without a commitTs
 * (unless commit already installed one), then unlock-only cleanup for a tx that wrote nothing, else the same finish
 * request with `commit: false`. An abort can only end ABORTED (no commit was ever sent for the tx), so a rollback that
 * got no answer resolves anyway and keeps retrying in the background.
 *
 * If the compare-and-set is lost (recovery running on this very node decided the tx), the coordinator follows the
 * stored decision and cleans up its whole enlisted set with it.
 */

import { assert } from '../../core/assert.js';
import { asBasaltError, BasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { formatTimestamp } from '../../hlc/timestamp.js';
import { backoffMs } from '../../route/backoff.js';
import { sendToPrimary } from '../../route/send-to-primary.js';
import type { InflightWrites } from '../../storage/tx-state-storage.js';
import type { CarriedCommit, TxFinishRequest, TxOutcome } from '../core/messages.js';
import { expectKind } from '../core/messages.js';
import { mismatchOutcome, outcomeOfEntry, parseOutcome, waitForFinal } from '../core/outcome.js';
import { isFinal } from '../core/tx-state.js';
import type { BeginFinishResult } from '../core/tx-state-map.js';
import { type CoordinatorContext, pause } from './context.js';
import type { CoordinatedTx, Enlistment } from './coordinated-tx.js';
import { type CleanupTarget, cleanUp } from './coordinator-cleanup.js';

/** Names of the node counters bumped here. */
export const COORDINATOR_FINISH_COUNTERS = {
  /** Commits that sent a committing record in parallel with their writes' confirmation. */
  parallelCommits: 'coordinator.parallelCommits',
  /** Of those, commits whose writes the commit partition had to check (a confirmation failed). */
  parallelCommitChecks: 'coordinator.parallelCommitChecks',
} as const;

type DriveResult =
  | { readonly kind: 'outcome'; readonly outcome: TxOutcome }
  /** A parallel commit's record is stored, with this commitTs (no outcome yet). */
  | { readonly kind: 'committing'; readonly commitTs: HybridTimestamp }
  | { readonly kind: 'mismatch'; readonly outcome: TxOutcome }
  /** The commit partition answered TX_OUTCOME_UNKNOWN (the tx is past its vacuum horizon): it will never know. */
  | { readonly kind: 'unknown'; readonly error: BasaltError }
  | { readonly kind: 'exhausted'; readonly error: BasaltError | undefined }
  | { readonly kind: 'stopped' };

export class FinishDriver {
  constructor(
    private readonly ctx: CoordinatorContext,
    /** Called once the tx's outcome is settled (the coordinator forgets the tx). */
    private readonly onFinished: (tx: CoordinatedTx) => void,
  ) {}

  /** The commit flow; the tx is already marked finishing (new operations refused). */
  async commit(tx: CoordinatedTx): Promise<void> {
    await tx.idle();
    if (tx.abortCause !== undefined) return this.rollBackAndThrow(tx);
    assert(tx.uncertain.length === 0, 'a partition with an unknown outcome makes the tx abort-only');
    const inflight = this.ctx.settings.parallelCommit ? inflightWrites(tx) : undefined;
    if (inflight !== undefined) return this.commitInParallel(tx, inflight);
    const unconfirmed = await this.confirmWrites(tx);
    if (unconfirmed !== undefined) {
      tx.makeAbortOnly(unconfirmed);
      return this.rollBackAndThrow(tx);
    }
    // A lost-lock abort may have come in while the confirmations were awaited, with its decision (FINISHING without
    // commitTs) already installed: nothing else need carry it to the commit partition, so this commit does.
    if (tx.abortCause !== undefined) return this.rollBackAndThrow(tx);
    const commitTs = await this.startCommit(tx);
    if (commitTs === undefined) return;
    if (!tx.mayHaveWritten) return this.finishLocally(tx, { state: 'COMMITTED', commitTs });
    return this.finishDurably(tx, commitTs);
  }

  /**
   * One synchronous step: commitTs, the deadline check and FINISHING (rules 13, 15); then the lease check (rule 6).
   * The commitTs, or undefined when a stored decision was followed instead; throws when the tx was rolled back.
   */
  private async startCommit(tx: CoordinatedTx): Promise<HybridTimestamp | undefined> {
    const commitTs = this.ctx.clock.now();
    if (commitTs >= tx.deadline) {
      tx.makeAbortOnly(deadlineError(tx, commitTs));
      return this.rollBackAndThrow(tx);
    }
    // A value this tx read has expired by commitTs: at its commit it would read as absent (DESIGN §4b).
    if (tx.readExpiresAt !== undefined && commitTs >= tx.readExpiresAt) {
      tx.makeAbortOnly(readExpiredError(tx, commitTs, tx.readExpiresAt));
      return this.rollBackAndThrow(tx);
    }
    // A commit carrying writes stores commitTs as its lower bound: the commit partition takes the real one.
    const began = this.ctx.txStates.beginFinish(tx.id, {
      commitTimestamp: commitTs,
      ...(tx.carried !== undefined && { commitTsLowerBound: true }),
    });
    if (began.kind !== 'began') {
      await this.followStoredDecision(tx, began, true);
      return undefined;
    }
    tx.finishingInstalled = true;
    const leaseFailure = await this.checkLeases(tx, commitTs);
    if (leaseFailure !== undefined) {
      tx.makeAbortOnly(leaseFailure);
      return this.rollBackAndThrow(tx);
    }
    return commitTs;
  }

  /**
   * Parallel commit (DESIGN §4b "Fewer rounds per commit"; committing-settle.ts for the rule): commitTs and FINISHING
   * as above, before the writes answered early are confirmed (each write's proposal timestamp was absorbed with its
   * answer, and a tx write applies at that timestamp or not at all, so commitTs exceeds them); the leases checked;
   * then the committing record naming those writes goes to the commit partition while they are confirmed. Once the
   * record is stored and every write confirmed below commitTs, the tx is committed: that is reported, and the
   * confirmation replaces the record with COMMITTED in the background (the commit partition cleans up after it). If
   * a confirmation failed the commit partition checks the writes itself and decides; the outcome is reported.
   */
  private async commitInParallel(tx: CoordinatedTx, inflight: readonly InflightWrites[]): Promise<void> {
    const commitTs = await this.startCommit(tx);
    if (commitTs === undefined) return;
    const commitPartitionId = tx.commitPartitionId;
    assert(commitPartitionId !== undefined, 'a tx that wrote has a commit partition');
    const body: TxFinishRequest = { ...commitRequest(tx, commitPartitionId, commitTs), committing: { inflight } };
    const { finishAttemptsMax, retryBackoffMsMax } = this.ctx.settings;
    const [confirmed, staged] = await Promise.all([
      this.confirmWritesBelow(tx, commitTs),
      this.drive(tx, body, 1, finishAttemptsMax, retryBackoffMsMax),
    ]);
    this.ctx.counters?.add(COORDINATOR_FINISH_COUNTERS.parallelCommits);
    if (staged.kind !== 'committing') return this.conclude(tx, body, staged, true);
    const settled: TxFinishRequest = {
      kind: 'TxFinishRequest',
      txId: tx.id,
      commitPartitionId,
      commit: true,
      commitTs: staged.commitTs,
      enlisted: tx.finishEnlisted(),
      settle: confirmed ? 'confirmed' : 'check',
    };
    if (confirmed) {
      // Committed: the record and every write it names are durable, and the caller is told so now. This map goes
      // final only once COMMITTED replaced the record (confirmInBackground): until then a state request here waits or
      // answers "not visible", so nobody switches an intent of the tx on this map's word while the record is still
      // committing (a check of the writes would then miss that intent and decide ABORTED).
      this.ctx.clock.update(staged.commitTs);
      tx.outcome = { state: 'COMMITTED', commitTs: staged.commitTs };
      this.confirmInBackground(tx, settled);
      return;
    }
    this.ctx.counters?.add(COORDINATOR_FINISH_COUNTERS.parallelCommitChecks);
    const result = await this.drive(tx, settled, 1, finishAttemptsMax, retryBackoffMsMax);
    if (result.kind === 'mismatch' && result.outcome.state === 'ABORTED') {
      await this.settle(tx, result.outcome);
      throw new BasaltError('TX_ABORTED', `a write of tx ${tx.id} did not apply: its commit record was aborted`, {
        txId: tx.id,
        reason: 'write-unconfirmed',
      });
    }
    return this.conclude(tx, settled, result, true);
  }

  /** Every write answered early confirmed applied below commitTs (a parallel commit's condition). */
  private async confirmWritesBelow(tx: CoordinatedTx, commitTs: HybridTimestamp): Promise<boolean> {
    const pending = tx.enlistedPartitions.filter((e) => e.unconfirmed);
    const writeTs = await Promise.all(pending.map((e) => this.confirmWrite(tx, e)));
    return writeTs.every((ts) => typeof ts === 'bigint' && ts < commitTs);
  }

  /**
   * Sends a parallel commit's confirmation until the commit partition stored the outcome (its cleanup follows), then
   * settles the map with it. If no attempt gets an answer the record stays committing and this map FINISHING: whoever
   * meets the tx has the record settled by a check of its writes, which finds them applied. Only a stored ABORTED
   * would be a broken rule, and is reported.
   */
  private confirmInBackground(tx: CoordinatedTx, body: TxFinishRequest): void {
    const { finishAttemptsTotalMax, backgroundBackoffMsMax } = this.ctx.settings;
    this.drive(tx, body, 1, finishAttemptsTotalMax, backgroundBackoffMsMax)
      .then(async (result) => {
        if (result.kind !== 'outcome' && result.kind !== 'mismatch') return;
        await this.settle(tx, result.outcome);
        if (result.kind !== 'mismatch') return;
        const message = `committed tx ${tx.id} was stored ${result.outcome.state} by its commit partition`;
        this.ctx.onError(new BasaltError('INTERNAL', message, { txId: tx.id }));
      })
      .catch(this.ctx.onError);
  }

  /** The rollback flow (user rollback, tx timeout); the tx is already marked finishing. */
  async rollback(tx: CoordinatedTx): Promise<void> {
    await tx.idle();
    await this.abort(tx);
  }

  private async rollBackAndThrow(tx: CoordinatedTx): Promise<never> {
    const cause = tx.abortCause;
    assert(cause !== undefined, 'rolled back for a cause');
    try {
      await this.abort(tx);
    } catch (error) {
      this.ctx.onError(error);
    }
    throw rolledBackError(tx, cause);
  }

  private async abort(tx: CoordinatedTx): Promise<void> {
    if (!tx.finishingInstalled) {
      const began = this.ctx.txStates.beginFinish(tx.id);
      if (began.kind !== 'began') return this.followStoredDecision(tx, began, false);
      tx.finishingInstalled = true;
    }
    if (!tx.mayHaveWritten) return this.finishLocally(tx, { state: 'ABORTED' });
    return this.finishDurably(tx, undefined);
  }

  // ------------------------------------------------------------------------------------------ pipelined writes

  /**
   * Rules 4 and 6: every write answered before it applied is confirmed applied, and its effective timestamp absorbed,
   * before commitTs is taken. Undefined once all are; else the error to abort with (a write that applied as a no-op,
   * failed, or whose confirmation got no answer: rule 7).
   */
  private async confirmWrites(tx: CoordinatedTx): Promise<BasaltError | undefined> {
    const pending = tx.enlistedPartitions.filter((e) => e.unconfirmed);
    if (pending.length === 0) return undefined;
    const results = await Promise.all(pending.map((e) => this.confirmWrite(tx, e)));
    const failure = results.find((f) => typeof f !== 'bigint');
    if (failure === undefined || typeof failure === 'bigint') return undefined;
    return new BasaltError('TX_ABORTED', `a write of tx ${tx.id} did not apply: ${failure.error.toData().message}`, {
      txId: tx.id,
      reason: 'write-unconfirmed',
      partitionId: failure.partitionId,
      code: failure.error.code,
    });
  }

  private async confirmWrite(
    tx: CoordinatedTx,
    e: Enlistment,
  ): Promise<HybridTimestamp | { readonly partitionId: PartitionId; readonly error: BasaltError }> {
    try {
      const response = await this.ctx.request(
        e.primaryName,
        { kind: 'WriteConfirmRequest', partitionId: e.partitionId, txId: tx.id },
        { timeoutMs: this.ctx.settings.opRequestTimeoutMs, signal: this.ctx.signal },
      );
      const { writeTs } = expectKind(response, 'WriteConfirmResponse');
      this.ctx.clock.update(writeTs);
      e.unconfirmed = false;
      return writeTs;
    } catch (error) {
      return { partitionId: e.partitionId, error: asBasaltError(error) };
    }
  }

  // ------------------------------------------------------------------------------------------ lease check (rule 6)

  /** Undefined if every enlisted lease covers commitTs; else the error to abort with. */
  private async checkLeases(tx: CoordinatedTx, commitTs: HybridTimestamp): Promise<BasaltError | undefined> {
    const enlisted = tx.enlistedPartitions;
    const checks = enlisted.map((e) => (commitTs < e.expiration ? true : this.confirmLease(e, commitTs)));
    const results = await Promise.all(checks);
    const failed = enlisted.filter((_, i) => !results[i]);
    if (failed.length === 0) return undefined;
    return new BasaltError('TX_ABORTED', `the lease of ${failed.map((e) => e.partitionId).join(', ')} may have ended`, {
      txId: tx.id,
      reason: 'lease-expired',
      partitions: failed.map((e) => e.partitionId),
      commitTs: formatTimestamp(commitTs),
    });
  }

  private async confirmLease(e: Enlistment, commitTs: HybridTimestamp): Promise<boolean> {
    try {
      const response = await this.ctx.request(
        e.primaryName,
        { kind: 'LeaseConfirmRequest', partitionId: e.partitionId, token: e.token, commitTs },
        { timeoutMs: this.ctx.settings.finishRequestTimeoutMs, signal: this.ctx.signal },
      );
      return expectKind(response, 'LeaseConfirmResponse').confirmed === true;
    } catch {
      // No answer is no confirmation: abort (the safe side).
      return false;
    }
  }

  // ------------------------------------------------------------------------------------------ no writes: local finish

  private async finishLocally(tx: CoordinatedTx, outcome: TxOutcome): Promise<void> {
    await cleanUp(this.ctx, tx.id, everyTarget(tx), { unlockOnly: true, outcome });
    const commitTimestamp = outcome.state === 'COMMITTED' ? outcome.commitTs : undefined;
    this.ctx.txStates.update(tx.id, { state: outcome.state, commitTimestamp, reason: 'unlock-only' });
    this.ctx.txStates.remove(tx.id, 'unlock-only');
    tx.outcome = outcome;
    this.onFinished(tx);
  }

  // ------------------------------------------------------------------------------------------ durable finish

  private async finishDurably(tx: CoordinatedTx, commitTs: HybridTimestamp | undefined): Promise<void> {
    const commitPartitionId = tx.commitPartitionId;
    assert(commitPartitionId !== undefined, 'a tx that may have written has a commit partition');
    const body: TxFinishRequest =
      commitTs === undefined
        ? { kind: 'TxFinishRequest', txId: tx.id, commitPartitionId, commit: false, enlisted: tx.finishEnlisted() }
        : commitRequest(tx, commitPartitionId, commitTs);
    const { finishAttemptsMax, retryBackoffMsMax } = this.ctx.settings;
    const result = await this.drive(tx, body, 1, finishAttemptsMax, retryBackoffMsMax);
    return this.conclude(tx, body, result, true);
  }

  /** Acts on a finish result; `foreground`: the caller of commit/rollback is waiting for this result. */
  private async conclude(
    tx: CoordinatedTx,
    body: TxFinishRequest,
    result: DriveResult,
    foreground: boolean,
  ): Promise<void> {
    switch (result.kind) {
      case 'outcome':
        return this.settle(tx, result.outcome);
      case 'committing': {
        // A parallel commit's record answered a retry: the commit partition checks its writes and decides.
        const settled: TxFinishRequest = { ...withoutStaging(body), commitTs: result.commitTs, settle: 'check' };
        if (foreground) {
          const { finishAttemptsMax, retryBackoffMsMax } = this.ctx.settings;
          return this.conclude(
            tx,
            settled,
            await this.drive(tx, settled, 1, finishAttemptsMax, retryBackoffMsMax),
            true,
          );
        }
        this.continueInBackground(tx, settled);
        return;
      }
      case 'mismatch':
        await this.settle(tx, result.outcome);
        // Rule 14: whoever decided may have known only part of the enlisted set.
        await cleanUp(this.ctx, tx.id, everyTarget(tx), { unlockOnly: false, outcome: result.outcome });
        if (!foreground) return;
        // A carried commit the commit partition could not take (its locks or lease were lost, the bound was
        // reached) is aborted there: nothing committed, so the tx may run again.
        if (body.carried !== undefined && result.outcome.state === 'ABORTED') throw carriedRefusedError(tx);
        throw mismatchError(tx, body, result.outcome);
      case 'unknown':
        this.forgetUnknowable(tx);
        if (foreground && body.commit) throw outcomeUnknownError(tx, body, result.error);
        this.ctx.onError(result.error);
        return;
      case 'exhausted':
        if (!foreground) {
          this.ctx.onError(outcomeUnknownError(tx, body, result.error));
          return;
        }
        this.continueInBackground(tx, body);
        // An abort can only end ABORTED: a rollback need not wait for the answer.
        if (body.commit) throw outcomeUnknownError(tx, body, result.error);
        return;
      case 'stopped':
        throw new BasaltError('CANCELLED', `the coordinator stopped while finishing tx ${tx.id}`, { txId: tx.id });
    }
  }

  private continueInBackground(tx: CoordinatedTx, body: TxFinishRequest): void {
    const { finishAttemptsMax, finishAttemptsTotalMax, backgroundBackoffMsMax } = this.ctx.settings;
    this.drive(tx, body, finishAttemptsMax + 1, finishAttemptsTotalMax, backgroundBackoffMsMax)
      .then((result) => this.conclude(tx, body, result, false))
      .catch(this.ctx.onError);
  }

  /**
   * Sends the finish request (attempts `from`..`to`) to the commit partition's primary (route/send-to-primary.ts) until it
   * answers with an outcome: the request is idempotent (the same commitTs every time), so every failure but a
   * mismatch or a refusal below the vacuum horizon is retried.
   */
  private async drive(
    tx: CoordinatedTx,
    body: TxFinishRequest,
    from: number,
    to: number,
    backoffMaxMs: number,
  ): Promise<DriveResult> {
    const { ctx } = this;
    const { retryBackoffMsMin, finishRequestTimeoutMs } = ctx.settings;
    try {
      // Later attempts go on where the earlier ones stopped, backoff included.
      if (from > 1) await pause(ctx, backoffMs(from - 1, retryBackoffMsMin, backoffMaxMs));
    } catch {
      return { kind: 'stopped' };
    }
    if (ctx.signal.aborted) return { kind: 'stopped' };
    const first = tx.enlistment(body.commitPartitionId)?.primaryName;
    const routed = await sendToPrimary({
      partitionId: body.commitPartitionId,
      directory: ctx.placement.primaries,
      ...(first !== undefined && { first }),
      send: async (target) => {
        const options = { timeoutMs: finishRequestTimeoutMs, signal: ctx.signal };
        const response = expectKind(await ctx.request(target, body, options), 'TxFinishResponse');
        if (response.committing !== undefined) return { committing: response.committing };
        const outcome = parseOutcome(response.outcome);
        if (outcome === undefined) throw new BasaltError('INTERNAL', `malformed finish outcome from ${target}`);
        return outcome;
      },
      retries: (e) => mismatchOutcome(e) === undefined && e.code !== 'TX_OUTCOME_UNKNOWN' && !ctx.signal.aborted,
      attemptsMax: to - from + 1,
      backoffMs: (attempt) => backoffMs(from + attempt - 1, retryBackoffMsMin, backoffMaxMs),
      timers: ctx.timers,
      signal: ctx.signal,
    });
    if (routed.kind === 'ok') {
      const outcome = routed.response;
      if ('committing' in outcome) return { kind: 'committing', commitTs: outcome.committing };
      const matches = outcome.state === (body.commit ? 'COMMITTED' : 'ABORTED');
      return matches ? { kind: 'outcome', outcome } : { kind: 'mismatch', outcome };
    }
    const real = mismatchOutcome(routed.error);
    if (real !== undefined) return { kind: 'mismatch', outcome: real };
    if (routed.error.code === 'TX_OUTCOME_UNKNOWN') return { kind: 'unknown', error: routed.error };
    if (ctx.signal.aborted) return { kind: 'stopped' };
    return { kind: 'exhausted', error: routed.error };
  }

  /** The stored outcome arrived: the map goes final (rule 14), the tx is done. */
  private async settle(tx: CoordinatedTx, outcome: TxOutcome): Promise<void> {
    if (outcome.state === 'COMMITTED') this.ctx.clock.update(outcome.commitTs);
    const commitTimestamp = outcome.state === 'COMMITTED' ? outcome.commitTs : undefined;
    this.ctx.txStates.update(tx.id, { state: outcome.state, commitTimestamp, reason: 'finish-response' });
    // The finish response comes once the outcome is durable, before cleanup: the commit partition keeps its record
    // until cleanup completed, so once this entry's retention (starting now) has passed, a reader asking here gets
    // no state and goes on to the commit partition.
    this.ctx.txStates.markCleanupCompleted(tx.id);
    tx.outcome = outcome;
    this.onFinished(tx);
    const uncertain = uncertainTargets(tx);
    if (uncertain.length > 0) await cleanUp(this.ctx, tx.id, uncertain, { unlockOnly: false, outcome });
  }

  /**
   * The commit partition refused the finish below its vacuum horizon (rule 15): no finish of the tx is ever applied
   * there, so this coordinator can never learn the outcome, and its FINISHING entry would stay forever. It is
   * dropped: a reader asking here then gets no state and goes on to the commit partition, and an enlisted primary
   * still holding the tx's intents or locks learns "no record, below the horizon" there, which proves the tx never
   * committed, and aborts them (replica/inline-cleanup.ts).
   */
  private forgetUnknowable(tx: CoordinatedTx): void {
    this.ctx.txStates.remove(tx.id, 'finish-response');
    this.onFinished(tx);
  }

  // ------------------------------------------------------------------------------------------ a lost compare-and-set

  private async followStoredDecision(
    tx: CoordinatedTx,
    result: Exclude<BeginFinishResult, { kind: 'began' }>,
    committing: boolean,
  ): Promise<void> {
    if (result.kind === 'refused') {
      // Unreachable while the tx's own entry exists (it does from begin until it is final): say so loudly.
      throw new BasaltError('OVERLOADED', `the tx state map refused to finish tx ${tx.id}`, { txId: tx.id });
    }
    const { finishRequestTimeoutMs, finishAttemptsMax } = this.ctx.settings;
    const final = isFinal(result.entry.state)
      ? result.entry
      : await waitForFinal(this.ctx.txStates, this.ctx.timers, tx.id, finishRequestTimeoutMs * finishAttemptsMax);
    if (final === undefined) {
      if (committing) throw outcomeUnknownError(tx, undefined, undefined);
      return;
    }
    const outcome = outcomeOfEntry(final);
    tx.outcome = outcome;
    this.onFinished(tx);
    await cleanUp(this.ctx, tx.id, everyTarget(tx), { unlockOnly: false, outcome });
    if (committing && outcome.state !== 'COMMITTED') {
      throw new BasaltError('TX_ABORTED', `tx ${tx.id} was aborted by recovery`, { txId: tx.id, reason: 'recovered' });
    }
  }
}

/** How close to the bound the commit partition may take a carried commit's commitTs, at the earliest. */
export const CARRIED_COMMIT_MARGIN_MS = 500;

/**
 * The bound of a commit carrying writes to `commitPartitionId`: its commitTs must stay below the tx's deadline (rule
 * 15), below every other enlisted lease's expiration as last heard (rule 6: those leases then cover it), and below
 * the earliest expiry of a value the tx read.
 */
export function carriedBound(tx: CoordinatedTx, commitPartitionId: PartitionId): HybridTimestamp {
  // Also below the earliest expiry of a value the tx read (it must commit while what it read is still there).
  let bound = tx.readExpiresAt !== undefined && tx.readExpiresAt < tx.deadline ? tx.readExpiresAt : tx.deadline;
  for (const e of tx.enlistedPartitions) {
    if (e.partitionId !== commitPartitionId && e.expiration < bound) bound = e.expiration;
  }
  return bound;
}

/** The finish request of a commit at `commitTs`, with the writes it carries. */
function commitRequest(tx: CoordinatedTx, commitPartitionId: PartitionId, commitTs: HybridTimestamp): TxFinishRequest {
  return {
    kind: 'TxFinishRequest',
    txId: tx.id,
    commitPartitionId,
    commit: true,
    commitTs,
    enlisted: tx.finishEnlisted(),
    ...carriedOf(tx),
  };
}

/** The finish request's `carried`, for a commit that carries writes (none otherwise). */
function carriedOf(tx: CoordinatedTx): { readonly carried?: CarriedCommit } {
  const plan = tx.carried;
  if (plan === undefined) return {};
  const e = tx.enlistment(plan.partitionId);
  assert(e !== undefined && plan.partitionId === tx.commitPartitionId, 'writes are carried to the commit partition');
  return { carried: { token: e.token, bound: carriedBound(tx, plan.partitionId), writes: plan.writes } };
}

/**
 * The writes a parallel commit names as in flight: per partition, the keys of its writes answered before they
 * applied; undefined when there are none, or one partition's keys were not all noted, or too many (the commit then
 * confirms them before it sends its record).
 */
export function inflightWrites(tx: CoordinatedTx): InflightWrites[] | undefined {
  if (tx.commitPartitionId === undefined) return undefined;
  const out: InflightWrites[] = [];
  let keys = 0;
  for (const e of tx.enlistedPartitions) {
    if (!e.unconfirmed) continue;
    if (e.pipelinedKeys === undefined || e.pipelinedKeys.size === 0) return undefined;
    keys += e.pipelinedKeys.size;
    out.push({ partitionId: e.partitionId, keys: [...e.pipelinedKeys] });
  }
  return out.length > 0 && keys <= LIMITS.updateAllWritesMax ? out : undefined;
}

/** A finish request without the parts only its first, staging, attempt carries. */
function withoutStaging(body: TxFinishRequest): TxFinishRequest {
  const { carried: _carried, committing: _committing, ...rest } = body;
  return rest;
}

function carriedRefusedError(tx: CoordinatedTx): BasaltError {
  return new BasaltError('TX_ABORTED', `tx ${tx.id} could not commit its writes on its commit partition`, {
    txId: tx.id,
    reason: 'carried-commit-refused',
  });
}

function everyTarget(tx: CoordinatedTx): CleanupTarget[] {
  const enlisted = tx.enlistedPartitions.map((e) => ({ partitionId: e.partitionId, primary: e.primaryName }));
  return [...enlisted, ...uncertainTargets(tx)];
}

function uncertainTargets(tx: CoordinatedTx): CleanupTarget[] {
  return tx.uncertain.flatMap((u) => u.primaries.map((primary) => ({ partitionId: u.partitionId, primary })));
}

function deadlineError(tx: CoordinatedTx, commitTs: HybridTimestamp): BasaltError {
  return new BasaltError('TX_TIMEOUT', `tx ${tx.id} reached its deadline before it could commit`, {
    txId: tx.id,
    deadline: formatTimestamp(tx.deadline),
    commitTs: formatTimestamp(commitTs),
  });
}

function readExpiredError(tx: CoordinatedTx, commitTs: HybridTimestamp, expiresAt: HybridTimestamp): BasaltError {
  return new BasaltError('TX_ABORTED', `tx ${tx.id} read a value that expired before it could commit`, {
    txId: tx.id,
    reason: 'read-expired',
    expiresAt: formatTimestamp(expiresAt),
    commitTs: formatTimestamp(commitTs),
  });
}

/** The error commit reports for an abort-only tx: the cause's code (retryable or not, as the cause was). */
export function rolledBackError(tx: CoordinatedTx, cause: BasaltError): BasaltError {
  const message = `tx ${tx.id} was rolled back: ${cause.toData().message}`;
  return new BasaltError(cause.code, message, { ...cause.details, txId: tx.id }, { cause });
}

function mismatchError(tx: CoordinatedTx, body: TxFinishRequest, outcome: TxOutcome): BasaltError {
  const wanted = body.commit ? 'COMMITTED' : 'ABORTED';
  return new BasaltError(
    'TX_MISMATCHING_OUTCOME',
    `tx ${tx.id} is ${outcome.state}, not ${wanted}`,
    { txId: tx.id, outcome },
    { hint: { kind: 'mismatched-outcome', outcome } },
  );
}

function outcomeUnknownError(
  tx: CoordinatedTx,
  body: TxFinishRequest | undefined,
  cause: BasaltError | undefined,
): BasaltError {
  const details: Record<string, unknown> = { txId: tx.id };
  if (body?.commitTs !== undefined) details['commitTs'] = formatTimestamp(body.commitTs);
  const why = cause === undefined ? '' : `: ${cause.toData().message}`;
  return new BasaltError('TX_OUTCOME_UNKNOWN', `the outcome of tx ${tx.id} is unknown${why}`, details, { cause });
}
