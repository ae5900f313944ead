import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { partitionId } from '../../core/ids.js';
import {
  covers,
  isCompatible,
  joinModes,
  LOCK_MODES,
  type LockMode,
  partitionLockKey,
  pointLockPlan,
  rowLockKey,
  scanLockPlan,
} from './lock-modes.js';

/** The standard multiple-granularity matrix, rows = held, columns IS IX S SIX X. */
const SPEC: Readonly<Record<LockMode, string>> = {
  IS: 'YYYY-',
  IX: 'YY---',
  S: 'Y-Y--',
  SIX: 'Y----',
  X: '-----',
};

describe('lock modes', () => {
  it('compatibility of every pair of modes is the standard matrix', () => {
    for (const held of LOCK_MODES) {
      LOCK_MODES.forEach((requested, i) => {
        assert.equal(isCompatible(held, requested), SPEC[held][i] === 'Y', `${held} vs ${requested}`);
      });
    }
  });

  it('compatibility is symmetric', () => {
    for (const a of LOCK_MODES) for (const b of LOCK_MODES) assert.equal(isCompatible(a, b), isCompatible(b, a));
  });

  it('an upgrade conflicts with exactly what the held or the requested mode conflicts with', () => {
    for (const a of LOCK_MODES) {
      for (const b of LOCK_MODES) {
        const j = joinModes(a, b);
        assert.equal(joinModes(b, a), j, 'join is commutative');
        for (const c of LOCK_MODES) {
          assert.equal(isCompatible(j, c), isCompatible(a, c) && isCompatible(b, c), `${a}+${b}=${j} vs ${c}`);
        }
      }
    }
  });

  it('the upgrades named by the protocol: S+X = X, IX+S = SIX, IS+IX = IX, SIX+IS = SIX', () => {
    assert.equal(joinModes('S', 'X'), 'X');
    assert.equal(joinModes('IX', 'S'), 'SIX');
    assert.equal(joinModes('IS', 'IX'), 'IX');
    assert.equal(joinModes('SIX', 'IS'), 'SIX');
  });

  it('a held mode covers itself and every weaker mode, and nothing stronger', () => {
    assert.ok(covers('X', 'S') && covers('X', 'IX') && covers('S', 'IS') && covers('SIX', 'S') && covers('SIX', 'IX'));
    assert.ok(!covers('S', 'X') && !covers('IX', 'S') && !covers('IS', 'IX'));
    for (const m of LOCK_MODES) assert.ok(covers(m, m));
  });

  it('point operations take an intention lock on the partition, then the row; a scan locks the partition', () => {
    const p = partitionId('t1p3');
    assert.deepEqual(pointLockPlan(p, 'k', 'S'), [
      { key: partitionLockKey(p), mode: 'IS' },
      { key: rowLockKey(p, 'k'), mode: 'S' },
    ]);
    assert.deepEqual(
      pointLockPlan(p, 'k', 'X').map((s) => s.mode),
      ['IX', 'X'],
    );
    assert.deepEqual(scanLockPlan(p), [{ key: partitionLockKey(p), mode: 'S' }]);
    assert.notEqual(partitionLockKey(p), rowLockKey(p, ''));
    assert.notEqual(rowLockKey(partitionId('t1p1'), '3:k'), rowLockKey(partitionId('t1p13'), ':k'));
  });
});
