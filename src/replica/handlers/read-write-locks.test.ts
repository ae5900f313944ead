/** The lock plan of each RW operation on a primary: reads share, writes and reads `forUpdate` lock exclusively. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { partitionId } from '../../core/ids.js';
import { type LockStep, partitionLockKey, rowLockKey } from '../../tx/core/lock-modes.js';
import { operationLockPlan } from './read-write.js';

const P = partitionId('t_0');

function plan(steps: readonly LockStep[]): string[] {
  return steps.map((s) => `${s.mode} ${s.key}`);
}

function point(intention: 'IS' | 'IX', row: 'S' | 'X', keys: readonly string[]): string[] {
  return [`${intention} ${partitionLockKey(P)}`, ...keys.map((k) => `${row} ${rowLockKey(P, k)}`)];
}

describe('RW operation lock plans', () => {
  it('a plain read takes IS on the partition and S on its rows', () => {
    assert.deepEqual(plan(operationLockPlan(P, { op: 'get', key: 'a' })), point('IS', 'S', ['a']));
    assert.deepEqual(plan(operationLockPlan(P, { op: 'get', key: 'a', forUpdate: false })), point('IS', 'S', ['a']));
    assert.deepEqual(plan(operationLockPlan(P, { op: 'getAll', keys: ['b', 'a'] })), point('IS', 'S', ['a', 'b']));
  });

  it('a read forUpdate takes IX on the partition and X on each row (sorted, once), as a write does', () => {
    assert.deepEqual(plan(operationLockPlan(P, { op: 'get', key: 'a', forUpdate: true })), point('IX', 'X', ['a']));
    const getAll = operationLockPlan(P, { op: 'getAll', keys: ['c', 'a', 'c'], forUpdate: true });
    assert.deepEqual(plan(getAll), point('IX', 'X', ['a', 'c']));
    const put = operationLockPlan(P, {
      op: 'putAll',
      entries: [
        { key: 'c', value: 1 },
        { key: 'a', value: 2 },
      ],
    });
    assert.deepEqual(plan(getAll), plan(put));
  });

  it('a scan takes S on the partition only', () => {
    const scan = operationLockPlan(P, { op: 'scan', range: { kind: 'prefix', prefix: 'a' }, limit: 10 });
    assert.deepEqual(plan(scan), [`S ${partitionLockKey(P)}`]);
  });
});
