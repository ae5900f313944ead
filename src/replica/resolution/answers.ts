/**
 * State answers as they cross the wire (rule 11): a TxStateResponse's answer is checked before anyone trusts it (a
 * COMMITTED answer must carry a valid commitTs; anything malformed is a protocol violation, INTERNAL). Helpers turn
 * stored entries and records into answers and tell final answers from the others.
 */
import { BasaltError } from '../../core/errors.js';
import type { TxId } from '../../core/ids.js';
import type { StoredTxMeta } from '../../storage/tx-state-storage.js';
import type { TxOutcome, TxStateAnswer, TxStateResponse } from '../../tx/core/messages.js';
import { isTimestamp } from '../../tx/core/outcome.js';

/** The answer of a TxStateResponse; null when the answerer has no state. Throws INTERNAL on a malformed response. */
export function answerOf(response: TxStateResponse | undefined): TxStateAnswer | null {
  if (response?.kind !== 'TxStateResponse') {
    throw new BasaltError('INTERNAL', `expected a TxStateResponse, got ${String(response?.kind)}`);
  }
  const a = response.answer as Partial<{ state: unknown; commitTs: unknown }> | null;
  if (a === null) return null;
  switch (a?.state) {
    case 'PENDING':
    case 'ABORTED':
    case 'UNKNOWN':
      return { state: a.state };
    case 'COMMITTED':
      if (isTimestamp(a.commitTs)) return { state: 'COMMITTED', commitTs: a.commitTs };
      break;
  }
  throw new BasaltError('INTERNAL', `malformed state answer ${String(a?.state)}`);
}

export function isFinalAnswer(answer: TxStateAnswer): answer is TxOutcome {
  return answer.state === 'COMMITTED' || answer.state === 'ABORTED';
}

/**
 * Rule 11's "true final outcome", for asserts of outcomes this node holds (never for a peer's, which answerOf checks):
 * ABORTED, or COMMITTED with its commitTs.
 */
export function isTrueOutcome(outcome: { readonly state: string; readonly commitTs?: unknown }): boolean {
  return outcome.state === 'ABORTED' || (outcome.state === 'COMMITTED' && isTimestamp(outcome.commitTs));
}

/** The outcome a durable record holds (what the compare-and-set stored: rule 14). */
export function outcomeOfRecord(record: StoredTxMeta): TxOutcome {
  if (record.state === 'ABORTED') return { state: 'ABORTED' };
  if (record.commitTs === undefined) {
    throw new BasaltError('STORAGE_CORRUPTED', `COMMITTED ${record.txId} lacks its commitTs`);
  }
  return { state: 'COMMITTED', commitTs: record.commitTs };
}

export function stateResponse(answer: TxStateAnswer | null): TxStateResponse {
  return { kind: 'TxStateResponse', answer };
}

export function timeoutError(txId: TxId, what: string, cause?: unknown): BasaltError {
  return new BasaltError('TIMEOUT', `${what} of tx ${txId} did not finish in time`, { txId }, { cause });
}
