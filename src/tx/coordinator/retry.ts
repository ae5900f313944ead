/**
 * The one retry policy of every client-facing loop: `transaction(...)` on the embedded, the node-side and the remote
 * client, RO transactions, implicit reads and implicit writes.
 *
 * What is retried: a coded error marked retryable (the attempt certainly left nothing behind: an abort, a wait-die
 * death, a refusal before acting, a node that is down), never TX_OUTCOME_UNKNOWN or TX_MISMATCHING_OUTCOME (both say
 * the attempt may be, or was, decided otherwise than asked), never anything uncoded. A caller may narrow it further
 * (`canRetry`: the remote client stops once its connection is gone). How often: `retries` times after the first
 * attempt, with a pause before each retry doubling from `backoffMsMin` to `backoffMsMax`; the pause is the caller's
 * (the injected timers, or the simulator's virtual time), so the loop stays deterministic.
 */

import { BasaltError, invalidArgument } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import type { Random } from '../../env/random.js';
import { backoffMs } from '../../route/backoff.js';

export interface RetryOptions {
  /** Retries after the first attempt (default LIMITS.txRunRetriesDefault). */
  readonly retries?: number;
  /** Backoff before a retry: doubling from min to max (defaults: the coordinator's retry backoff limits). */
  readonly backoffMsMin?: number;
  /** Longest pause before a retry (default 1 s). */
  readonly backoffMsMax?: number;
}

export interface RetryPolicy {
  readonly retries: number;
  readonly backoffMsMin: number;
  readonly backoffMsMax: number;
  /**
   * Spreads each pause over [0.5, 1.5) of its backoff. Clients that collided on a lock collide again if they all
   * wait the same time; drawn from an injected Random, so a simulated run still replays.
   */
  readonly jitter?: Random;
}

/** The policy `options` ask for, with the defaults; malformed options are INVALID_ARGUMENT. */
export function retryPolicy(options: RetryOptions = {}, jitter?: Random): RetryPolicy {
  const retries = options.retries ?? LIMITS.txRunRetriesDefault;
  const backoffMsMin = options.backoffMsMin ?? LIMITS.txRetryBackoffMsMin;
  const backoffMsMax = options.backoffMsMax ?? LIMITS.txRetryBackoffMsMax;
  if (!Number.isInteger(retries) || retries < 0) throw invalidArgument('retries must be an integer >= 0', { retries });
  if (!(backoffMsMin > 0 && backoffMsMax >= backoffMsMin)) {
    throw invalidArgument('backoff bounds must satisfy 0 < min <= max', { backoffMsMin, backoffMsMax });
  }
  return jitter === undefined
    ? { retries, backoffMsMin, backoffMsMax }
    : { retries, backoffMsMin, backoffMsMax, jitter };
}

/** Retryable coded errors only; never an outcome that may have been a commit. */
export function isRetryable(error: unknown): boolean {
  if (!(error instanceof BasaltError)) return false;
  if (error.code === 'TX_OUTCOME_UNKNOWN' || error.code === 'TX_MISMATCHING_OUTCOME') return false;
  return error.retryable;
}

/** What one attempt of a transaction runs on: any transaction handle, local or remote. */
export interface Finishable {
  commit(): Promise<unknown>;
  rollback(): Promise<unknown>;
}

/**
 * One attempt: `fn` on `tx`, then commit; on any failure the attempt is rolled back before the error goes on (after a
 * commit that failed or could not tell, rollback is a no-op; otherwise it releases the attempt's locks).
 */
export async function commitOrRollBack<X extends Finishable, T>(tx: X, fn: (tx: X) => Promise<T>): Promise<T> {
  try {
    const result = await fn(tx);
    await tx.commit();
    return result;
  } catch (error) {
    await tx.rollback().catch(() => {});
    throw error;
  }
}

/**
 * Runs `attempt` (given its number, from 1) until it succeeds, fails with an error that is not retried, or has been
 * retried `policy.retries` times; `pause` waits before each retry.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  pause: (delayMs: number) => Promise<void>,
  attempt: (n: number) => Promise<T>,
  canRetry: (error: unknown) => boolean = () => true,
): Promise<T> {
  for (let n = 1; ; n++) {
    try {
      return await attempt(n);
    } catch (error) {
      if (!isRetryable(error) || n > policy.retries || !canRetry(error)) throw error;
    }
    const delayMs = backoffMs(n, policy.backoffMsMin, policy.backoffMsMax);
    await pause(policy.jitter === undefined ? delayMs : Math.round(delayMs * (0.5 + policy.jitter.next())));
  }
}
