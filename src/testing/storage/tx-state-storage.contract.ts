/**
 * The tx state storage contract suite, run against each implementation: first outcome wins, cleanup marks, vacuum
 * only after cleanup, recovery listing, vacuum horizon, applied position, atomicity with MVCC storage, snapshots.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AssertionError } from '../../core/assert.js';
import { isBasaltError } from '../../core/errors.js';
import { LIMITS } from '../../core/limits.js';
import type { TxMeta, TxStateStorage } from '../../storage/tx-state-storage.js';
import { idx, type OpenEngine, pid, term, ts, tx, withEngine } from './contract-harness.js';

const P1 = pid('t1p0');
const P2 = pid('t1p1');

const committedMeta = (at: number): TxMeta => ({
  state: 'COMMITTED',
  commitTs: ts(at),
  enlistedPartitions: [P1, P2],
});
const abortedMeta: TxMeta = { state: 'ABORTED', commitTs: undefined, enlistedPartitions: [P2] };

const isInvalidArgument = (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT');

export function txStateStorageContract(name: string, open: OpenEngine): void {
  const withTxState = (body: (s: TxStateStorage) => void | Promise<void>) =>
    withEngine(open, (engine) => body(engine.txStatePartition(P1)));

  describe(`TxStateStorage contract: ${name}`, () => {
    it('an unknown tx has no record', () =>
      withTxState((s) => {
        assert.equal(s.get(tx('nope')), undefined);
      }));

    it('compareAndSet stores the first final outcome', () =>
      withTxState((s) => {
        const result = s.compareAndSet(tx('A'), null, committedMeta(10));
        const stored = { txId: tx('A'), ...committedMeta(10), cleanupCompleted: false };
        assert.deepEqual(result, { status: 'SUCCESS', stored });
        assert.deepEqual(s.get(tx('A')), stored);
      }));

    it('a later compareAndSet loses and gets the stored outcome back, whatever it tried to store', () =>
      withTxState((s) => {
        s.compareAndSet(tx('A'), null, abortedMeta);
        const stored = { txId: tx('A'), ...abortedMeta, cleanupCompleted: false };
        assert.deepEqual(s.compareAndSet(tx('A'), null, committedMeta(10)), { status: 'MISMATCH', stored });
        assert.deepEqual(s.compareAndSet(tx('A'), null, abortedMeta), { status: 'MISMATCH', stored });
        assert.deepEqual(s.get(tx('A')), stored);
      }));

    it('compareAndSet refuses non-final states and a commit timestamp that does not match the state', () =>
      withTxState((s) => {
        const bad = [
          { state: 'PENDING', commitTs: undefined, enlistedPartitions: [] },
          { state: 'COMMITTED', commitTs: undefined, enlistedPartitions: [] },
          { state: 'ABORTED', commitTs: ts(5), enlistedPartitions: [] },
        ];
        for (const meta of bad) assert.throws(() => s.compareAndSet(tx('A'), null, meta as TxMeta), isInvalidArgument);
        assert.equal(s.get(tx('A')), undefined);
      }));

    it('a committing record is kept apart from final records until an outcome replaces it', () =>
      withTxState((s) => {
        const record = {
          commitTs: ts(20),
          enlistedPartitions: [P1, P2],
          inflight: [{ partitionId: P2, keys: ['a', 'b'] }],
        };
        s.putCommitting(tx('C'), record);
        assert.deepEqual(s.committing(tx('C')), record);
        assert.equal(s.get(tx('C')), undefined, 'no final record');
        assert.deepEqual(s.finishedNotCleanedUp(undefined), [], 'nothing to clean up');
        assert.deepEqual(s.records(undefined), [], 'nothing to vacuum');
        assert.throws(() => s.putCommitting(tx('C'), record), AssertionError, 'one record per tx');
        assert.deepEqual(s.compareAndSet(tx('C'), null, committedMeta(20)).status, 'SUCCESS');
        assert.equal(s.committing(tx('C')), undefined, 'the outcome replaced it');
        assert.equal(s.get(tx('C'))?.state, 'COMMITTED');
        assert.throws(() => s.putCommitting(tx('C'), record), AssertionError, 'a finished tx gets none');
        assert.equal(s.committing(tx('nope')), undefined);
      }));

    it('markCleanupCompleted sets the flag once, is idempotent, and reports NOT_FOUND for an unknown tx', () =>
      withTxState((s) => {
        s.compareAndSet(tx('A'), null, committedMeta(10));
        assert.deepEqual(s.markCleanupCompleted(tx('A')), { status: 'SUCCESS' });
        assert.deepEqual(s.markCleanupCompleted(tx('A')), { status: 'SUCCESS' });
        assert.equal(s.get(tx('A'))?.cleanupCompleted, true);
        assert.equal(s.get(tx('A'))?.commitTs, 10n);
        assert.deepEqual(s.markCleanupCompleted(tx('B')), { status: 'NOT_FOUND' });
      }));

    it('remove (vacuum) works only after cleanup completed; before that it is a broken invariant', () =>
      withTxState((s) => {
        s.compareAndSet(tx('A'), null, committedMeta(10));
        assert.throws(() => s.remove(tx('A')), AssertionError);
        assert.notEqual(s.get(tx('A')), undefined);
        s.markCleanupCompleted(tx('A'));
        assert.equal(s.remove(tx('A')), true);
        assert.equal(s.get(tx('A')), undefined);
        assert.equal(s.remove(tx('A')), false);
      }));

    it('finishedNotCleanedUp lists finished txs without completed cleanup, in txId order, paged', () =>
      withTxState((s) => {
        for (const id of ['d', 'b', 'a', 'c', 'e']) s.compareAndSet(tx(id), null, abortedMeta);
        s.markCleanupCompleted(tx('c'));
        const ids = (list: readonly { txId: string }[]) => list.map((m) => m.txId);
        assert.deepEqual(ids(s.finishedNotCleanedUp(undefined)), ['a', 'b', 'd', 'e']);
        assert.deepEqual(ids(s.finishedNotCleanedUp(undefined, 2)), ['a', 'b']);
        assert.deepEqual(ids(s.finishedNotCleanedUp(tx('b'), 2)), ['d', 'e']);
        assert.deepEqual(ids(s.finishedNotCleanedUp(tx('e'))), []);
        assert.deepEqual(s.finishedNotCleanedUp(undefined, 1)[0], {
          txId: tx('a'),
          ...abortedMeta,
          cleanupCompleted: false,
        });
        assert.throws(() => s.finishedNotCleanedUp(undefined, LIMITS.txStateListMax + 1), isInvalidArgument);
      }));

    it('records lists every record (cleaned up or not) in txId order, paged', () =>
      withTxState((s) => {
        for (const id of ['d', 'b', 'a', 'c']) s.compareAndSet(tx(id), null, abortedMeta);
        s.markCleanupCompleted(tx('c'));
        const ids = (list: readonly { txId: string }[]) => list.map((m) => m.txId);
        assert.deepEqual(ids(s.records(undefined)), ['a', 'b', 'c', 'd']);
        assert.deepEqual(ids(s.records(tx('a'), 2)), ['b', 'c']);
        assert.deepEqual(ids(s.records(tx('d'))), []);
        assert.equal(s.records(tx('b'), 1)[0]?.cleanupCompleted, true);
        s.remove(tx('c'));
        assert.deepEqual(ids(s.records(undefined)), ['a', 'b', 'd']);
        assert.throws(() => s.records(undefined, 0), isInvalidArgument);
      }));

    it('the vacuum horizon starts at 0 and only rises', () =>
      withTxState((s) => {
        assert.equal(s.vacuumHorizon(), 0n);
        s.setVacuumHorizon(ts(50));
        s.setVacuumHorizon(ts(40));
        assert.equal(s.vacuumHorizon(), 50n);
        s.setVacuumHorizon(ts(60));
        assert.equal(s.vacuumHorizon(), 60n);
      }));

    it('lastApplied and lastAppliedTs record the last applied command and never go back', () =>
      withTxState(async (s) => {
        assert.deepEqual(s.lastApplied(), { index: 0, term: 0 });
        assert.equal(s.lastAppliedTs(), 0n);
        s.setLastApplied(idx(4), term(1), ts(44));
        assert.deepEqual(s.lastApplied(), { index: 4, term: 1 });
        assert.equal(s.lastAppliedTs(), 44n);
        assert.throws(() => s.setLastApplied(idx(3), term(1), ts(45)), AssertionError);
        await s.flush();
      }));

    it('one runConsistently step covers tx state and MVCC storage of the engine: all or nothing', () =>
      withEngine(open, (engine) => {
        const txState = engine.txStatePartition(P1);
        const mv = engine.mvPartition(P1);
        const row = mv.ensureRowId('k');
        mv.addWrite(row, 1, tx('A'), P1);
        assert.throws(() =>
          engine.runConsistently(() => {
            txState.compareAndSet(tx('A'), null, committedMeta(10));
            mv.commitWrite(row, ts(10), tx('A'));
            txState.setLastApplied(idx(1), term(1), ts(10));
            mv.setLastApplied(idx(1), term(1), ts(10));
            throw new Error('crash in apply');
          }),
        );
        assert.equal(txState.get(tx('A')), undefined);
        assert.equal(mv.readLatest(row).kind, 'intent');
        assert.deepEqual(txState.lastApplied(), { index: 0, term: 0 });
        mv.runConsistently(() => {
          txState.compareAndSet(tx('A'), null, committedMeta(10));
          mv.commitWrite(row, ts(10), tx('A'));
          txState.setLastApplied(idx(1), term(1), ts(10));
        });
        assert.equal(txState.get(tx('A'))?.state, 'COMMITTED');
        assert.equal(mv.readLatest(row).kind, 'committed');
      }));

    it('partitions are isolated, and destroy removes only one of them', () =>
      withEngine(open, (engine) => {
        const p1 = engine.txStatePartition(P1);
        const p2 = engine.txStatePartition(P2);
        p1.compareAndSet(tx('A'), null, abortedMeta);
        p1.setVacuumHorizon(ts(9));
        assert.equal(p2.get(tx('A')), undefined);
        assert.equal(p2.vacuumHorizon(), 0n);
        p2.compareAndSet(tx('A'), null, committedMeta(5));
        p1.destroy();
        assert.throws(
          () => p1.get(tx('A')),
          (e: unknown) => isBasaltError(e, 'STORAGE_CLOSED'),
        );
        assert.equal(engine.txStatePartition(P1).get(tx('A')), undefined);
        assert.equal(engine.txStatePartition(P1).vacuumHorizon(), 0n);
        assert.equal(p2.get(tx('A'))?.state, 'COMMITTED');
      }));

    it('snapshot and restore reproduce records, committing records, cleanup marks, the recovery listing, horizon and applied position', () =>
      withEngine(open, (engine) => {
        const source = engine.txStatePartition(P1);
        source.compareAndSet(tx('A'), null, committedMeta(10));
        source.compareAndSet(tx('B'), null, abortedMeta);
        source.markCleanupCompleted(tx('B'));
        source.setVacuumHorizon(ts(3));
        source.setLastApplied(idx(12), term(2), ts(120));
        const committing = { commitTs: ts(30), enlistedPartitions: [P2], inflight: [{ partitionId: P2, keys: ['k'] }] };
        source.putCommitting(tx('C'), committing);
        const target = engine.txStatePartition(P2);
        target.putCommitting(tx('stale-committing'), committing);
        target.compareAndSet(tx('stale'), null, abortedMeta);
        target.restore(source.snapshot());
        assert.equal(target.get(tx('stale')), undefined);
        assert.equal(target.committing(tx('stale-committing')), undefined);
        assert.deepEqual(target.committing(tx('C')), committing);
        assert.deepEqual(target.get(tx('A')), source.get(tx('A')));
        assert.deepEqual(target.get(tx('B')), source.get(tx('B')));
        assert.deepEqual(
          target.finishedNotCleanedUp(undefined).map((m) => m.txId),
          ['A'],
        );
        assert.equal(target.vacuumHorizon(), 3n);
        assert.deepEqual(target.lastApplied(), { index: 12, term: 2 });
        assert.equal(target.lastAppliedTs(), 120n);
        assert.throws(
          () => target.restore(engine.mvPartition(P1).snapshot()),
          (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED'),
        );
        assert.equal(target.get(tx('A'))?.state, 'COMMITTED');
      }));
  });
}
