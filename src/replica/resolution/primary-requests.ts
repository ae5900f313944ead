/**
 * One resolution or recovery request to a partition's primary, routed as every primary-only request is
 * (route/send-to-primary.ts): the locator names a first target, a miss that names the holder redirects the next attempt
 * there, and a miss without a hint asks the locator again; a target tried already waits a backoff first when the
 * caller gives timers. At most `attemptsMax` attempts (a named limit), and none past the caller's deadline; any other
 * error ends the call at once, and the last PRIMARY_MISS is rethrown when attempts run out. Each attempt is bounded by
 * the request function's timeout.
 */

import type { NodeName, PartitionId } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import type { Clock } from '../../env/clock.js';
import type { Timers } from '../../env/timers.js';
import { backoffMs } from '../../route/backoff.js';
import type { PrimaryDirectory } from '../../route/primary-directory.js';
import { sendToPrimary } from '../../route/send-to-primary.js';
import type { TxRequestFn, TxRequestKind, TxRequestOf, TxResponseOf } from '../../tx/core/messages.js';

export interface PrimaryRequestDeps {
  readonly request: TxRequestFn;
  readonly locator: PrimaryDirectory;
}

export interface PrimaryRequestOptions {
  readonly timeoutMs: number;
  readonly attemptsMax?: number;
  /** Where to send first (e.g. a hint the caller already has); else the locator decides. */
  readonly firstTarget?: NodeName;
  /** Backs off before a target is tried again (without: the caller's own loop backs off between calls). */
  readonly timers?: Timers;
  /** No attempt starts at or after `atMs` (the caller's resolution deadline). */
  readonly deadline?: { readonly clock: Pick<Clock, 'monotonicMs'>; readonly atMs: number };
}

export async function requestPrimary<K extends TxRequestKind>(
  deps: PrimaryRequestDeps,
  partitionId: PartitionId,
  body: TxRequestOf<K>,
  options: PrimaryRequestOptions,
): Promise<TxResponseOf[K]> {
  const routed = await sendToPrimary({
    partitionId,
    directory: deps.locator,
    ...(options.firstTarget !== undefined && { first: options.firstTarget }),
    send: (to) => deps.request(to, body, { timeoutMs: options.timeoutMs }),
    attemptsMax: options.attemptsMax ?? LIMITS.primaryRequestAttemptsMax,
    backoffMs: (attempt) => backoffMs(attempt, LIMITS.resolutionBackoffMsMin, LIMITS.resolutionBackoffMsMax),
    ...(options.timers !== undefined && { timers: options.timers }),
    ...(options.deadline !== undefined && { deadline: options.deadline }),
  });
  if (routed.kind !== 'ok') throw routed.error;
  return routed.response;
}
