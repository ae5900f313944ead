/**
 * UpdateBatch, the data writes of several txs in one entry (replica setting `batchWrites`): its codec is as strict as
 * the other commands' on both sides, and it applies exactly as its items' own Update/UpdateAll commands would, one
 * after the other, at the entry's one effective timestamp, each item checked by itself (rule 4, and the
 * timestamp-moved rule against the entry's proposal timestamp).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HybridTimestamp } from '../../core/ids.js';
import { LIMITS } from '../../core/limits.js';
import {
  applyAll,
  assertCommandRefused,
  at,
  incarnation,
  LogBuilder,
  lease,
  leaseCommand,
  PARTITION,
  put,
  remove,
  type TestReplica,
  testReplica,
  txIdAt,
  update,
  updateAll,
  updateBatch,
} from '../../testing/replica-support.js';
import type { ApplyResult, DataResult } from './apply-result.js';
import { commandProblem, type DataItem, dataTokenOf, decodeCommand, encodeCommand, isDataCommand } from './commands.js';
import { tokenOf } from './lease.js';
import { proposeCommand } from './proposals.js';

const L = lease(incarnation('p1'), 10, 100);
const L2 = lease(incarnation('p2'), 100, 200);
const T1 = txIdAt(5, 1);
const T2 = txIdAt(5, 2);
const T3 = txIdAt(5, 3);

/** Three txs' writes: an Update, an UpdateAll and a one-phase Update, under L with seqs 1..3. */
function threeItems(tsMs: number) {
  return updateBatch(tsMs, [
    update(L, 1, put('a', 1), tsMs, { txId: T1 }),
    updateAll(L, 2, [put('b', 2), remove('c')], tsMs, { txId: T2 }),
    update(L, 3, put('d', 4), tsMs, { txId: T3, full: true }),
  ]);
}

describe('UpdateBatch command codec', () => {
  it('round-trips, names its token for the proposal tracker, and is not a plain data command', () => {
    const batch = threeItems(20);
    const decoded = decodeCommand(encodeCommand(batch));
    assert.ok(decoded.kind === 'UpdateBatch');
    assert.equal(decoded.items.length, 3);
    assert.deepEqual(decoded.items[1]?.writes, [put('b', 2), remove('c')]);
    assert.equal(decoded.ts, at(20));
    assert.deepEqual(dataTokenOf(decoded), tokenOf(L));
    assert.equal(isDataCommand(decoded), false);
    assert.deepEqual(dataTokenOf(update(L, 1, put('a', 1), 20)), tokenOf(L));
    assert.equal(dataTokenOf(leaseCommand(L, null, 5)), undefined);
  });

  it('refuses fewer than two or too many items, mixed tokens, repeated txs, seqs out of order, shared keys', () => {
    const batch = threeItems(20);
    const [i1, i2, i3] = batch.items as [DataItem, DataItem, DataItem];
    const withItems = (items: readonly unknown[]) => ({ ...batch, items });
    assertCommandRefused(withItems([i1]), /at least two/);
    assertCommandRefused(withItems([]), /at least two/);
    const many = Array.from({ length: LIMITS.updateBatchItemsMax + 1 }, (_, i) => ({
      ...i1,
      seq: i + 1,
      txId: txIdAt(5, i + 10),
      writes: [put(`k${i}`, i)],
    }));
    assertCommandRefused(withItems(many), /more than/);
    assertCommandRefused(withItems([i1, { ...i2, token: tokenOf(L2) }]), /different tokens/);
    assertCommandRefused(withItems([i1, { ...i2, txId: T1 }]), /same tx/);
    assertCommandRefused(withItems([i2, i1]), /strictly increase/);
    assertCommandRefused(withItems([i1, { ...i2, seq: 1 }]), /strictly increase/);
    assertCommandRefused(withItems([i1, { ...i2, writes: [put('a', 9)] }]), /same key is written by two items/);
    assertCommandRefused(withItems([i1, { ...i2, extra: 1 }]), /item: unknown field extra/);
    assertCommandRefused(withItems([i1, { ...i2, writes: [] }]), /item: writes must be a non-empty array/);
    assertCommandRefused(withItems([i1, { ...i2, txId: 'bad' }]), /item: txId/);
    assertCommandRefused(withItems([i1, { ...i2, seq: 0 }]), /item: seq/);
    assertCommandRefused({ ...batch, extra: 1 }, /unknown field extra/);
    const { items: _items, ...noItems } = batch;
    assertCommandRefused(noItems, /missing field items/);
    assert.equal(commandProblem(withItems([i1, i3])), undefined);
  });

  it('refuses items whose writes together exceed what one UpdateAll may carry', () => {
    const half = Math.floor(LIMITS.updateAllWritesMax / 2) + 1;
    const writes = (prefix: string) => Array.from({ length: half }, (_, i) => put(`${prefix}${i}`, i));
    const batch = updateBatch(20, [
      updateAll(L, 1, writes('x'), 20, { txId: T1 }),
      updateAll(L, 2, writes('y'), 20, { txId: T2 }),
    ]);
    assertCommandRefused(batch, /more than .* writes/);
  });
});

function latest(r: TestReplica, key: string): unknown {
  const mv = r.engine.mvPartition(PARTITION);
  const rowId = mv.rowIdOf(key);
  if (rowId === undefined) return undefined;
  const read = mv.readLatest(rowId);
  if (read.kind === 'empty') return 'empty';
  return read.kind === 'intent' ? { intent: read.txId, value: read.value } : { at: read.commitTs, value: read.value };
}

function withoutTs(result: ApplyResult | DataResult | undefined): unknown {
  if (result === undefined) return undefined;
  const { appliedTs: _ts, ...rest } = result;
  return rest;
}

const KEYS = ['a', 'b', 'c', 'd'];

describe('UpdateBatch apply', () => {
  it('applies as its items would one after the other: the same storage and the same per-item results', () => {
    const tx = (n: number) => txIdAt(5, n);
    const commands = [
      update(L, 1, put('a', 1), 20, { txId: tx(1) }),
      updateAll(L, 2, [put('b', 2), remove('c')], 20, { txId: tx(2) }),
      update(L, 3, put('d', 4), 20, { txId: tx(3) }),
    ];
    const batched = testReplica();
    const [, result] = applyAll(batched, new LogBuilder(), [leaseCommand(L, null, 5), updateBatch(20, commands)]);
    assert.ok(result?.kind === 'UPDATED_BATCH');
    assert.equal(result.appliedTs, at(20));
    assert.ok(result.items.every((item) => item.appliedTs === at(20)));
    // One after the other, each at its own proposal timestamp (a tx write applies only at its ts).
    const alone = testReplica();
    const one = (i: number) => ({ ...commands[i]!, ts: at(20, i) });
    const results = applyAll(alone, new LogBuilder(), [leaseCommand(L, null, 5), one(0), one(1), one(2)]);
    assert.deepEqual(result.items.map(withoutTs), results.slice(1).map(withoutTs));
    for (const key of KEYS) assert.deepEqual(latest(batched, key), latest(alone, key), key);
    assert.equal(batched.sm.leaseState().lastSeq, 3);
    for (const n of [1, 2, 3]) assert.equal(batched.map.get(tx(n))?.state, 'PENDING');
  });

  it('a one-phase item writes a committed version at the entry effective timestamp', () => {
    const r = testReplica();
    const [, result] = applyAll(r, new LogBuilder(), [leaseCommand(L, null, 5), threeItems(20)]);
    assert.ok(result?.kind === 'UPDATED_BATCH');
    assert.deepEqual(
      result.items.map((i) => i.kind),
      ['UPDATED', 'UPDATED', 'UPDATED'],
    );
    assert.deepEqual(latest(r, 'd'), { at: at(20), value: 4 });
    assert.deepEqual(latest(r, 'a'), { intent: T1, value: 1 });
  });

  it('an item with a stale sequence number is a no-op while the items around it apply', () => {
    const r = testReplica();
    const batch = updateBatch(30, [
      update(L, 2, put('a', 1), 30, { txId: T1 }),
      update(L, 6, put('b', 2), 30, { txId: T2 }),
      update(L, 7, put('c', 3), 30, { txId: T3 }),
    ]);
    const results = applyAll(r, new LogBuilder(), [
      leaseCommand(L, null, 5),
      update(L, 5, put('z', 0), 20, { full: true }),
      batch,
    ]);
    const result = results[2];
    assert.ok(result?.kind === 'UPDATED_BATCH');
    const [first, second, third] = result.items;
    assert.ok(first?.kind === 'PRIMARY_MISS' && first.reason === 'stale-sequence');
    assert.equal(second?.kind, 'UPDATED');
    assert.equal(third?.kind, 'UPDATED');
    assert.equal(latest(r, 'a'), undefined);
    assert.deepEqual(latest(r, 'b'), { intent: T2, value: 2 });
    assert.equal(r.sm.leaseState().lastSeq, 7);
    assert.equal(r.map.get(T1), undefined, 'no map entry for the no-op item');
  });

  it('a batch under a lease that is not current writes nothing, item by item', () => {
    const r = testReplica();
    const stale = updateBatch(120, [
      update(L, 1, put('a', 1), 120, { txId: T1 }),
      update(L, 2, put('b', 2), 120, { txId: T2, full: true }),
    ]);
    const results = applyAll(r, new LogBuilder(), [leaseCommand(L, null, 5), leaseCommand(L2, L, 101), stale]);
    const result = results[2];
    assert.ok(result?.kind === 'UPDATED_BATCH');
    for (const item of result.items) {
      assert.ok(item.kind === 'PRIMARY_MISS' && item.reason === 'token-not-current');
      assert.deepEqual(item.current, L2);
    }
    assert.equal(latest(r, 'a'), undefined);
    assert.equal(latest(r, 'b'), undefined);
    assert.equal(r.sm.leaseState().lastSeq, 0);
  });

  it('behind an entry with a higher timestamp, its tx items are no-ops (timestamp-moved) and a one-phase item applies', () => {
    const r = testReplica();
    const late = updateBatch(30, [
      update(L, 2, put('a', 1), 30, { txId: T1 }),
      update(L, 3, put('b', 2), 30, { txId: T2, full: true }),
      updateAll(L, 4, [put('c', 3), put('d', 4)], 30, { txId: T3 }),
    ]);
    const results = applyAll(r, new LogBuilder(), [
      leaseCommand(L, null, 5),
      update(L, 1, put('z', 0), 40, { full: true }),
      late,
    ]);
    const result = results[2];
    const e: HybridTimestamp = (at(40) + 1n) as HybridTimestamp;
    assert.ok(result?.kind === 'UPDATED_BATCH' && result.appliedTs === e);
    assert.deepEqual(
      result.items.map((i) => (i.kind === 'PRIMARY_MISS' ? i.reason : i.kind)),
      ['timestamp-moved', 'UPDATED', 'timestamp-moved'],
    );
    assert.deepEqual(latest(r, 'b'), { at: e, value: 2 });
    assert.equal(latest(r, 'a'), undefined);
    assert.equal(latest(r, 'c'), undefined);
  });

  it('a conflicting intent stops only the item that meets it', () => {
    const r = testReplica();
    const results = applyAll(r, new LogBuilder(), [
      leaseCommand(L, null, 5),
      update(L, 1, put('a', 0), 20, { txId: T3 }),
      updateBatch(30, [update(L, 2, put('a', 1), 30, { txId: T1 }), update(L, 3, put('b', 2), 30, { txId: T2 })]),
    ]);
    const result = results[2];
    assert.ok(result?.kind === 'UPDATED_BATCH');
    assert.ok(result.items[0]?.kind === 'WRITE_INTENT_CONFLICT' && result.items[0].intentTxId === T3);
    assert.equal(result.items[1]?.kind, 'UPDATED');
    assert.deepEqual(latest(r, 'a'), { intent: T3, value: 0 });
  });

  it('its proposer gets the per-item result from its own replica', async () => {
    const r = testReplica({ self: incarnation('p1') });
    const log = new LogBuilder();
    applyAll(r, log, [leaseCommand(L, null, 5)]);
    r.physical.ms = 20;
    const batch = threeItems(20);
    const result = await proposeCommand(
      r.tracker,
      (p) => ({ ...batch, ts: p.ts, proposalId: p.id }),
      async (bytes) => r.sm.apply([{ ...log.noop(), kind: 'data', data: bytes }]),
    );
    assert.ok(result.kind === 'UPDATED_BATCH');
    assert.equal(result.items.length, 3);
    assert.equal(r.tracker.inFlightCount, 0);
  });
});
