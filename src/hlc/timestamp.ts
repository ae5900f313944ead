/**
 * Hybrid timestamps: one unsigned 64-bit integer, physical milliseconds in the high 48 bits and a logical counter in
 * the low 16 bits, so that plain integer order is timestamp order and adding 1 to a full logical counter carries into
 * the physical part. 0n means "none" (NULL_TIMESTAMP); the smallest real timestamp is 1n (0 ms, logical 1).
 */
import { assert } from '../core/assert.js';
import type { HybridTimestamp } from '../core/ids.js';

export type { HybridTimestamp } from '../core/ids.js';

export const LOGICAL_BITS = 16n;
export const LOGICAL_MASK = (1n << LOGICAL_BITS) - 1n;
export const PHYSICAL_MS_MAX = 2 ** 48 - 1;
export const NULL_TIMESTAMP = 0n as HybridTimestamp;
export const MIN_TIMESTAMP = 1n as HybridTimestamp;
export const MAX_TIMESTAMP = ((1n << 64n) - 1n) as HybridTimestamp;

/** The timestamp of `physicalMs` milliseconds since the Unix epoch and a `logical` counter. */
export function hybridTimestamp(physicalMs: number, logical = 0): HybridTimestamp {
  assert(Number.isInteger(physicalMs) && physicalMs >= 0 && physicalMs <= PHYSICAL_MS_MAX, 'physical ms out of range');
  assert(Number.isInteger(logical) && logical >= 0 && logical <= Number(LOGICAL_MASK), 'logical out of range');
  return ((BigInt(physicalMs) << LOGICAL_BITS) | BigInt(logical)) as HybridTimestamp;
}

/** Brands a raw bigint (decoded from the wire or disk) after checking its range. */
export function asTimestamp(value: bigint): HybridTimestamp {
  assert(value >= 0n && value <= MAX_TIMESTAMP, 'timestamp out of range');
  return value as HybridTimestamp;
}

/** The physical part of `ts`: milliseconds since the Unix epoch. */
export function physicalMs(ts: HybridTimestamp): number {
  return Number(ts >> LOGICAL_BITS);
}

/** The logical part of `ts`. */
export function logical(ts: HybridTimestamp): number {
  return Number(ts & LOGICAL_MASK);
}

export function maxTimestamp(a: HybridTimestamp, b: HybridTimestamp): HybridTimestamp {
  return a > b ? a : b;
}

export function minTimestamp(a: HybridTimestamp, b: HybridTimestamp): HybridTimestamp {
  return a < b ? a : b;
}

/** The next timestamp after `ts` (logical + 1, carrying into the physical part). */
export function tick(ts: HybridTimestamp): HybridTimestamp {
  return (ts + 1n) as HybridTimestamp;
}

/** `ts` moved by whole milliseconds (may be negative), logical part kept; clamped at 0. */
export function addMs(ts: HybridTimestamp, deltaMs: number): HybridTimestamp {
  const moved = ts + (BigInt(Math.trunc(deltaMs)) << LOGICAL_BITS);
  return (moved < 0n ? 0n : moved) as HybridTimestamp;
}

/** `ts` for people: `<physical ms>.<logical>` (`null` for the null timestamp). */
export function formatTimestamp(ts: HybridTimestamp): string {
  return ts === NULL_TIMESTAMP ? 'null' : `${physicalMs(ts)}.${logical(ts)}`;
}
