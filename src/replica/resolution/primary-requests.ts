/**
 * One request to a partition's primary, following PRIMARY_MISS hints: the locator names a first target, a miss that
 * names the holder (its typed hint) redirects the next attempt there, and a miss without a hint asks the
 * locator again. At most `attemptsMax` attempts (a named limit); any other error ends the call at once, and the last
 * PRIMARY_MISS is rethrown when attempts run out. Each attempt is bounded by the request function's timeout.
 */
import { isBasaltError, missHolder } from '../../core/errors.js';
import type { NodeName, PartitionId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { TxRequestKind, TxResponseOf } from '../../tx/messages.js';
import type { PrimaryLocator, TxRequestFn, TxRequestOf } from './ports.js';

export interface PrimaryRequestDeps {
  readonly request: TxRequestFn;
  readonly locator: PrimaryLocator;
}

export interface PrimaryRequestOptions {
  readonly timeoutMs: number;
  readonly attemptsMax?: number;
  /** Where to send first (e.g. a hint the caller already has); else the locator decides. */
  readonly firstTarget?: NodeName;
}

export async function requestPrimary<K extends TxRequestKind>(
  deps: PrimaryRequestDeps,
  partitionId: PartitionId,
  body: TxRequestOf<K>,
  options: PrimaryRequestOptions,
): Promise<TxResponseOf[K]> {
  const attemptsMax = options.attemptsMax ?? LIMITS.primaryRequestAttemptsMax;
  let target = options.firstTarget;
  let lastMiss: unknown;
  for (let attempt = 0; attempt < attemptsMax; attempt++) {
    const to = target ?? (await deps.locator.locate(partitionId));
    try {
      return await deps.request(to, body, { timeoutMs: options.timeoutMs });
    } catch (error) {
      if (!isBasaltError(error, 'PRIMARY_MISS')) throw error;
      lastMiss = error;
      target = holderHint(error, to);
    }
  }
  throw lastMiss;
}

/** The holder a PRIMARY_MISS names, unless it names the node that just missed (then the locator decides). */
export function holderHint(error: unknown, missed: NodeName): NodeName | undefined {
  const holder = missHolder(error);
  return holder !== undefined && holder !== missed ? holder : undefined;
}
