/**
 * The row record's two binary forms: rows without expiry keep the form written before expiry existed (v1), so a
 * store written by an earlier version reads unchanged and rows that never expire cost no extra bytes; rows with an
 * expiry round-trip through v2.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { HybridTimestamp, PartitionId, TxId } from '../core/ids.js';
import { encode } from './codec.js';
import { decodeRow, encodeRow, type RowRecord, readAt } from './version-chain.js';

const ts = (n: number): HybridTimestamp => BigInt(n) as HybridTimestamp;
const bytes = (text: string): Uint8Array => encode(text);

describe('row record binary forms', () => {
  it('a record in the form written before expiry existed decodes unchanged', () => {
    // Exactly what the earlier encoder wrote: [key, intentTxId, intentCommitPartitionId, intentValue, ts, value, ...].
    const old = encode(['k', 'tx1', 't9p0', bytes('wi'), 30n, bytes('v30'), 20n, null]);
    const row = decodeRow(old);
    assert.equal(row.key, 'k');
    assert.deepEqual(row.intent?.txId, 'tx1');
    assert.equal(row.intent?.expiry, undefined);
    assert.deepEqual(
      row.versions.map((v) => [v.commitTs, v.expiresAt]),
      [
        [30n, undefined],
        [20n, undefined],
      ],
    );
    const read = readAt(row, ts(25));
    assert.equal(read.kind, 'committed');
  });

  it('a row without expiry is still written in that form, byte for byte', () => {
    const row: RowRecord = {
      key: 'k',
      intent: undefined,
      versions: [{ commitTs: ts(30), value: Buffer.from(bytes('v')) }],
    };
    assert.deepEqual(Buffer.from(encodeRow(row)), Buffer.from(encode(['k', null, null, null, 30n, bytes('v')])));
  });

  it('a row with expiries round-trips, intent ttl and absolute expiry included', () => {
    const row: RowRecord = {
      key: 'k',
      intent: { txId: 'tx1' as TxId, commitPartitionId: 't9p0' as PartitionId, value: null, expiry: { ttlMs: 5 } },
      versions: [
        { commitTs: ts(30), value: Buffer.from(bytes('a')), expiresAt: ts(90) },
        { commitTs: ts(20), value: null },
      ],
    };
    const back = decodeRow(encodeRow(row));
    assert.deepEqual(back.intent?.expiry, { ttlMs: 5 });
    assert.deepEqual(
      back.versions.map((v) => [v.commitTs, v.expiresAt]),
      [
        [30n, 90n],
        [20n, undefined],
      ],
    );
    const lease: RowRecord = { ...row, intent: { ...row.intent!, expiry: { at: ts(77) } } };
    assert.deepEqual(decodeRow(encodeRow(lease)).intent?.expiry, { at: 77n });
  });

  it('a v2 record with a malformed expiry is STORAGE_CORRUPTED', () => {
    const bad = encode([2, 'k', null, null, null, null, null, 30n, bytes('v'), 'soon']);
    assert.throws(
      () => decodeRow(bad),
      (e: unknown) => isBasaltError(e, 'STORAGE_CORRUPTED'),
    );
  });
});
