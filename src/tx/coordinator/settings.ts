/**
 * The coordinator's settings: every timeout and retry loop of its flows bounded by a named limit (core/limits.ts),
 * resolved and checked once when the coordinator is built.
 */
import { BasaltError } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import { TX_ID_TIMEOUT_MS_MAX } from '../core/tx-id.js';

/** Tuning of a node's transaction coordinator; every field is optional and defaults to its value in LIMITS. */
export interface TxCoordinatorOptions {
  /** Tx timeout: the deadline is beginTs + this (rule 15); must be the same on every node of the cluster. */
  readonly txTimeoutMs?: number;
  /**
   * Largest timeout `begin({ timeoutMs })` accepts. The deadline itself travels in the tx id, so nodes need not agree
   * on this bound; keep it the same everywhere anyway, so that a client sees one limit.
   */
  readonly txTimeoutMsMax?: number;
  /** Timeout of one read-write operation request (default 15 s); above a primary's lock wait, so a lock wait ends first. */
  readonly opRequestTimeoutMs?: number;
  /** Timeout of one TxFinishRequest or LeaseConfirmRequest (default 10 s). */
  readonly finishRequestTimeoutMs?: number;
  /** Attempts of a tx's first request to a partition, and of a one-phase write, following PRIMARY_MISS (default 8). */
  readonly enlistAttemptsMax?: number;
  /** Finish attempts before commit reports TX_OUTCOME_UNKNOWN; the retries then go on in the background. */
  readonly finishAttemptsMax?: number;
  /** Finish attempts in all, foreground and background, after which the coordinator stops (default 10,000). */
  readonly finishAttemptsTotalMax?: number;
  /** Rounds of the coordinator's own cleanups (unlock-only, after a mismatch) per target partition (default 30). */
  readonly cleanupAttemptsMax?: number;
  /** Timeout of one TxCleanupRequest the coordinator sends (default 5 s). */
  readonly cleanupRequestTimeoutMs?: number;
  /** First pause between retries of one request (enlistment, finish); pauses double up to `retryBackoffMsMax` (20 ms). */
  readonly retryBackoffMsMin?: number;
  /** Longest pause between retries of one request (default 1 s). */
  readonly retryBackoffMsMax?: number;
  /** Longest pause between the background retries of a finish whose commit reported TX_OUTCOME_UNKNOWN (5 s). */
  readonly backgroundBackoffMsMax?: number;
  /** How long a state request for a FINISHING tx (commitTs ≤ readTs) waits for the outcome. */
  readonly stateWaitMs?: number;
  /**
   * Writes of a tx are sent `pipelined` (default true): a primary answers once the write is proposed, and commit
   * confirms every such write's apply result before it takes commitTs (WriteConfirmRequest).
   */
  readonly pipelinedWrites?: boolean;
  /**
   * A commit with writes (commitWith) carries those to the commit partition where the tx holds the rows X-locked and
   * wrote nothing yet (default true): they are written in the finish's own Raft entry, at the commitTs the commit
   * partition takes then (DESIGN §4b "Fewer rounds per commit"), instead of a write round and an intent switch.
   */
  readonly carriedCommit?: boolean;
  /**
   * Parallel commit (default false; DESIGN §4b "Fewer rounds per commit"): a commit whose writes are still being
   * confirmed sends its commit record as a committing record naming them, in parallel with their confirmation,
   * instead of after it; commitWith then sends the writes pipelined. The tx is committed once the record and every
   * named write are; COMMITTED replaces the record in the background.
   */
  readonly parallelCommit?: boolean;
}

export type CoordinatorSettings = Required<TxCoordinatorOptions>;

export function resolveSettings(options: TxCoordinatorOptions = {}): CoordinatorSettings {
  const settings: CoordinatorSettings = {
    txTimeoutMs: options.txTimeoutMs ?? LIMITS.txTimeoutMsDefault,
    txTimeoutMsMax: options.txTimeoutMsMax ?? LIMITS.txTimeoutMsMax,
    opRequestTimeoutMs: options.opRequestTimeoutMs ?? LIMITS.txOpRequestTimeoutMsDefault,
    finishRequestTimeoutMs: options.finishRequestTimeoutMs ?? LIMITS.txFinishRequestTimeoutMs,
    enlistAttemptsMax: options.enlistAttemptsMax ?? LIMITS.txEnlistAttemptsMax,
    finishAttemptsMax: options.finishAttemptsMax ?? LIMITS.txFinishAttemptsMax,
    finishAttemptsTotalMax: options.finishAttemptsTotalMax ?? LIMITS.txFinishAttemptsTotalMax,
    // The coordinator's own cleanups (unlock-only, after a mismatch, uncertain partitions) retry like the commit
    // partition's.
    cleanupAttemptsMax: options.cleanupAttemptsMax ?? LIMITS.cleanupAttemptsMax,
    cleanupRequestTimeoutMs: options.cleanupRequestTimeoutMs ?? LIMITS.cleanupRequestTimeoutMs,
    retryBackoffMsMin: options.retryBackoffMsMin ?? LIMITS.txRetryBackoffMsMin,
    retryBackoffMsMax: options.retryBackoffMsMax ?? LIMITS.txRetryBackoffMsMax,
    backgroundBackoffMsMax: options.backgroundBackoffMsMax ?? LIMITS.txBackgroundBackoffMsMax,
    stateWaitMs: options.stateWaitMs ?? LIMITS.txStateWaitMsDefault,
    pipelinedWrites: options.pipelinedWrites ?? true,
    carriedCommit: options.carriedCommit ?? true,
    parallelCommit: options.parallelCommit ?? false,
  };
  const { pipelinedWrites, carriedCommit, parallelCommit, ...counts } = settings;
  for (const [name, flag] of Object.entries({ pipelinedWrites, carriedCommit, parallelCommit })) {
    if (typeof flag !== 'boolean') {
      throw new BasaltError('INVALID_ARGUMENT', `coordinator option ${name} must be a boolean`);
    }
  }
  for (const [name, value] of Object.entries(counts)) {
    if (!Number.isInteger(value) || value < 1) {
      throw new BasaltError('INVALID_ARGUMENT', `coordinator option ${name} must be a positive integer`, { value });
    }
  }
  if (settings.txTimeoutMsMax > TX_ID_TIMEOUT_MS_MAX) {
    throw new BasaltError('INVALID_ARGUMENT', `txTimeoutMsMax must be at most ${TX_ID_TIMEOUT_MS_MAX}`);
  }
  if (settings.finishAttemptsTotalMax < settings.finishAttemptsMax) {
    throw new BasaltError('INVALID_ARGUMENT', 'finishAttemptsTotalMax must be at least finishAttemptsMax');
  }
  return settings;
}
