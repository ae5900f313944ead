import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BasaltError, isBasaltError } from '../../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { asTimestamp as timestamp } from '../../hlc/timestamp.js';
import { PipelinedWrites } from './pipelined-writes.js';

const P = 't1p0' as PartitionId;
const A = '0000000000000001+n1+000000000001' as TxId;
const B = '0000000000000001+n1+000000000002' as TxId;

test('a confirmation waits for every tracked write of the tx and answers the largest effective timestamp', async () => {
  const writes = new PipelinedWrites(P);
  let applyLater: (ts: HybridTimestamp) => void = () => {};
  writes.track(A, Promise.resolve(timestamp(5n)));
  writes.track(A, new Promise((resolve) => (applyLater = resolve)));
  let answered = false;
  const confirmed = writes.confirm(A).then((ts) => {
    answered = true;
    return ts;
  });
  await new Promise((r) => setImmediate(r));
  assert.equal(answered, false, 'not before the second write applied');
  applyLater(timestamp(9n));
  assert.equal(await confirmed, timestamp(9n));
  assert.equal(writes.size, 0, 'a confirmed tx is forgotten');
});

test('a write that did not apply fails the confirmation with its own error', async () => {
  const writes = new PipelinedWrites(P);
  writes.track(A, Promise.resolve(timestamp(5n)));
  writes.track(A, Promise.reject(new BasaltError('PRIMARY_MISS', 'applied as a no-op')));
  await assert.rejects(writes.confirm(A), (e: unknown) => isBasaltError(e, 'PRIMARY_MISS'));
});

test('nothing tracked (cleaned up, or another primary) is never confirmed', async () => {
  const writes = new PipelinedWrites(P);
  await assert.rejects(writes.confirm(A), (e: unknown) => isBasaltError(e, 'TX_ABORTED'));
  writes.track(A, Promise.resolve(timestamp(5n)));
  writes.forget(A);
  await assert.rejects(writes.confirm(A), (e: unknown) => isBasaltError(e, 'TX_ABORTED'));
});

test('at most txsMax txs are tracked; a tracked tx still admits its next writes', () => {
  const writes = new PipelinedWrites(P, 1);
  assert.equal(writes.admits(A), true);
  writes.track(A, Promise.resolve(timestamp(1n)));
  assert.equal(writes.admits(A), true, 'the tracked tx');
  assert.equal(writes.admits(B), false, 'a new tx is answered after its apply instead');
  writes.clear('lease-changed');
  assert.equal(writes.admits(B), true);
});

test('a lease change drops every record and answers a confirmation waiting for a write that never applied', async () => {
  const writes = new PipelinedWrites(P);
  writes.track(A, new Promise<HybridTimestamp>(() => {}));
  writes.track(B, Promise.resolve(timestamp(3n)));
  let operationsDone: () => void = () => {};
  const confirmA = writes.confirm(A);
  const confirmB = writes.confirm(B, new Promise((resolve) => (operationsDone = resolve)));
  await new Promise((r) => setImmediate(r));
  writes.clear('lease-changed');
  assert.equal(writes.size, 0);
  const aborted = (e: unknown) => isBasaltError(e, 'TX_ABORTED') && e.details?.['reason'] === 'lease-changed';
  await assert.rejects(confirmA, aborted, 'waiting for the apply');
  await assert.rejects(confirmB, aborted, 'waiting for the operations in flight');
  operationsDone();
  await assert.rejects(writes.confirm(B), (e: unknown) => isBasaltError(e, 'TX_ABORTED'), 'nothing tracked any more');
});

test("a write that failed after its early answer fails the tx's later operations here; an untracked tx records nothing", () => {
  const writes = new PipelinedWrites(P);
  const lost = Promise.reject(new BasaltError('NOT_LEADER', 'the proposal was overwritten by a new leader'));
  writes.track(A, lost);
  assert.equal(writes.failedError(A), undefined, 'nothing failed yet');
  writes.fail(A, new BasaltError('NOT_LEADER', 'the proposal was overwritten by a new leader'));
  const failed = writes.failedError(A);
  assert.ok(isBasaltError(failed, 'TX_ABORTED'));
  assert.equal(failed.details?.['reason'], 'pipelined-write-failed');
  assert.equal(failed.details?.['code'], 'NOT_LEADER');
  writes.fail(B, new BasaltError('PRIMARY_MISS', 'applied as a no-op'));
  assert.equal(writes.failedError(B), undefined);
  assert.equal(writes.size, 1, 'a failure does not start tracking a tx');
  writes.forget(A);
  assert.equal(writes.failedError(A), undefined, 'cleaned up: the cleanup refuses its operations instead');
});
