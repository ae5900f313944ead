/**
 * The cleanups a coordinator sends itself (the commit partition cleans up after a durable finish):
 * - unlock-only, for an RW tx that wrote nothing: its read locks are released on every primary it read from, and
 *   their map entries of it end with its true outcome, so that they are vacuumed like any final entry;
 * - after a mismatch (rule 14) or a finish someone else decided, the outcome on the whole enlisted set, since the
 *   deciding party may have known only part of it;
 * - partitions whose first request had an unknown outcome (they may hold locks or an intent the enlisted set lacks).
 *
 * One TxCleanupRequest per node, naming that node's partitions. The first round is awaited, so that in the common
 * case the locks are gone when commit or rollback returns (a retry of the tx is younger and would die against them);
 * partitions not reported cleaned are retried in the background at their current primary (the placement's guess, which
 * has learned the holder a PRIMARY_MISS named: route/send-to-primary.ts), with backoff, at most `cleanupAttemptsMax` rounds.
 */

import { asBasaltError, BasaltError } from '../../core/errors.js';
import type { NodeName, PartitionId, TxId } from '../../core/ids.js';
import { locateOr } from '../../route/primary-directory.js';
import { runRounds, sendRound } from '../../route/rounds-by-node.js';
import type { TxCleanupRequest, TxOutcome } from '../core/messages.js';
import { expectKind } from '../core/messages.js';
import { type CoordinatorContext, pause } from './context.js';

export interface CleanupTarget {
  readonly partitionId: PartitionId;
  readonly primary: NodeName;
}

/**
 * How a cleanup ends the tx on its primaries. Unlock-only (a tx that wrote nothing anywhere) releases its locks and
 * gives their map entries the tx's true outcome, COMMITTED with its commitTs or ABORTED (seed 002, rule 11); the other
 * kind also switches the tx's intents to the outcome.
 */
export interface CleanupKind {
  readonly unlockOnly: boolean;
  readonly outcome: TxOutcome;
}

/** Runs the first round and resolves; later rounds run in the background. */
export async function cleanUp(
  ctx: CoordinatorContext,
  txId: TxId,
  targets: readonly CleanupTarget[],
  kind: CleanupKind,
): Promise<void> {
  if (targets.length === 0) return;
  const failed = await cleanupRound(ctx, txId, dedupe(targets), kind);
  if (failed.length === 0) return;
  retryInBackground(ctx, txId, failed, kind).catch(ctx.onError);
}

async function retryInBackground(
  ctx: CoordinatorContext,
  txId: TxId,
  initial: readonly CleanupTarget[],
  kind: CleanupKind,
): Promise<void> {
  let failed = initial;
  let cancelled = false;
  await runRounds(2, {
    due: (round) => {
      if (round > ctx.settings.cleanupAttemptsMax || failed.length === 0) return false;
      cancelled = ctx.signal.aborted;
      return !cancelled;
    },
    round: async () => {
      const retargeted = failed.map((t) => ({ partitionId: t.partitionId, primary: currentPrimary(ctx, t) }));
      failed = await cleanupRound(ctx, txId, dedupe(retargeted), kind);
    },
    pause: (ms) => pause(ctx, ms),
    backoffMsMin: ctx.settings.retryBackoffMsMin,
    backoffMsMax: ctx.settings.backgroundBackoffMsMax,
  });
  if (failed.length > 0 && !cancelled) {
    ctx.onError(
      new BasaltError('TIMEOUT', `cleanup of tx ${txId} gave up`, {
        txId,
        partitions: failed.map((t) => t.partitionId),
      }),
    );
  }
}

function currentPrimary(ctx: CoordinatorContext, target: CleanupTarget): NodeName {
  // No hint (the table is gone, say: nobody holds its locks any more): the old target is as good as any.
  return locateOr(ctx.placement.primaries, target.partitionId, target.primary);
}

/**
 * One request per node (route/rounds-by-node.ts); resolves with the targets not reported cleaned. The holder a miss
 * names is learned there, so that the next round's placement guess goes to it.
 */
async function cleanupRound(
  ctx: CoordinatorContext,
  txId: TxId,
  targets: readonly CleanupTarget[],
  kind: CleanupKind,
): Promise<CleanupTarget[]> {
  const send = async (node: NodeName, partitions: readonly PartitionId[]): Promise<readonly PartitionId[]> => {
    const body: TxCleanupRequest = { kind: 'TxCleanupRequest', txId, partitions, ...kind };
    try {
      const response = await ctx.request(node, body, {
        timeoutMs: ctx.settings.cleanupRequestTimeoutMs,
        signal: ctx.signal,
      });
      return expectKind(response, 'TxCleanupResponse').cleaned;
    } catch (error) {
      // Cancelled with the coordinator: nothing to retry.
      if (asBasaltError(error).code === 'CANCELLED' && ctx.signal.aborted) return partitions;
      throw error;
    }
  };
  const sent = targets.map((t) => ({ partitionId: t.partitionId, node: t.primary }));
  const failed = await sendRound(sent, send, ctx.placement.primaries);
  return failed.map((f) => ({ partitionId: f.partitionId, primary: f.node }));
}

function dedupe(targets: readonly CleanupTarget[]): CleanupTarget[] {
  const seen = new Set<string>();
  const out: CleanupTarget[] = [];
  for (const t of targets) {
    const key = `${t.partitionId}\u0000${t.primary}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(t);
  }
  return out;
}
