/**
 * Lock modes and the lock-key scheme for phantom protection (multiple-granularity locking, as Ignite does).
 *
 * Modes: IS, IX (intentions), S (shared), SIX (S + IX), X (exclusive). Compatibility is the standard matrix; the upgrade
 * of a held mode by a requested one is their least upper bound (`joinModes`): the weakest mode that conflicts with
 * exactly what either of them conflicts with.
 *
 * Key scheme (DESIGN §2 "Locks", rule 18): every partition has one *partition key*, every row key a *row key*.
 * - point read of k (get, getAll; whether or not a row exists): IS on the partition, then S on k;
 * - point write of k (put, remove, one-phase write), or a locking read of k (`forUpdate`, which spares a
 *   read-modify-write the S→X upgrade that wait-die refuses a younger tx): IX on the partition, then X on k;
 * - scan of any range of the partition: S on the partition.
 * IX conflicts with S, so while a tx holds a scan's S lock no other tx can insert into (or change) that partition until
 * it finishes, and a scan waits for writers in the partition: no phantoms. A get of a missing key conflicts with a
 * later insert of it through the row lock. A tx that scans after writing upgrades IX to SIX. This is coarser than
 * range locks (a scan blocks every writer of its partition) but needs nothing from storage; finer range locks would
 * keep the same API.
 */
import { assert } from '../../core/assert.js';
import type { Brand, PartitionId } from '../../core/ids.js';

export const LOCK_MODES = ['IS', 'IX', 'S', 'SIX', 'X'] as const;
export type LockMode = (typeof LOCK_MODES)[number];

/** A lockable resource: a partition (for scans and intentions) or one row key of a partition. */
export type LockKey = Brand<string, 'LockKey'>;

const Y = true;
const N = false;

/** LOCK_COMPATIBILITY[held][requested]: may two different txs hold these modes on one key at once. Symmetric. */
export const LOCK_COMPATIBILITY: Readonly<Record<LockMode, Readonly<Record<LockMode, boolean>>>> = {
  IS: { IS: Y, IX: Y, S: Y, SIX: Y, X: N },
  IX: { IS: Y, IX: Y, S: N, SIX: N, X: N },
  S: { IS: Y, IX: N, S: Y, SIX: N, X: N },
  SIX: { IS: Y, IX: N, S: N, SIX: N, X: N },
  X: { IS: N, IX: N, S: N, SIX: N, X: N },
};

/** LOCK_UPGRADE[held][requested]: the mode a tx holds after also acquiring `requested` (least upper bound). */
export const LOCK_UPGRADE: Readonly<Record<LockMode, Readonly<Record<LockMode, LockMode>>>> = {
  IS: { IS: 'IS', IX: 'IX', S: 'S', SIX: 'SIX', X: 'X' },
  IX: { IS: 'IX', IX: 'IX', S: 'SIX', SIX: 'SIX', X: 'X' },
  S: { IS: 'S', IX: 'SIX', S: 'S', SIX: 'SIX', X: 'X' },
  SIX: { IS: 'SIX', IX: 'SIX', S: 'SIX', SIX: 'SIX', X: 'X' },
  X: { IS: 'X', IX: 'X', S: 'X', SIX: 'X', X: 'X' },
};

export function isCompatible(a: LockMode, b: LockMode): boolean {
  return LOCK_COMPATIBILITY[a][b];
}

export function joinModes(held: LockMode, requested: LockMode): LockMode {
  return LOCK_UPGRADE[held][requested];
}

/** True if holding `held` already grants `requested` (re-entrant acquisition is immediate). */
export function covers(held: LockMode, requested: LockMode): boolean {
  return joinModes(held, requested) === held;
}

/** The intention mode taken on a partition before locking one of its rows in `mode`. */
export function intentionFor(mode: 'S' | 'X'): 'IS' | 'IX' {
  return mode === 'S' ? 'IS' : 'IX';
}

export function partitionLockKey(partition: PartitionId): LockKey {
  assert(!partition.includes(':'), 'partition ids contain no colon');
  return `p:${partition}` as LockKey;
}

export function rowLockKey(partition: PartitionId, key: string): LockKey {
  assert(!partition.includes(':'), 'partition ids contain no colon');
  return `r:${partition}:${key}` as LockKey;
}

export interface LockStep {
  readonly key: LockKey;
  readonly mode: LockMode;
}

/** Locks of a point read ('S') or write ('X') of `key`, in acquisition order: partition intention, then the row. */
export function pointLockPlan(partition: PartitionId, key: string, mode: 'S' | 'X'): readonly LockStep[] {
  return [
    { key: partitionLockKey(partition), mode: intentionFor(mode) },
    { key: rowLockKey(partition, key), mode },
  ];
}

/** Locks of a scan of any range of `partition` (phantom protection). */
export function scanLockPlan(partition: PartitionId): readonly LockStep[] {
  return [{ key: partitionLockKey(partition), mode: 'S' }];
}
