/**
 * Shared pieces of the coordinator's flows: its resolved settings (every retry loop bounded by a named limit), the
 * context the flows run in and its routing to primaries (primary-route.ts: where to go after a PRIMARY_MISS, and
 * whether a failed request certainly did nothing), backoff, and the outcome a TX_MISMATCHING_OUTCOME carries (the one
 * the commit partition stored, rule 14).
 */
import { assert } from '../core/assert.js';
import { BasaltError, hintOf, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { sleep, type TimerHandle, type Timers } from '../env/timers.js';
import type { HybridClock } from '../hlc/hybrid-clock.js';
import { MAX_TIMESTAMP, MIN_TIMESTAMP } from '../hlc/timestamp.js';
import type { CoordinatorSelf, TxPlacement, TxRequestFn } from './coordinator-ports.js';
import type { TxOutcome } from './messages.js';
import type { PrimaryDirectory } from './primary-route.js';
import { TX_ID_TIMEOUT_MS_MAX } from './tx-id.js';
import { isFinal } from './tx-state.js';
import type { TxStateEntry, TxStateMap } from './tx-state-map.js';

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
  };
  const { pipelinedWrites, ...counts } = settings;
  if (typeof pipelinedWrites !== 'boolean') {
    throw new BasaltError('INVALID_ARGUMENT', 'coordinator option pipelinedWrites must be a boolean');
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

/** What the coordinator's flows run with. `signal` aborts when the coordinator stops. */
export interface CoordinatorContext {
  readonly self: CoordinatorSelf;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly request: TxRequestFn;
  readonly placement: TxPlacement;
  readonly settings: CoordinatorSettings;
  readonly signal: AbortSignal;
  readonly onError: (error: unknown) => void;
  /** The node's counters (structurally; the node layer sits above this one). */
  readonly counters?: { add(name: string, n?: number): void };
}

/** Attempt 1 waits `minMs`; each later attempt doubles it, up to `maxMs`. */
export { backoffMs } from './retry.js';

/** Sleeps on the injected timers; rejects with CANCELLED once the coordinator stops. */
export async function pause(ctx: CoordinatorContext, delayMs: number): Promise<void> {
  await sleep(ctx.timers, delayMs, ctx.signal);
}

export { asBasaltError } from '../core/errors.js';
export { isUnexecuted, mayResendAsNew } from './primary-route.js';

/** The placement as a route's directory: its best guess, and what it learns from responses and misses. */
export function placementDirectory(placement: TxPlacement): PrimaryDirectory {
  return {
    locate: (partitionId) => placement.primaryHint(partitionId),
    note: (partitionId, name) => placement.notePrimary(partitionId, name),
  };
}

/** Checks an outcome received from the wire; undefined if it is not one. */
export function parseOutcome(value: unknown): TxOutcome | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as { state?: unknown; commitTs?: unknown };
  if (v.state === 'ABORTED') return { state: 'ABORTED' };
  if (v.state === 'COMMITTED' && isTimestamp(v.commitTs)) return { state: 'COMMITTED', commitTs: v.commitTs };
  return undefined;
}

/** The outcome a TX_MISMATCHING_OUTCOME error carries (its hint, checked when it was decoded). */
export function mismatchOutcome(error: unknown): TxOutcome | undefined {
  if (!isBasaltError(error, 'TX_MISMATCHING_OUTCOME')) return undefined;
  return hintOf(error, 'mismatched-outcome')?.outcome;
}

export function isTimestamp(value: unknown): value is HybridTimestamp {
  return typeof value === 'bigint' && value >= MIN_TIMESTAMP && value < MAX_TIMESTAMP;
}

/** A response of the wrong kind is a protocol violation by the peer (never expected from a correct node). */
export function expectKind<R extends { readonly kind: string }>(response: R, kind: R['kind']): R {
  if (response?.kind !== kind) {
    throw new BasaltError('INTERNAL', `expected a ${kind}, got ${String(response?.kind)}`);
  }
  return response;
}

/**
 * Waits until the map holds a final entry for `txId`, at most `timeoutMs`; undefined if it did not become final in
 * time (or the wait could not be registered). Never a PENDING substitute: callers treat undefined as "unknown".
 */
export function waitForFinal(
  txStates: TxStateMap,
  timers: Timers,
  txId: TxId,
  timeoutMs: number,
): Promise<TxStateEntry | undefined> {
  return new Promise((resolve) => {
    let timer: TimerHandle | undefined;
    const wait = txStates.whenFinal(txId, (entry) => {
      if (timer !== undefined) timers.clearTimer(timer);
      resolve(entry);
    });
    switch (wait.kind) {
      case 'final':
        resolve(wait.entry);
        return;
      case 'refused':
        resolve(undefined);
        return;
      case 'waiting':
        timer = timers.setTimer(() => {
          wait.cancel();
          resolve(undefined);
        }, timeoutMs);
        return;
    }
  });
}

/** The outcome a final entry records. */
export function outcomeOfEntry(entry: TxStateEntry): TxOutcome {
  assert(isFinal(entry.state), 'an outcome comes from a final entry');
  if (entry.state === 'ABORTED') return { state: 'ABORTED' };
  assert(entry.commitTimestamp !== undefined, 'COMMITTED carries its commitTs');
  return { state: 'COMMITTED', commitTs: entry.commitTimestamp };
}

/** Indexes of `items` grouped by partition, in first-seen order (each group keeps the items' order). */
export function groupByPartition<T>(
  items: readonly T[],
  partitionOf: (item: T) => PartitionId,
): Map<PartitionId, number[]> {
  const groups = new Map<PartitionId, number[]>();
  items.forEach((item, index) => {
    const p = partitionOf(item);
    const list = groups.get(p) ?? [];
    list.push(index);
    groups.set(p, list);
  });
  return groups;
}

/**
 * Waits for every promise (so that no request of an operation is still in flight when it ends, rule 6), then
 * rethrows the first failure.
 */
export async function settleAll<T>(promises: readonly Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(promises);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}
