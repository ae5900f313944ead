/**
 * TxCleanupRequest on an enlisted primary (ignite3-protocol.md §7.6): for each listed partition this node acts as
 * primary of, in parallel:
 * 1. absorb commitTs (rule 8), check primacy (a partition this node does not act for is left out of `cleaned`, so
 *    the sender re-resolves its primary; if none was cleaned the whole request answers that PRIMARY_MISS);
 * 2. close the tx's operation record (no new operation of the tx runs here), map → final ('cleanup-request') when an
 *    outcome is given, fail the tx's lock waiters, wait for its operations in flight;
 * 3. unless unlock-only: if the tx has intents here, propose its write-intent switch (coalesced, below) and await
 *    its apply;
 * 4. release every lock of the tx.
 * Idempotent: a repeated cleanup finds no intents and no locks and answers success again. Unlock-only (a tx that
 * wrote nothing anywhere) skips the switch; it still waits for operations in flight, so that none acquires a lock
 * after the release, and its map entry goes final too (ABORTED unless the request names the state), so that it is
 * vacuumed after the retention rather than kept PENDING for good. A partition that holds an intent of the tx is not
 * cleaned by an unlock-only request (left out of `cleaned`, map untouched): only a cleanup with the tx's real
 * outcome may end it.
 *
 * Switches are coalesced per partition: while one switch command of the partition is being replicated, the switches
 * of the cleanups that arrive meanwhile wait and then go into one WriteIntentSwitchAll (at most intentSwitchBatchMax
 * txs; a lone one stays a WriteIntentSwitch), so that under load a tx costs a fraction of a Raft entry per enlisted
 * partition. Each cleanup still awaits the apply of the command that holds its switch before it releases the tx's
 * locks; a failed proposal fails every cleanup it carried, as a single one would.
 *
 * The commit partition's cleanup driver sends these requests after the finish was answered, so a request on this
 * primary may meet a finished tx's locks first: `cleanupPartition` then runs in line, as this request would
 * (inline-cleanup.ts; also for an intent whose locks were lost, read-write.ts), and the later request finds nothing
 * left to do.
 */
import { BasaltError, invalidArgument } from '../../core/errors.js';
import type { PartitionId, TxId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import { UNLOCK_ONLY_OUTCOME } from '../../tx/coordinator-cleanup.js';
import type { TxCleanupRequest, TxCleanupResponse } from '../../tx/messages.js';
import type { IntentSwitch } from '../commands.js';
import { assertHosted, type HostedPartition, type PartitionRegistry } from './hosted-partition.js';

export async function handleTxCleanup(
  registry: PartitionRegistry,
  request: TxCleanupRequest,
): Promise<TxCleanupResponse> {
  if (!request.unlockOnly && request.outcome === undefined) throw invalidArgument('a cleanup needs the outcome');
  if (request.partitions.length > LIMITS.finishEnlistedPartitionsMax) throw invalidArgument('too many partitions');
  const attempts = await Promise.all(
    request.partitions.map((partitionId) =>
      cleanupOn(registry, partitionId, request).then(
        () => ({ partitionId, error: undefined }),
        (error: unknown) => ({ partitionId, error }),
      ),
    ),
  );
  const cleaned: PartitionId[] = attempts.filter((a) => a.error === undefined).map((a) => a.partitionId);
  const failed = attempts.find((a) => a.error !== undefined);
  if (cleaned.length === 0 && failed !== undefined) throw failed.error;
  return { kind: 'TxCleanupResponse', txId: request.txId, cleaned };
}

async function cleanupOn(registry: PartitionRegistry, partitionId: PartitionId, request: TxCleanupRequest) {
  const p = assertHosted(registry.get(partitionId), partitionId);
  await cleanupPartition(p, request);
}

/** One partition's cleanup on its primary (see the module header). */
export async function cleanupPartition(p: HostedPartition, request: TxCleanupRequest): Promise<void> {
  const { txId } = request;
  if (request.unlockOnly && p.mv.rowsWrittenBy(txId).length > 0) {
    throw invalidArgument(`an unlock-only cleanup of ${txId} met its intents`, { txId, partitionId: p.partitionId });
  }
  const outcome = request.outcome ?? (request.unlockOnly ? UNLOCK_ONLY_OUTCOME : undefined);
  const commitTs = outcome?.state === 'COMMITTED' ? outcome.commitTs : undefined;
  const absorbed = commitTs === undefined ? p.clock.now() : p.clock.update(commitTs);
  const now = await p.untilLeaseStart(absorbed);
  p.actingLease(now);
  p.operations.close(txId, p.deadlineOf(txId), now);
  p.pipeline.forget(txId);
  if (outcome !== undefined) {
    p.txStateMap.update(txId, { state: outcome.state, commitTimestamp: commitTs, reason: 'cleanup-request' });
  }
  p.locks.failWaiters(txId);
  await p.operations.whenIdle(txId);
  if (!request.unlockOnly && outcome !== undefined && p.mv.rowsWrittenBy(txId).length > 0) {
    await switchBatcher(p).switchIntents({ txId, commit: outcome.state === 'COMMITTED', commitTs: commitTs ?? null });
  }
  p.locks.releaseAll(txId);
}

interface QueuedSwitch {
  readonly intent: IntentSwitch;
  /** The cleanups waiting for this switch (the same tx and outcome asked twice share one). */
  readonly waiters: { readonly resolve: () => void; readonly reject: (error: unknown) => void }[];
}

/**
 * The switches of one partition: at most one switch command in flight; what arrives meanwhile is queued and proposed
 * as one command when it settles. Invariant: `queue` holds no two entries of the same tx and outcome (`byKey`).
 */
class IntentSwitchBatcher {
  private queue: QueuedSwitch[] = [];
  private readonly byKey = new Map<string, QueuedSwitch>();
  private proposing = false;

  constructor(private readonly p: HostedPartition) {}

  /** Resolves once a command holding this switch applied here as SWITCHED; rejects as that proposal did. */
  switchIntents(intent: IntentSwitch): Promise<void> {
    return new Promise((resolve, reject) => {
      const key = `${intent.txId}/${intent.commit}/${intent.commitTs ?? ''}`;
      const queued = this.byKey.get(key);
      if (queued !== undefined) queued.waiters.push({ resolve, reject });
      else {
        const entry: QueuedSwitch = { intent, waiters: [{ resolve, reject }] };
        this.queue.push(entry);
        this.byKey.set(key, entry);
      }
      if (!this.proposing) void this.proposeQueued();
    });
  }

  private async proposeQueued(): Promise<void> {
    this.proposing = true;
    while (this.queue.length > 0) {
      const batch = this.takeBatch();
      const switches = batch.map((q) => q.intent);
      let failure: { error: unknown } | undefined;
      try {
        const applied = await this.p.replica.propose((proposal) =>
          switches.length === 1
            ? { kind: 'WriteIntentSwitch', ts: proposal.ts, proposalId: proposal.id, ...switches[0]! }
            : { kind: 'WriteIntentSwitchAll', ts: proposal.ts, proposalId: proposal.id, switches },
        );
        if (applied.kind !== 'SWITCHED') {
          const txIds = switches.map((one) => one.txId);
          failure = { error: new BasaltError('INTERNAL', `write-intent switch answered ${applied.kind}`, { txIds }) };
        }
      } catch (error) {
        failure = { error };
      }
      for (const q of batch) {
        for (const w of q.waiters) {
          if (failure === undefined) w.resolve();
          else w.reject(failure.error);
        }
      }
    }
    this.proposing = false;
  }

  /** The oldest queued switches of distinct txs, at most intentSwitchBatchMax; the others stay queued in order. */
  private takeBatch(): QueuedSwitch[] {
    const batch: QueuedSwitch[] = [];
    const rest: QueuedSwitch[] = [];
    const txIds = new Set<TxId>();
    for (const q of this.queue) {
      if (batch.length < LIMITS.intentSwitchBatchMax && !txIds.has(q.intent.txId)) {
        batch.push(q);
        txIds.add(q.intent.txId);
        this.byKey.delete(`${q.intent.txId}/${q.intent.commit}/${q.intent.commitTs ?? ''}`);
      } else rest.push(q);
    }
    this.queue = rest;
    return batch;
  }
}

const batchers = new WeakMap<HostedPartition, IntentSwitchBatcher>();

function switchBatcher(p: HostedPartition): IntentSwitchBatcher {
  let batcher = batchers.get(p);
  if (batcher === undefined) {
    batcher = new IntentSwitchBatcher(p);
    batchers.set(p, batcher);
  }
  return batcher;
}
