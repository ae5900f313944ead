/**
 * Randomness, injected. Election timeouts, backoff jitter, ephemeral ids and workload choices all draw from a Random
 * so that one seed replays a whole simulated cluster. `fork(label)` derives an independent stream for a component,
 * so adding draws in one component does not shift the draws of another.
 */
export interface Random {
  /** Uniform float in [0, 1). */
  next(): number;
  /** Uniform integer in [0, maxExclusive). */
  int(maxExclusive: number): number;
  /** A version-4 style UUID string drawn from this stream. */
  uuid(): string;
  /** An independent stream derived from this one and `label`. */
  fork(label: string): Random;
}
