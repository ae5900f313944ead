/**
 * TxStatePrimaryReplicaRequest on the primary of an intent's partition (DESIGN §2b rule 16; ignite3-protocol.md §8
 * "primary-replica path"): asked when no state exists anywhere else (the tx's durable record is below the commit
 * partition's vacuum horizon). A final entry in this node's map answers; a FINISHING one is waited for (bounded; a
 * wait that times out answers TIMEOUT, never PENDING). Otherwise the primary infers from its *own* version chain once
 * it is readable at readTs:
 *
 * - the row still holds this tx's intent → UNKNOWN: a replica never infers from its own chain while it holds the
 *   intent (the reader takes the newest committed version ≤ readTs; UNKNOWN is never stored or switched);
 * - a committed version with newestCommitTs < commitTs ≤ readTs → COMMITTED(commitTs): the reader saw the intent above
 *   newestCommitTs with safe time ≥ readTs, so no other tx can have committed that row between them;
 * - only commits after readTs (above newestCommitTs) → UNKNOWN: not committed at or below readTs;
 * - nothing committed above newestCommitTs → ABORTED (the intent was removed and nothing replaced it).
 *
 * The primary has applied every switch of this tx before its cleanup was reported complete (and only then could the
 * record be vacuumed), so its chain shows the outcome.
 */
import { invalidArgument } from '../../core/errors.js';
import type { HybridTimestamp, TxId } from '../../core/ids.js';
import type { MvPartitionStorage } from '../../storage/mv-partition-storage.js';
import type { TxStateAnswer, TxStatePrimaryReplicaRequest, TxStateResponse } from '../../tx/core/messages.js';
import { isTimestamp, outcomeOfEntry, waitForFinal } from '../../tx/core/outcome.js';
import { isTxId } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { PartitionReplica } from '../partition/partition-replica.js';
import { stateResponse, timeoutError } from '../resolution/answers.js';

export async function handlePrimaryReplicaState(
  p: PartitionReplica,
  request: TxStatePrimaryReplicaRequest,
  stateWaitMs: number,
): Promise<TxStateResponse> {
  validate(request);
  p.actingLease(await p.untilLeaseStart(p.clock.now()));
  const entry = p.txStateMap.entry(request.txId);
  if (entry !== undefined && isFinal(entry.state)) return stateResponse(outcomeOfEntry(entry));
  if (entry?.state === 'FINISHING') {
    const final = await waitForFinal(p.txStateMap, p.timers, request.txId, stateWaitMs);
    if (final === undefined) throw timeoutError(request.txId, 'the finish');
    return stateResponse(outcomeOfEntry(final));
  }
  // The chain must hold everything that will ever be visible at readTs before anything is inferred from it.
  await p.waitReadable(request.readTs);
  p.actingLease(p.clock.now());
  // Asked because the commit partition has no record at or below its horizon: an intent of the tx still held here
  // then proves it never committed, and the in-line cleanup aborts it (inline-cleanup.ts).
  if (holdsIntent(p.mv, request)) p.reportHeldIntent(request.txId);
  return stateResponse(inferFromChain(p.mv, request));
}

function holdsIntent(mv: MvPartitionStorage, q: ChainQuestion): boolean {
  const rowId = mv.rowIdOf(q.key);
  const latest = rowId === undefined ? undefined : mv.readLatest(rowId);
  return latest?.kind === 'intent' && latest.txId === q.txId;
}

export interface ChainQuestion {
  readonly txId: TxId;
  readonly key: string;
  readonly readTs: HybridTimestamp;
  readonly newestCommitTs?: HybridTimestamp | undefined;
}

/** The rule 16 inference from one row's version chain (see the module header). Pure: reads only. */
export function inferFromChain(mv: MvPartitionStorage, q: ChainQuestion): TxStateAnswer {
  const rowId = mv.rowIdOf(q.key);
  if (rowId === undefined) return { state: 'ABORTED' };
  const latest = mv.readLatest(rowId);
  if (latest.kind === 'intent' && latest.txId === q.txId) return { state: 'UNKNOWN' };
  const above = (ts: HybridTimestamp | undefined): ts is HybridTimestamp =>
    ts !== undefined && (q.newestCommitTs === undefined || ts > q.newestCommitTs);
  const atReadTs = mv.read(rowId, q.readTs);
  const visible = newestCommitted(atReadTs);
  if (above(visible) && visible <= q.readTs) return { state: 'COMMITTED', commitTs: visible };
  if (above(newestCommitted(latest))) return { state: 'UNKNOWN' };
  return { state: 'ABORTED' };
}

function newestCommitted(read: ReturnType<MvPartitionStorage['read']>): HybridTimestamp | undefined {
  switch (read.kind) {
    case 'committed':
      return read.commitTs;
    case 'intent':
      return read.newestCommitTimestamp;
    case 'empty':
      return undefined;
  }
}

function validate(request: TxStatePrimaryReplicaRequest): void {
  if (!isTxId(request.txId)) throw invalidArgument('malformed tx id in a state request');
  if (!isTimestamp(request.readTs)) throw invalidArgument('a state request carries a readTs');
  if (request.newestCommitTs !== undefined && !isTimestamp(request.newestCommitTs)) {
    throw invalidArgument('malformed newestCommitTs');
  }
}
