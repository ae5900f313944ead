/**
 * The coordinator's settings: every timeout and retry loop of its flows bounded by a named limit (core/limits.ts),
 * resolved and checked once when the coordinator is built.
 */
import { BasaltError } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import { TX_ID_TIMEOUT_MS_MAX } from '../core/tx-id.js';

export interface TxCoordinatorOptions {
  /** Tx timeout: the deadline is beginTs + this (rule 15); must be the same on every node of the cluster. */
  readonly txTimeoutMs?: number;
  /**
   * Largest timeout `begin({ timeoutMs })` accepts. The deadline itself travels in the tx id, so nodes need not agree
   * on this bound; keep it the same everywhere anyway, so that a client sees one limit.
   */
  readonly txTimeoutMsMax?: number;
  readonly opRequestTimeoutMs?: number;
  readonly finishRequestTimeoutMs?: number;
  readonly enlistAttemptsMax?: number;
  /** Finish attempts before commit reports TX_OUTCOME_UNKNOWN; the retries then go on in the background. */
  readonly finishAttemptsMax?: number;
  readonly finishAttemptsTotalMax?: number;
  readonly cleanupAttemptsMax?: number;
  readonly cleanupRequestTimeoutMs?: number;
  readonly retryBackoffMsMin?: number;
  readonly retryBackoffMsMax?: number;
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
  };
  const { pipelinedWrites, carriedCommit, ...counts } = settings;
  for (const [name, flag] of Object.entries({ pipelinedWrites, carriedCommit })) {
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
