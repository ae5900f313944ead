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
import { backoffMs } from '../../route/backoff.js';
import { locateOr } from '../../route/primary-directory.js';
import { followMiss } from '../../route/send-to-primary.js';
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
  for (let round = 2; round <= ctx.settings.cleanupAttemptsMax && failed.length > 0; round++) {
    if (ctx.signal.aborted) return;
    await pause(ctx, backoffMs(round - 1, ctx.settings.retryBackoffMsMin, ctx.settings.backgroundBackoffMsMax));
    const retargeted = failed.map((t) => ({ partitionId: t.partitionId, primary: currentPrimary(ctx, t) }));
    failed = await cleanupRound(ctx, txId, dedupe(retargeted), kind);
  }
  if (failed.length > 0) {
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

/** One request per node; resolves with the targets not reported cleaned. */
async function cleanupRound(
  ctx: CoordinatorContext,
  txId: TxId,
  targets: readonly CleanupTarget[],
  kind: CleanupKind,
): Promise<CleanupTarget[]> {
  const byNode = new Map<NodeName, PartitionId[]>();
  for (const t of targets) {
    const list = byNode.get(t.primary) ?? [];
    list.push(t.partitionId);
    byNode.set(t.primary, list);
  }
  const rounds = [...byNode].map(([node, partitions]) => cleanupAt(ctx, txId, node, partitions, kind));
  return (await Promise.all(rounds)).flat();
}

async function cleanupAt(
  ctx: CoordinatorContext,
  txId: TxId,
  node: NodeName,
  partitions: readonly PartitionId[],
  kind: CleanupKind,
): Promise<CleanupTarget[]> {
  const body: TxCleanupRequest = { kind: 'TxCleanupRequest', txId, partitions, ...kind };
  try {
    const response = expectKind(
      await ctx.request(node, body, { timeoutMs: ctx.settings.cleanupRequestTimeoutMs, signal: ctx.signal }),
      'TxCleanupResponse',
    );
    const cleaned = new Set(response.cleaned);
    return partitions.filter((p) => !cleaned.has(p)).map((partitionId) => ({ partitionId, primary: node }));
  } catch (error) {
    if (asBasaltError(error).code === 'CANCELLED' && ctx.signal.aborted) return [];
    // The holder a miss names is learned, so that the next round's placement guess goes there.
    const directory = ctx.placement.primaries;
    for (const partitionId of partitions) followMiss(error, partitionId, node, directory);
    return partitions.map((partitionId) => ({ partitionId, primary: node }));
  }
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
