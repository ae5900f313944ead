/**
 * The MVCC and tx state invariants checked on the way to disk (assertions: a bug here) and on the way back (coded
 * STORAGE_CORRUPTED: the bytes are not what this code writes). Bad records are planted in the key-value store under
 * the storage objects, the one seam that lets a test break what the storage API itself never writes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AssertionError } from '../core/assert.js';
import { isBasaltError } from '../core/errors.js';
import { idx, pid, term, ts, tx } from '../testing/storage/contract-harness.js';
import { encode, utf8Bytes } from './codec.js';
import { partitionPrefix, txIdBytes, withSuffix } from './keys.js';
import { KvMvPartition } from './kv-mv-partition.js';
import { KvTxState } from './kv-tx-state.js';
import { MemoryKvStore } from './memory-kv-store.js';
import { decodeRow, encodeRow, type RowRecord } from './version-chain.js';

const P = pid('p');
const corrupted = (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED');

describe('storage invariants', () => {
  it('a row whose versions are not newest first is a bug on write and corruption on read', () => {
    const good: RowRecord = {
      key: 'k',
      intent: undefined,
      versions: [
        { commitTs: ts(20), value: null },
        { commitTs: ts(10), value: null },
      ],
    };
    assert.deepEqual(decodeRow(encodeRow(good)), good);
    const swapped: RowRecord = { ...good, versions: [...good.versions].reverse() };
    assert.throws(() => encodeRow(swapped), AssertionError);
    const twice: RowRecord = { ...good, versions: [good.versions[0]!, good.versions[0]!] };
    assert.throws(() => encodeRow(twice), AssertionError, 'two versions at one timestamp');
    assert.throws(() => decodeRow(encode(['k', null, null, null, 10n, null, 20n, null])), corrupted);
  });

  it('the key index naming a row of another key is caught when a scan reads it back', () => {
    const store = new MemoryKvStore();
    const mv = new KvMvPartition(store, P);
    const a = mv.ensureRowId('a');
    mv.addWriteCommitted(a, 1, ts(10));
    assert.equal(mv.scan({ kind: 'prefix', prefix: '' }, ts(10), 10).rows.length, 1);
    store.put('mv:keys', withSuffix(partitionPrefix(P), utf8Bytes('b')), utf8Bytes(a));
    assert.throws(() => mv.scan({ kind: 'prefix', prefix: '' }, ts(10), 10), AssertionError);
  });

  it('a commit that is not newer than the chain, or an applied position going back, is a bug', () => {
    const mv = new KvMvPartition(new MemoryKvStore(), P);
    const a = mv.ensureRowId('a');
    mv.addWriteCommitted(a, 1, ts(10));
    assert.throws(() => mv.addWriteCommitted(a, 2, ts(10)), AssertionError);
    mv.setLastApplied(idx(5), term(1), ts(50));
    assert.throws(() => mv.setLastApplied(idx(4), term(1), ts(60)), AssertionError);
    assert.throws(() => mv.setLastApplied(idx(6), term(1), ts(40)), AssertionError);
    assert.deepEqual(mv.lastApplied(), { index: 5, term: 1 });
  });

  it('a tx state record whose commit timestamp does not match its outcome reads back as corruption', () => {
    const store = new MemoryKvStore();
    const txState = new KvTxState(store, P);
    const key = (id: string) => withSuffix(partitionPrefix(P), txIdBytes(tx(id)));
    store.put('txstate:records', key('A'), encode(['ABORTED', 5n, [], true]));
    store.put('txstate:records', key('C'), encode(['COMMITTED', null, [], true]));
    store.put('txstate:records', key('D'), encode(['COMMITTED', 5n, [], true]));
    assert.throws(() => txState.get(tx('A')), corrupted);
    assert.throws(() => txState.get(tx('C')), corrupted);
    assert.equal(txState.get(tx('D'))?.commitTs, 5n);
  });

  it('the pending index and the records agree on cleanup, checked as cleanup completes and as a record goes', () => {
    const store = new MemoryKvStore();
    const txState = new KvTxState(store, P);
    const key = withSuffix(partitionPrefix(P), txIdBytes(tx('T')));
    txState.compareAndSet(tx('T'), null, { state: 'ABORTED', commitTs: undefined, enlistedPartitions: [] });
    store.delete('txstate:pending', key);
    assert.throws(() => txState.markCleanupCompleted(tx('T')), AssertionError, 'a pending record without its index');
    store.put('txstate:pending', key, new Uint8Array(0));
    assert.deepEqual(txState.markCleanupCompleted(tx('T')), { status: 'SUCCESS' });
    store.put('txstate:pending', key, new Uint8Array(0));
    assert.throws(() => txState.remove(tx('T')), AssertionError, 'a cleaned-up record still indexed as pending');
    store.delete('txstate:pending', key);
    assert.equal(txState.remove(tx('T')), true);
  });
});
