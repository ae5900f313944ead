/**
 * A resolver for handler tests that need no resolution paths: the final states of this node's map, PENDING ("not
 * visible") for anything else. Not safe for fresh reads of commits in flight (a tx this node still sees as PENDING
 * may already have a commitTs at or below readTs elsewhere), which is why the node runs resolver.ts instead.
 */
import type { TxId } from '../core/ids.js';
import type { IntentResolutionRequest, IntentResolver } from '../replica/resolution/intent-resolver.js';
import type { TxStateAnswer } from '../tx/core/messages.js';
import type { TxStateMap } from '../tx/core/tx-state-map.js';

/** Final states of this node's map; PENDING (not visible) otherwise. */
export class LocalIntentResolver implements IntentResolver {
  constructor(private readonly map: TxStateMap) {}

  resolve(request: IntentResolutionRequest): Promise<TxStateAnswer> {
    return Promise.resolve(localAnswer(this.map, request.txId));
  }
}

export function localAnswer(map: TxStateMap, txId: TxId): TxStateAnswer {
  const entry = map.entry(txId);
  if (entry?.state === 'COMMITTED' && entry.commitTimestamp !== undefined) {
    return { state: 'COMMITTED', commitTs: entry.commitTimestamp };
  }
  if (entry?.state === 'ABORTED') return { state: 'ABORTED' };
  return { state: 'PENDING' };
}
