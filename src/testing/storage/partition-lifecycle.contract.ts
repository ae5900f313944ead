/**
 * The whole-partition contract of `StorageEngine` (`partitions` and `destroyPartition`), run against each
 * implementation: the listing names exactly the partitions holding records, in either storage; destroying removes
 * every record of both storages of one partition and nothing of any other, is idempotent, refuses further use of the
 * objects handed out before, and leaves the partition empty at applied index 0 when it is opened again.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../../core/errors.js';
import type { PartitionId } from '../../core/ids.js';
import type { StorageEngine } from '../../storage/storage-engine.js';
import { idx, type OpenEngine, pid, term, ts, tx, withEngine } from './contract-harness.js';

const P1 = pid('t1p0');
const P2 = pid('t1p1');
/** Shares P1's bytes as a prefix of its id: the destroy range must end at P1's NUL, not take this one too. */
const P1_LONGER = pid('t1p00');

/** Data, intents, tx state, applied positions and metadata records in both storages of `p`. */
function fill(engine: StorageEngine, p: PartitionId): void {
  const mv = engine.mvPartition(p);
  const txState = engine.txStatePartition(p);
  engine.runConsistently(() => {
    mv.addWriteCommitted(mv.ensureRowId('a'), `a@${p}`, ts(10));
    mv.addWrite(mv.ensureRowId('b'), `b@${p}`, tx('T1'), P1);
    mv.setMeta('replica.lease', new Uint8Array([1]));
    mv.setLastApplied(idx(7), term(2), ts(10));
    txState.compareAndSet(tx('T0'), null, { state: 'COMMITTED', commitTs: ts(9), enlistedPartitions: [p] });
    txState.compareAndSet(tx('T2'), null, { state: 'ABORTED', commitTs: undefined, enlistedPartitions: [p] });
    txState.setMeta('x', new Uint8Array([2]));
    txState.setVacuumHorizon(ts(3));
    txState.setLastApplied(idx(7), term(2), ts(10));
  });
}

function assertFilled(engine: StorageEngine, p: PartitionId): void {
  const mv = engine.mvPartition(p);
  const row = mv.rowIdOf('a');
  assert.ok(row !== undefined, `${p} still has its rows`);
  assert.deepEqual(mv.readLatest(row), { kind: 'committed', value: `a@${p}`, commitTs: ts(10) });
  assert.deepEqual(mv.lastApplied(), { index: 7, term: 2 });
  assert.equal(engine.txStatePartition(p).get(tx('T0'))?.state, 'COMMITTED');
}

function assertEmpty(engine: StorageEngine, p: PartitionId): void {
  const mv = engine.mvPartition(p);
  const txState = engine.txStatePartition(p);
  assert.equal(mv.rowIdOf('a'), undefined);
  assert.equal(mv.rowIdOf('b'), undefined);
  assert.deepEqual(mv.lastApplied(), { index: 0, term: 0 });
  assert.equal(mv.lastAppliedTs(), 0n);
  assert.equal(mv.getMeta('replica.lease'), undefined);
  assert.equal(txState.get(tx('T0')), undefined);
  assert.deepEqual(txState.records(undefined), []);
  assert.deepEqual(txState.lastApplied(), { index: 0, term: 0 });
  assert.equal(txState.vacuumHorizon(), 0n);
  assert.equal(txState.getMeta('x'), undefined);
  // A fresh row id space: the first row of the reopened partition does not collide with anything left behind.
  assert.deepEqual(mv.readLatest(mv.ensureRowId('c')), { kind: 'empty' });
}

const isClosed = (error: unknown) => isBasaltError(error, 'STORAGE_CLOSED');

export function partitionLifecycleContract(name: string, open: OpenEngine): void {
  describe(`StorageEngine partition lifecycle contract: ${name}`, () => {
    it('partitions() lists exactly the partitions with records, from either storage, in id byte order', () =>
      withEngine(open, (engine) => {
        assert.deepEqual(engine.partitions(), []);
        engine.mvPartition(pid('t5p0'));
        assert.deepEqual(engine.partitions(), [], 'opening a storage writes nothing');
        fill(engine, P2);
        engine.txStatePartition(P1_LONGER).compareAndSet(tx('T'), null, {
          state: 'ABORTED',
          commitTs: undefined,
          enlistedPartitions: [],
        });
        const mv = engine.mvPartition(P1);
        mv.addWriteCommitted(mv.ensureRowId('k'), 1, ts(1));
        assert.deepEqual(engine.partitions(), [P1, P1_LONGER, P2]);
      }));

    it('destroyPartition removes rows, intents, tx state, applied positions and metadata of one partition only', () =>
      withEngine(open, (engine) => {
        for (const p of [P1, P1_LONGER, P2]) fill(engine, p);
        engine.destroyPartition(P1);
        assert.deepEqual(engine.partitions(), [P1_LONGER, P2]);
        assertEmpty(engine, P1);
        assertFilled(engine, P1_LONGER);
        assertFilled(engine, P2);
      }));

    it('storage objects handed out before a destroy refuse further use with STORAGE_CLOSED', () =>
      withEngine(open, (engine) => {
        fill(engine, P1);
        const mv = engine.mvPartition(P1);
        const txState = engine.txStatePartition(P1);
        engine.destroyPartition(P1);
        assert.throws(() => mv.rowIdOf('a'), isClosed);
        assert.throws(() => txState.get(tx('T0')), isClosed);
        assert.notEqual(engine.mvPartition(P1), mv, 'the next call opens a new, empty storage');
      }));

    it('destroyPartition is idempotent: again on a destroyed or never written partition is a no-op', () =>
      withEngine(open, (engine) => {
        engine.destroyPartition(P1);
        fill(engine, P1);
        engine.destroyPartition(P1);
        engine.destroyPartition(P1);
        assertEmpty(engine, P1);
        assert.deepEqual(engine.partitions(), [P1], 'assertEmpty wrote one fresh row');
        engine.destroyPartition(P1);
        assert.deepEqual(engine.partitions(), []);
      }));

    it('destroyPartition joins an enclosing runConsistently step: undone with it when the step throws', () =>
      withEngine(open, (engine) => {
        fill(engine, P1);
        assert.throws(() =>
          engine.runConsistently(() => {
            engine.destroyPartition(P1);
            throw new Error('crash in the middle');
          }),
        );
        assert.deepEqual(engine.partitions(), [P1]);
        assertFilled(engine, P1);
      }));
  });
}
