/**
 * Transaction states and the legal transitions between them (ignite3-protocol.md §3, Ignite's
 * `TxState.checkTransitionCorrectness`).
 *
 * - PENDING: the tx runs. FINISHING: the node driving the finish (coordinator, or the commit partition primary during
 *   recovery) chose the outcome (and, for a commit, the commitTs) and waits for it to become durable; never sent over
 *   the wire. ABANDONED: the coordinator is gone and the tx is not final yet; recovery will finish it.
 *   COMMITTED / ABORTED: final; a final state never changes.
 * - UNKNOWN is a resolution result only ("not committed at or below readTs; no state recoverable"): it is never stored,
 *   so no transition leads to it (DESIGN §2b rule 16).
 *
 * A stored state moves only along TX_TRANSITIONS; the tx state map ignores any other update (keeping the old value),
 * which makes late and duplicated updates from the many roles one node plays harmless.
 */

/** States that a tx state map stores. */
export const TX_STATES = ['PENDING', 'FINISHING', 'ABANDONED', 'COMMITTED', 'ABORTED'] as const;
export type TxState = (typeof TX_STATES)[number];

/** What a resolution may answer: a stored state, or UNKNOWN (never stored). */
export type TxResolutionState = TxState | 'UNKNOWN';
export const TX_RESOLUTION_STATES: readonly TxResolutionState[] = [...TX_STATES, 'UNKNOWN'];

export type FinalTxState = 'COMMITTED' | 'ABORTED';

/** Row label for "no entry yet" in the transition table. */
export const ABSENT = 'ABSENT';
export type TxStateOrAbsent = TxResolutionState | typeof ABSENT;

/** from → the states it may move to (ignite3-protocol.md §3, exactly). */
export const TX_TRANSITIONS: Readonly<Record<TxStateOrAbsent, readonly TxResolutionState[]>> = Object.freeze({
  ABSENT: Object.freeze(['PENDING', 'FINISHING', 'ABORTED', 'COMMITTED', 'ABANDONED'] as const),
  PENDING: Object.freeze(['PENDING', 'FINISHING', 'ABORTED', 'COMMITTED', 'ABANDONED'] as const),
  FINISHING: Object.freeze(['ABORTED', 'COMMITTED', 'ABANDONED'] as const),
  ABORTED: Object.freeze(['ABORTED'] as const),
  COMMITTED: Object.freeze(['COMMITTED'] as const),
  ABANDONED: Object.freeze(['FINISHING', 'ABORTED', 'COMMITTED', 'ABANDONED'] as const),
  UNKNOWN: Object.freeze([] as const),
});

/** True if a state may move from `from` (undefined = no entry) to `to`. */
export function isLegalTransition(from: TxResolutionState | undefined, to: TxResolutionState): boolean {
  return TX_TRANSITIONS[from ?? ABSENT].includes(to);
}

export function isFinal(state: TxResolutionState | undefined): state is FinalTxState {
  return state === 'COMMITTED' || state === 'ABORTED';
}

export function isTxState(value: unknown): value is TxState {
  return typeof value === 'string' && (TX_STATES as readonly string[]).includes(value);
}

export function isTxResolutionState(value: unknown): value is TxResolutionState {
  return typeof value === 'string' && (TX_RESOLUTION_STATES as readonly string[]).includes(value);
}
