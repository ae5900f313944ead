import nodeAssert from 'node:assert/strict';
import { test } from 'node:test';
import { AssertionError, assert, unreachable } from './assert.js';

function messageOf(fn: () => void): string {
  try {
    fn();
  } catch (error) {
    nodeAssert.ok(error instanceof AssertionError, 'an assertion fails with AssertionError');
    return error.message;
  }
  nodeAssert.fail('expected an AssertionError');
}

test('a passing assertion returns; a failing one throws AssertionError with its constant message', () => {
  assert(true, 'never shown', 1, 2, 3);
  assert(1, 'truthy passes');
  nodeAssert.equal(
    messageOf(() => assert(false)),
    'assertion failed',
  );
  nodeAssert.equal(
    messageOf(() => assert(0, 'commit beyond last index')),
    'commit beyond last index',
  );
});

test('details are appended only on failure, formatted by type, an explicit undefined included', () => {
  nodeAssert.equal(
    messageOf(() => assert(false, 'commit beyond last index', 7, 5)),
    'commit beyond last index (7, 5)',
  );
  nodeAssert.equal(
    messageOf(() => assert(false, 'versions out of order', 12n, undefined)),
    'versions out of order (12n, undefined)',
  );
  nodeAssert.equal(
    messageOf(() => assert(false, 'state', 'PENDING', { ts: 3n, n: null }, null)),
    'state ("PENDING", {"ts":"3n","n":null}, null)',
  );
  const circular: Record<string, unknown> = {};
  circular['self'] = circular;
  nodeAssert.equal(
    messageOf(() => assert(false, 'circular', circular)),
    'circular ([object Object])',
  );
});

test('unreachable names the value that reached it', () => {
  nodeAssert.equal(
    messageOf(() => unreachable({ kind: 'x' } as never, 'unknown kind')),
    'unknown kind: {"kind":"x"}',
  );
});
