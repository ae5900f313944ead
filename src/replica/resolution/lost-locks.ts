/**
 * A foreign write intent met by a read-write request on a primary (ignite3-protocol.md §8; DESIGN §2b rules 11, 12,
 * 17). Under the requester's lock a foreign intent means its writer lost its locks with a primary change (the new
 * primary never saw them) and its cleanup has not reached this partition yet. A read-write request needs the tx's
 * *final* outcome, not visibility at some readTs, so:
 *
 * 1. **local**: a final entry in this node's map is the outcome;
 * 2. **coordinator** (known and not gone, rule 17): TxStateCoordinatorRequest with `readWrite`: a coordinator that still
 *    holds the tx PENDING aborts it (its locks here are gone, so it can no longer commit serializably) and answers
 *    ABORTED; a commit in flight is waited for; a final outcome is answered. PENDING (a coordinator that could not
 *    abort it), an error or a timeout → no outcome yet. A null answer (the coordinator disowns the tx: it finished
 *    and forgot it, so it will never commit it) → step 3;
 * 3. **commit partition**: with the coordinator gone (or disowning the tx) a TxRecoveryRequest to the commit
 *    partition's primary: the durable outcome if stored, else recovery's abort (a compare-and-set: a commit that won
 *    the race is answered COMMITTED). With the coordinator unreachable but not gone, a commit partition state request
 *    (which may reach the coordinator, or recover the tx if it is gone there): only a final answer counts.
 *
 * No outcome yet is `undefined`: the caller fails its request retryably (nothing was changed), and a later attempt
 * asks again. Counters: `resolution.lostLocks.<path>` per answering path.
 */

import type { CounterSink } from '../../core/counters.js';
import type { NodeId, TxId } from '../../core/ids.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import type { TxOutcome, TxRequestFn } from '../../tx/core/messages.js';
import { outcomeOfEntry } from '../../tx/core/outcome.js';
import { nodeIdOf } from '../../tx/core/tx-id.js';
import { isFinal } from '../../tx/core/tx-state.js';
import type { TxStateMap } from '../../tx/core/tx-state-map.js';
import type { PeerDirectory } from '../ports.js';
import { answerOf, isFinalAnswer } from './answers.js';
import type { LostLockRequest } from './intent-resolver.js';
import { requestPrimary } from './primary-requests.js';

export interface LostLockDeps {
  readonly clock: HybridClock;
  readonly txStates: TxStateMap;
  readonly peers: PeerDirectory;
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
  readonly counters: CounterSink;
  readonly requestTimeoutMs: number;
}

type Step = { readonly outcome: TxOutcome | undefined } | 'commit-partition';

export async function resolveLostLock(deps: LostLockDeps, request: LostLockRequest): Promise<TxOutcome | undefined> {
  const entry = deps.txStates.entry(request.txId);
  if (entry !== undefined && isFinal(entry.state)) {
    deps.counters.add('resolution.lostLocks.local');
    return outcomeOfEntry(entry) as TxOutcome;
  }
  const coordinatorId = entry?.coordinatorId ?? coordinatorOf(request.txId);
  const gone = coordinatorId === undefined || deps.peers.isGone(coordinatorId);
  if (!gone) {
    const step = await askCoordinator(deps, request, coordinatorId);
    if (step !== 'commit-partition') return step.outcome;
  }
  return gone ? recover(deps, request) : askCommitPartition(deps, request, coordinatorId);
}

/** Step 2; 'commit-partition' when the coordinator disowns the tx or cannot be reached at all. */
async function askCoordinator(deps: LostLockDeps, request: LostLockRequest, coordinatorId: NodeId): Promise<Step> {
  const name = deps.peers.nameOf(coordinatorId);
  if (name === undefined) return 'commit-partition';
  const body = {
    kind: 'TxStateCoordinatorRequest',
    txId: request.txId,
    readTs: deps.clock.now(),
    readWrite: { partitionId: request.partitionId },
  } as const;
  try {
    const answer = answerOf(await deps.request(name, body, { timeoutMs: deps.requestTimeoutMs }));
    if (answer === null) return 'commit-partition';
    if (!isFinalAnswer(answer)) return { outcome: undefined };
    deps.counters.add('resolution.lostLocks.coordinator');
    return { outcome: answer };
  } catch {
    return { outcome: undefined };
  }
}

/** Step 3 with the coordinator gone or disowning the tx: recovery at the commit partition. */
async function recover(deps: LostLockDeps, request: LostLockRequest): Promise<TxOutcome | undefined> {
  const { txId, commitPartitionId } = request;
  const body = {
    kind: 'TxRecoveryRequest',
    txId,
    commitPartitionId,
    reporterPartitionId: request.partitionId,
  } as const;
  return finalFrom(deps, () => requestPrimary(deps, commitPartitionId, body, { timeoutMs: deps.requestTimeoutMs }));
}

/** Step 3 with the coordinator unreachable from here: the commit partition may reach it (or find it gone). */
async function askCommitPartition(
  deps: LostLockDeps,
  request: LostLockRequest,
  coordinatorId: NodeId,
): Promise<TxOutcome | undefined> {
  const body = {
    kind: 'TxStateCommitPartitionRequest',
    txId: request.txId,
    commitPartitionId: request.commitPartitionId,
    readTs: deps.clock.now(),
    coordinatorId,
    intentPartitionId: request.partitionId,
    key: request.key,
  } as const;
  return finalFrom(deps, () =>
    requestPrimary(deps, request.commitPartitionId, body, { timeoutMs: deps.requestTimeoutMs }),
  );
}

async function finalFrom(
  deps: LostLockDeps,
  send: () => Promise<Parameters<typeof answerOf>[0]>,
): Promise<TxOutcome | undefined> {
  try {
    const answer = answerOf(await send());
    if (answer === null || !isFinalAnswer(answer)) return undefined;
    deps.counters.add('resolution.lostLocks.commitPartition');
    return answer;
  } catch {
    return undefined;
  }
}

function coordinatorOf(txId: TxId): NodeId | undefined {
  try {
    return nodeIdOf(txId);
  } catch {
    return undefined;
  }
}
