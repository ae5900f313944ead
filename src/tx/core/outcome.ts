/**
 * A transaction's outcome as the protocol carries it (`TxOutcome`, messages.ts): checked when it arrives from the
 * wire, read from a TX_MISMATCHING_OUTCOME's hint (the outcome the commit partition stored, rule 14), taken from a
 * final tx state map entry, or awaited until the map holds one.
 */
import { assert } from '../../core/assert.js';
import { hintOf, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, TxId } from '../../core/ids.js';
import type { TimerHandle, Timers } from '../../env/timers.js';
import { MAX_TIMESTAMP, MIN_TIMESTAMP } from '../../hlc/timestamp.js';
import type { TxOutcome } from './messages.js';
import { isFinal } from './tx-state.js';
import type { TxStateEntry, TxStateMap } from './tx-state-map.js';

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
