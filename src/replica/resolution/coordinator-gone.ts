/**
 * "Coordinator gone", marked in one place (DESIGN §2 "Recovery"; rules 11, 17): the orphan detector, the tx sweep, the
 * resolver and the commit partition's recovery all note here that a tx's coordinator is gone before they recover it.
 *
 * One guard: the coordinator id is gone by PeerDirectory.isGone (rule 17: an id never seen since this node started is
 * unknown, not gone; a live coordinator that disowns a tx is not gone either), and the entry is one this node already
 * has, PENDING. ABANDONED is a note about a known tx, never a new entry; an ABANDONED entry already says it (no second
 * update); a final entry stays final; a FINISHING entry is a finish in flight whose outcome the compare-and-set
 * decides, so it is left as it is.
 */
import { assert } from '../../core/assert.js';
import type { NodeId, TxId } from '../../core/ids.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { PeerDirectory } from '../ports.js';

/** Marks `txId` ABANDONED ('coordinator-gone') under the module's guard; true if it did. */
export function markCoordinatorGone(
  txStates: Pick<TxStateMap, 'entry' | 'update'>,
  peers: Pick<PeerDirectory, 'isGone'>,
  txId: TxId,
  coordinatorId: NodeId | undefined,
): boolean {
  const entry = txStates.entry(txId);
  if (entry?.state !== 'PENDING') return false;
  if (coordinatorId === undefined || !peers.isGone(coordinatorId)) return false;
  const result = txStates.update(txId, { state: 'ABANDONED', reason: 'coordinator-gone' });
  // PENDING → ABANDONED is legal, and an existing entry is never refused for room.
  assert(result.kind === 'applied', 'a PENDING entry of a gone coordinator becomes ABANDONED', txId, result.kind);
  assert(txStates.entry(txId)?.state === 'ABANDONED', 'the marked entry reads ABANDONED', txId);
  return true;
}
