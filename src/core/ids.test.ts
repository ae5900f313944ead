import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { hybridTimestamp } from '../hlc/timestamp.js';
import { isValidTxIdNodeId, makeTxId, parseTxId } from '../tx/core/tx-id.js';
import { freshNodeId } from './ids.js';

describe('freshNodeId', () => {
  it('makes 16 base64url characters from the first 96 bits of a UUID, usable in a tx id', () => {
    const id = freshNodeId('3cbcd116-d5c9-401f-8529-a0a1e8bbeab3');
    assert.equal(id, Buffer.from('3cbcd116d5c9401f8529a0a1', 'hex').toString('base64url'));
    assert.equal(id.length, 16);
    assert.ok(isValidTxIdNodeId(id));
    const tx = makeTxId({ beginTimestamp: hybridTimestamp(1_800_000_000_000), nodeId: id, counter: 7 });
    assert.equal(parseTxId(tx).nodeId, id);
    assert.equal(tx.length, 46);
  });

  it('gives distinct UUIDs distinct ids', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => freshNodeId(randomUUID())));
    assert.equal(ids.size, 1000);
    for (const id of ids) assert.match(id, /^[A-Za-z0-9_-]{16}$/);
  });

  it('refuses what is not a UUID', () => {
    assert.throws(() => freshNodeId('n1'), /not a UUID/);
    assert.throws(() => freshNodeId('zzzzzzzz-d5c9-401f-8529-a0a1e8bbeab3'), /not a UUID/);
  });
});
