/**
 * The coordinator's answer to a TxStateCoordinatorRequest (write intent resolution, coordinator path; DESIGN §2b
 * rules 8, 11, 12):
 * - the clock absorbs the reader's readTs *before* the map is read: a PENDING answer then guarantees that any later
 *   commitTs of the tx (taken from this clock) exceeds readTs;
 * - only the tx's own coordinator answers (the entry's coordinatorId is this incarnation); anything else, or no
 *   entry, answers `null` (the reader goes to the commit partition);
 * - COMMITTED carries its commitTs even when it is above readTs (the reader decides visibility); ABORTED as is;
 * - PENDING (or ABANDONED, which recovery may still finish as an abort) answers PENDING;
 * - FINISHING whose commitTs is above readTs, or that carries none (an abort), is not visible at readTs: PENDING at
 *   once (the clock is above readTs, so this is the rule 12 "not visible" answer); FINISHING with commitTs ≤ readTs
 *   waits for the outcome, at most `waitMs`, and a wait that times out answers an error (TIMEOUT), never PENDING.
 *
 * A read-write request (`readWrite`: its sender met the tx's intent without the lock, after a primary change) needs
 * the final outcome, not visibility at readTs (ignite3-protocol.md §8): the coordinator has already aborted a tx it
 * still held PENDING (TxCoordinator does that before calling here), so FINISHING without a commitTs, an abort decided
 * by this coordinator, answers ABORTED at once (no commit was ever sent for the tx, and none will be); FINISHING
 * with a commitTs waits for the outcome whatever readTs is; PENDING (a tx this coordinator could not abort) is
 * answered as is, and the sender retries later.
 */

import type { CounterSink } from '../../core/counters.js';
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { NodeIdentity } from '../../core/ids.js';
import type { Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import type { TxStateAnswer, TxStateCoordinatorRequest, TxStateResponse } from '../core/messages.js';
import { isTimestamp, outcomeOfEntry, waitForFinal } from '../core/outcome.js';
import { isTxId } from '../core/tx-id.js';
import type { TxStateEntry, TxStateMap } from '../core/tx-state-map.js';

export interface CoordinatorStateDeps {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  /** The node's counters (structurally; the node layer sits above this one). */
  readonly counters?: CounterSink;
}

/** Names of the node counters bumped here. */
export const COORDINATOR_STATE_COUNTERS = {
  /** State requests that found their tx FINISHING here and waited for its outcome. */
  finishingWaits: 'coordinator.finishingWaits',
} as const;

export async function answerCoordinatorStateRequest(
  deps: CoordinatorStateDeps,
  request: TxStateCoordinatorRequest,
  waitMs: number,
): Promise<TxStateResponse> {
  const { txId, readTs } = request;
  if (!isTxId(txId)) throw invalidArgument('malformed tx id in a state request');
  if (!isTimestamp(readTs)) throw invalidArgument('a state request carries a readTs');
  // Absorb first, then read: nothing may come between the two (rule 12).
  deps.clock.update(readTs);
  const entry = deps.txStates.entry(txId);
  if (entry === undefined || entry.coordinatorId !== deps.self.id) return respond(null);
  switch (entry.state) {
    case 'COMMITTED':
    case 'ABORTED':
      return respond(finalAnswer(entry));
    case 'PENDING':
    case 'ABANDONED':
      return respond({ state: 'PENDING' });
    case 'FINISHING': {
      const commitTs = entry.commitTimestamp;
      if (request.readWrite !== undefined && commitTs === undefined) return respond({ state: 'ABORTED' });
      const needsOutcome = request.readWrite !== undefined;
      if (!needsOutcome && (commitTs === undefined || commitTs > readTs)) return respond({ state: 'PENDING' });
      deps.counters?.add(COORDINATOR_STATE_COUNTERS.finishingWaits);
      const final = await waitForFinal(deps.txStates, deps.timers, txId, waitMs);
      if (final === undefined) {
        throw new BasaltError('TIMEOUT', `tx ${txId} is still finishing; its outcome is not known yet`, { txId });
      }
      return respond(finalAnswer(final));
    }
  }
}

function finalAnswer(entry: TxStateEntry): TxStateAnswer {
  return outcomeOfEntry(entry);
}

function respond(answer: TxStateAnswer | null): TxStateResponse {
  return { kind: 'TxStateResponse', answer };
}
