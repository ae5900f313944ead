/**
 * The one backoff of the protocol's loops (routes to a primary, finish and cleanup rounds, resolution retries, the
 * client's transaction retries): exponential from a minimum, capped at a maximum. Jitter, where a loop needs it, is
 * the caller's (seeded: src/env Random).
 */
/** The pause before retry `attempt` (1 = the first retry): doubling from min, capped at max. */
export function backoffMs(attempt: number, minMs: number, maxMs: number): number {
  const exponent = Math.min(Math.max(attempt - 1, 0), 30);
  return Math.min(maxMs, minMs * 2 ** exponent);
}
