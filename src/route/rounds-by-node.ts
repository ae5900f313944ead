/**
 * Rounds of requests that each name several partitions at their primaries: the one loop of the coordinator's cleanup
 * (tx/coordinator/coordinator-cleanup.ts) and the commit partition's (replica/cleanup/cleanup-driver.ts). Generic over
 * the request, so that it sits below both tx and replica: the caller's `send` builds and sends it.
 *
 * A round groups its targets by node and sends one request per node, naming that node's partitions; a partition the
 * node does not report done (its request failed, or it answered without it) is returned with where to go next: the
 * holder a PRIMARY_MISS of that partition named (noted in the directory first: send-to-primary.ts's followMiss), else
 * undefined. The rounds run while the caller says one is due, each after round 1 paced by `backoffMs`; the caller
 * bounds them (its attempts limit) and chooses each round's targets.
 */
import { assert } from '../core/assert.js';
import type { NodeName, PartitionId } from '../core/ids.js';
import { backoffMs } from './backoff.js';
import type { PrimaryDirectory } from './primary-directory.js';
import { followMiss } from './send-to-primary.js';

/** A partition to reach in a round, at `node`. */
export interface RoundTarget {
  readonly partitionId: PartitionId;
  readonly node: NodeName;
}

/** A target a round did not get done. */
export interface RoundFailure extends RoundTarget {
  /** The holder a miss of this partition named, unless it was `node` (the directory has noted it). */
  readonly hinted: NodeName | undefined;
  /** The failure of the request to `node`; undefined when `node` answered without reporting the partition done. */
  readonly error: unknown;
}

/**
 * One request to `node` naming `partitionIds`; resolves with the partitions it reports done, rejects when the request
 * failed.
 */
export type RoundSend = (node: NodeName, partitionIds: readonly PartitionId[]) => Promise<Iterable<PartitionId>>;

/** One round: one request per node, in the targets' order; resolves with the targets not reported done. */
export async function sendRound(
  targets: readonly RoundTarget[],
  send: RoundSend,
  directory: PrimaryDirectory,
): Promise<RoundFailure[]> {
  const byNode = new Map<NodeName, PartitionId[]>();
  for (const t of targets) {
    const list = byNode.get(t.node) ?? [];
    list.push(t.partitionId);
    byNode.set(t.node, list);
  }
  const perNode = [...byNode].map(async ([node, partitionIds]) => {
    let error: unknown;
    const done = await send(node, partitionIds).then(
      (reported) => new Set(reported),
      (failure: unknown) => {
        error = failure;
        return new Set<PartitionId>();
      },
    );
    return partitionIds
      .filter((partitionId) => !done.has(partitionId))
      .map((partitionId) => ({ partitionId, node, error, hinted: followMiss(error, partitionId, node, directory) }));
  });
  const failed = (await Promise.all(perNode)).flat();
  assert(failed.length <= targets.length, 'a round fails only targets it was given', failed.length, targets.length);
  return failed;
}

export interface RoundsOptions {
  /** Whether round `round` (1-based) is due: targets left and the caller's limit not reached. */
  readonly due: (round: number) => boolean;
  /** Runs round `round`. */
  readonly round: (round: number) => Promise<void>;
  /** Checked after each pause: false ends the rounds (e.g. the sender no longer acts for the partition). */
  readonly proceed?: () => boolean;
  /** Waits `ms` on the caller's injected timers. */
  readonly pause: (ms: number) => Promise<void>;
  readonly backoffMsMin: number;
  readonly backoffMsMax: number;
}

/**
 * Runs the rounds from `first` while they are due, pausing `backoffMs(round - 1)` before every round after the first.
 * Resolves 'stopped' when `proceed` ended them, else 'over'.
 */
export async function runRounds(first: number, o: RoundsOptions): Promise<'over' | 'stopped'> {
  assert(first >= 1, 'rounds count from 1', first);
  for (let round = first; o.due(round); round++) {
    if (round > 1) await o.pause(backoffMs(round - 1, o.backoffMsMin, o.backoffMsMax));
    if (o.proceed?.() === false) return 'stopped';
    await o.round(round);
  }
  return 'over';
}
