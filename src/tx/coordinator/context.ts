/**
 * What the coordinator's flows run with (its context: identity, clock, timers, the tx state map, requests, placement,
 * settings and the signal that ends them with the coordinator), and the helpers every flow uses: pausing on the
 * injected timers, grouping an operation's keys by partition, and settling all of an operation's requests.
 */

import type { CounterSink } from '../../core/counters.js';
import type { NodeIdentity, PartitionId } from '../../core/ids.js';
import { sleep, type Timers } from '../../env/timers.js';
import type { HybridClock } from '../../hlc/hybrid-clock.js';
import type { TxRequestFn } from '../core/messages.js';
import type { TxStateMap } from '../core/tx-state-map.js';
import type { TxPlacement } from './coordinator-ports.js';
import type { CoordinatorSettings } from './settings.js';

/** What the coordinator's flows run with. `signal` aborts when the coordinator stops. */
export interface CoordinatorContext {
  readonly self: NodeIdentity;
  readonly clock: HybridClock;
  readonly timers: Timers;
  readonly txStates: TxStateMap;
  readonly request: TxRequestFn;
  readonly placement: TxPlacement;
  readonly settings: CoordinatorSettings;
  readonly signal: AbortSignal;
  readonly onError: (error: unknown) => void;
  /** The node's counters (structurally; the node layer sits above this one). */
  readonly counters?: CounterSink;
}

/** Sleeps on the injected timers; rejects with CANCELLED once the coordinator stops. */
export async function pause(ctx: CoordinatorContext, delayMs: number): Promise<void> {
  await sleep(ctx.timers, delayMs, ctx.signal);
}

/** Indexes of `items` grouped by partition, in first-seen order (each group keeps the items' order). */
export function groupByPartition<T>(
  items: readonly T[],
  partitionOf: (item: T) => PartitionId,
): Map<PartitionId, number[]> {
  const groups = new Map<PartitionId, number[]>();
  items.forEach((item, index) => {
    const p = partitionOf(item);
    const list = groups.get(p) ?? [];
    list.push(index);
    groups.set(p, list);
  });
  return groups;
}

/**
 * Waits for every promise (so that no request of an operation is still in flight when it ends, rule 6), then
 * rethrows the first failure.
 */
export async function settleAll<T>(promises: readonly Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(promises);
  const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}
