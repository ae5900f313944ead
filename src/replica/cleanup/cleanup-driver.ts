/**
 * The commit partition's cleanup driver (ignite3-protocol.md §7.6–7.7; DESIGN §2 "Commit acknowledgement", "Vacuum").
 * Once a tx's outcome is durable on its commit partition, that partition's primary cleans up every enlisted partition
 * (intents switched, locks released) and then proposes TxCleanupCompleted, which lets vacuum remove the record later.
 * The finish handler starts a run after answering the coordinator, recovery after deciding, and the rescan below
 * whenever a record still owes one. The coordinator's answer never waits for a run.
 *
 * A run: enlisted partitions are grouped by their primary node (a hint first: the coordinator's enlistment, else the
 * locator), one TxCleanupRequest per node; partitions not reported cleaned (PRIMARY_MISS, timeout, failure) go next
 * to the holder their miss names, else to the primary the locator finds again (route/send-to-primary.ts's rule), and are
 * retried after a doubling backoff capped at `cleanupBackoffMsMax`, for at most `cleanupAttemptsMax` rounds. A run
 * also ends once this replica no longer acts as the commit partition's primary (the next primary re-drives on gaining
 * primacy). Concurrent runs of one tx share one: a caller that joins a run with partitions it does not clean yet adds
 * them to it (each target gets its own `cleanupAttemptsMax` rounds), or, once its rounds are over, gets a run of its
 * own after it. A recovery may learn a partition only from a reporter, after another caller started the run, and
 * the partition would otherwise stay unclean until somebody meets its intents.
 *
 * A run proposes TxCleanupCompleted only if its targets covered every partition the durable record names: vacuum
 * and rule 15's inference rely on "cleanup completed" meaning the whole enlisted set, never just the partitions a
 * later caller added.
 *
 * Never given up: a record stays "cleanup not completed" until TxCleanupCompleted applies, and every
 * `cleanupRescanIntervalMs` the driver scans each commit partition this node is primary of for such records that no
 * run is cleaning now, starting runs for at most `cleanupRescanBatchMax` of them per partition per pass (the scan
 * resumes after the last one next pass, and wraps around at the end). `recover` runs the same scan to its end on
 * gaining primacy. Meanwhile readers resolve the intents through the map and the commit partition, and a conflicting
 * request cleans a finished holder in line (inline-cleanup.ts).
 */

import { assert } from '../../core/assert.js';
import { type CounterSink, NO_COUNTERS } from '../../core/counters.js';
import { BasaltError, missHolder } from '../../core/errors.js';
import type { NodeName, PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { sleep, type TimerHandle, type Timers } from '../../env/timers.js';
import { locateOr, type PrimaryDirectory } from '../../route/primary-directory.js';
import { runRounds, sendRound } from '../../route/rounds-by-node.js';
import type { StoredTxMeta } from '../../storage/tx-state-storage.js';
import type { TxCleanupRequest, TxCleanupResponse, TxOutcome } from '../../tx/core/messages.js';
import { proposeCleanupCompleted } from '../partition/coalesced-proposals.js';
import type { HostedPartitions } from '../partition/partition-directory.js';
import { assertHosted, type PartitionReplica } from '../partition/partition-replica.js';
import { isTrueOutcome, outcomeOfRecord } from '../resolution/answers.js';

/** Names of the node counters bumped here. */
export const CLEANUP_COUNTERS = {
  /** Cleanup runs the rescan started again for finished txs whose cleanup had not completed. */
  rescanRuns: 'cleanup.rescanRuns',
} as const;

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

/** A partition to clean, with where to send first (the coordinator's enlistment hint), if known. */
export interface CleanupTargetInput {
  readonly partitionId: PartitionId;
  readonly hint?: NodeName;
}

export interface CleanupDriverOptions {
  readonly partitions: HostedPartitions;
  readonly sender: CleanupSender;
  readonly locator: PrimaryDirectory;
  readonly timers: Timers;
  /** Background failures (a run that ended unfinished, TxCleanupCompleted not applied). */
  readonly onError?: (error: unknown) => void;
  readonly cleanupAttemptsMax?: number;
  readonly cleanupBackoffMsMin?: number;
  readonly cleanupBackoffMsMax?: number;
  readonly finishesInFlightMax?: number;
  readonly rescanIntervalMs?: number;
  readonly rescanBatchMax?: number;
  readonly counters?: CounterSink;
}

interface CleanupTarget {
  readonly partitionId: PartitionId;
  /** Where to send next: the hint, or the last located primary; undefined asks the locator. */
  hint: NodeName | undefined;
  /** Rounds this target was sent in (at most `cleanupAttemptsMax`). */
  rounds: number;
}

/** What one run cleans; its callers share it. */
interface Cleaning {
  /** Targets not reported cleaned yet; a joining caller adds its own while the run still has rounds to go. */
  readonly pending: Map<PartitionId, CleanupTarget>;
  /** Every partition the run was asked to clean. */
  readonly targets: Set<PartitionId>;
  /** False once the run sends no more rounds: a later target needs a run of its own. */
  open: boolean;
}

interface Run {
  readonly cleaning: Cleaning;
  readonly promise: Promise<boolean>;
}

export class CleanupDriver {
  private readonly o: CleanupDriverOptions;
  private readonly onError: (error: unknown) => void;
  private readonly attemptsMax: number;
  private readonly backoffMsMin: number;
  private readonly backoffMsMax: number;
  private readonly inFlightMax: number;
  private readonly rescanIntervalMs: number;
  private readonly rescanBatchMax: number;
  private readonly counters: CounterSink;
  /** Runs in progress, by tx: finishes, recoveries and rescans of one tx share one. */
  private readonly runs = new Map<TxId, Run>();
  /** Per commit partition: the last tx a rescan pass started from (the next pass resumes after it). */
  private readonly rescanCursor = new Map<PartitionId, TxId>();
  private timer: TimerHandle | undefined;
  private stopped = false;

  constructor(options: CleanupDriverOptions) {
    this.o = options;
    this.onError = options.onError ?? (() => {});
    this.attemptsMax = options.cleanupAttemptsMax ?? LIMITS.cleanupAttemptsMax;
    this.backoffMsMin = options.cleanupBackoffMsMin ?? LIMITS.cleanupBackoffMsMin;
    this.backoffMsMax = options.cleanupBackoffMsMax ?? LIMITS.cleanupBackoffMsMax;
    this.inFlightMax = options.finishesInFlightMax ?? LIMITS.finishesInFlightMax;
    this.rescanIntervalMs = options.rescanIntervalMs ?? LIMITS.cleanupRescanIntervalMs;
    this.rescanBatchMax = options.rescanBatchMax ?? LIMITS.cleanupRescanBatchMax;
    this.counters = options.counters ?? NO_COUNTERS;
  }

  get runsInFlight(): number {
    return this.runs.size;
  }

  /** Starts the periodic rescan (idempotent). */
  start(): void {
    if (this.timer !== undefined || this.stopped) return;
    this.timer = this.o.timers.setTimer(() => {
      this.timer = undefined;
      if (this.stopped) return;
      for (const p of this.o.partitions.hosted()) this.rescan(p);
      this.start();
    }, this.rescanIntervalMs);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.o.timers.clearTimer(this.timer);
    this.timer = undefined;
  }

  /**
   * Runs (or joins) the cleanup of `txId`; resolves true once every target partition's primary reported it cleaned
   * (TxCleanupCompleted is then proposed in the background if the targets covered the record's enlisted set), false
   * if the run ended unfinished (the record stays "not cleaned up" for the rescan). A joined run cleans the joiner's
   * targets too (see the module header). Rejects OVERLOADED when too many runs are in progress.
   */
  ensureCleanup(
    p: PartitionReplica,
    txId: TxId,
    outcome: TxOutcome,
    targets: readonly CleanupTargetInput[],
  ): Promise<boolean> {
    // Rule 11: a cleanup ends the tx with its true outcome (checked again as each round builds its request).
    assert(isTrueOutcome(outcome), "a cleanup's outcome is ABORTED, or COMMITTED with its commitTs", txId);
    const running = this.runs.get(txId);
    if (running !== undefined) return this.join(running, p, txId, outcome, targets);
    if (this.runs.size >= this.inFlightMax) {
      return Promise.reject(new BasaltError('OVERLOADED', 'too many cleanups in progress', { txId }));
    }
    const pending = new Map<PartitionId, CleanupTarget>(
      targets.map((t) => [t.partitionId, { partitionId: t.partitionId, hint: t.hint, rounds: 0 }]),
    );
    const cleaning: Cleaning = { pending, targets: new Set(pending.keys()), open: true };
    const promise = this.run(p, txId, outcome, cleaning)
      .then((done) => {
        assert(!done || cleaning.pending.size === 0, 'a run is done only once every target reported cleaned', txId);
        if (done && coversRecord(p, txId, cleaning.targets)) void this.markCleaned(p, txId);
        return done;
      })
      .finally(() => this.runs.delete(txId));
    this.runs.set(txId, { cleaning, promise });
    return promise;
  }

  /** A caller joins `running`: the partitions it does not clean yet are added to it, or cleaned by a run after it. */
  private join(
    running: Run,
    p: PartitionReplica,
    txId: TxId,
    outcome: TxOutcome,
    targets: readonly CleanupTargetInput[],
  ): Promise<boolean> {
    const { cleaning } = running;
    const added = targets.filter((t) => !cleaning.targets.has(t.partitionId));
    if (added.length === 0) return running.promise;
    if (!cleaning.open) {
      // The run sends no more rounds: the added partitions get a run of their own once it is over.
      return running.promise.then((done) => this.ensureCleanup(p, txId, outcome, added).then((also) => done && also));
    }
    for (const t of added) {
      cleaning.targets.add(t.partitionId);
      cleaning.pending.set(t.partitionId, { partitionId: t.partitionId, hint: t.hint, rounds: 0 });
    }
    return running.promise;
  }

  /**
   * On gaining primacy of commit partition `partitionId`: starts a run for every finished record whose cleanup did
   * not complete (from durable state; primaries are located afresh). Resolves with the number of txs fully cleaned.
   */
  async recover(partitionId: PartitionId): Promise<number> {
    const p = assertHosted(this.o.partitions.get(partitionId), partitionId);
    let cleaned = 0;
    let after: TxId | undefined;
    for (;;) {
      const page = p.txState.finishedNotCleanedUp(after, LIMITS.txStateListMax);
      const done = await Promise.all(page.map((record) => this.runFor(p, record)));
      cleaned += done.filter(Boolean).length;
      const last = page.at(-1);
      if (last === undefined || page.length < LIMITS.txStateListMax) return cleaned;
      after = last.txId;
    }
  }

  /**
   * One rescan pass over `p` if this replica acts as its primary: runs for up to `rescanBatchMax` records whose
   * cleanup has not completed and which no run is cleaning now. Returns the number of runs started.
   */
  rescan(p: PartitionReplica): number {
    if (p.checkPrimary(p.clock.current()).kind !== 'ok') return 0;
    const page = p.txState.finishedNotCleanedUp(this.rescanCursor.get(p.partitionId), this.rescanBatchMax);
    const last = page.at(-1);
    if (last === undefined || page.length < this.rescanBatchMax) this.rescanCursor.delete(p.partitionId);
    else this.rescanCursor.set(p.partitionId, last.txId);
    let started = 0;
    for (const record of page) {
      if (this.runs.has(record.txId)) continue;
      void this.runFor(p, record);
      started++;
    }
    if (started > 0) this.counters.add(CLEANUP_COUNTERS.rescanRuns, started);
    return started;
  }

  private runFor(p: PartitionReplica, record: StoredTxMeta): Promise<boolean> {
    const targets = record.enlistedPartitions.map((partitionId) => ({ partitionId }));
    return this.ensureCleanup(p, record.txId, outcomeOfRecord(record), targets).catch((error: unknown) => {
      this.onError(error);
      return false;
    });
  }

  /**
   * Rounds (route/rounds-by-node.ts) until every target is cleaned or has had its `attemptsMax` rounds. `pending` may
   * grow between rounds (a joining caller); the run closes in the same synchronous step in which it decides to send no
   * more rounds.
   */
  private async run(p: PartitionReplica, txId: TxId, outcome: TxOutcome, cleaning: Cleaning): Promise<boolean> {
    const { pending } = cleaning;
    // Closed in the step that decides no more rounds: a caller joining after the decision, before the rounds' promise
    // settles, must get a run of its own.
    const unlessClosed = (more: boolean): boolean => {
      if (!more) cleaning.open = false;
      return more;
    };
    const ended = await runRounds(1, {
      due: () => unlessClosed(this.due(pending).size > 0),
      // A deposed primary stops: its successor re-drives the record on gaining primacy.
      proceed: () => unlessClosed(this.actsFor(p)),
      pause: (ms) => sleep(this.o.timers, ms),
      round: () => this.round(txId, outcome, cleaning),
      backoffMsMin: this.backoffMsMin,
      backoffMsMax: this.backoffMsMax,
    });
    assert(!cleaning.open, 'a run closed when it decided to send no more rounds', txId);
    if (ended === 'stopped') return false;
    if (pending.size === 0) return true;
    for (const t of pending.values()) {
      assert(t.rounds >= this.attemptsMax, 'a run gives up only on targets that had all their rounds', txId, t.rounds);
    }
    this.onError(
      new BasaltError('TIMEOUT', `cleanup of ${txId} unfinished after ${this.attemptsMax} rounds; the rescan retries`, {
        txId,
        pending: [...pending.keys()],
      }),
    );
    return false;
  }

  /** One round over the targets with rounds left; a target with no known primary spends its round unsent. */
  private async round(txId: TxId, outcome: TxOutcome, cleaning: Cleaning): Promise<void> {
    const { pending } = cleaning;
    const due = this.due(pending);
    for (const t of due.values()) {
      t.rounds++;
      assert(t.rounds <= this.attemptsMax, 'a target is sent in at most cleanupAttemptsMax rounds', txId, t.rounds);
      assert(cleaning.targets.has(t.partitionId), 'a run sends only to partitions it was asked to clean', txId);
    }
    await this.locateMissing(due);
    const sent = [...due.values()].flatMap((t) =>
      t.hint === undefined ? [] : [{ partitionId: t.partitionId, node: t.hint }],
    );
    const send = async (node: NodeName, partitions: readonly PartitionId[]): Promise<readonly PartitionId[]> => {
      assert(isTrueOutcome(outcome), "a cleanup request carries the tx's true outcome", txId);
      const body: TxCleanupRequest = { kind: 'TxCleanupRequest', txId, partitions, unlockOnly: false, outcome };
      return (await this.o.sender.request(node, body)).cleaned;
    };
    const failed = await sendRound(sent, send, this.o.locator);
    const notDone = new Set(failed.map((f) => f.partitionId));
    for (const t of sent) if (!notDone.has(t.partitionId)) pending.delete(t.partitionId);
    for (const f of failed) {
      // Not its primary any more (or unreachable): the holder a miss of this partition names, else the locator,
      // which learns the holder, or, on any other failure, not to guess the node asked first again.
      const target = pending.get(f.partitionId);
      if (target !== undefined) target.hint = f.hinted;
      if (f.error !== undefined && missHolder(f.error) === undefined) this.o.locator.forget?.(f.partitionId, f.node);
    }
  }

  /** The targets with rounds left. */
  private due(pending: ReadonlyMap<PartitionId, CleanupTarget>): Map<PartitionId, CleanupTarget> {
    return new Map([...pending].filter(([, t]) => t.rounds < this.attemptsMax));
  }

  private actsFor(p: PartitionReplica): boolean {
    return (
      !this.stopped && this.o.partitions.get(p.partitionId) === p && p.checkPrimary(p.clock.current()).kind === 'ok'
    );
  }

  private async locateMissing(pending: Map<PartitionId, CleanupTarget>): Promise<void> {
    await Promise.all(
      [...pending.values()]
        .filter((t) => t.hint === undefined)
        .map(async (t) => {
          t.hint = locateOr(this.o.locator, t.partitionId, undefined);
        }),
    );
  }

  private async markCleaned(p: PartitionReplica, txId: TxId): Promise<void> {
    try {
      await proposeCleanupCompleted(p, txId);
    } catch (error) {
      // The record stays "not cleaned up": the rescan runs cleanup again (idempotent) and marks it.
      this.onError(error);
    }
  }
}

/** True if `targets` include every partition the tx's durable record on `p` names (false without a record). */
function coversRecord(p: PartitionReplica, txId: TxId, targets: ReadonlySet<PartitionId>): boolean {
  return p.txState.get(txId)?.enlistedPartitions.every((partitionId) => targets.has(partitionId)) ?? false;
}
