/**
 * Physical time, injected. Protocol code never reads the wall clock directly: the real implementation wraps Date.now,
 * the simulator gives each node its own virtual clock with offset and drift.
 */
export interface Clock {
  /** Physical wall-clock milliseconds since the Unix epoch. May jump backwards (NTP steps, simulated skew). */
  nowMs(): number;
  /** Monotonic milliseconds from an arbitrary origin, for measuring elapsed time and latencies. Never goes back. */
  monotonicMs(): number;
}
