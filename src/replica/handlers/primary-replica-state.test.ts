/**
 * Rule 16's inference from one row's version chain (the intent partition primary's answer when no state exists
 * anywhere else), on memory MVCC storage.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HybridTimestamp, PartitionId, TxId } from '../../core/ids.js';
import { hybridTimestamp } from '../../hlc/timestamp.js';
import { MemoryStorageEngine } from '../../storage/storage-engine.js';
import { makeTxId } from '../../tx/core/tx-id.js';
import { inferFromChain } from './primary-replica-state.js';

const P1 = 't1p1' as PartitionId;
const P0 = 't1p0' as PartitionId;
const ts = (ms: number): HybridTimestamp => hybridTimestamp(1_700_000_000_000 + ms);

function tx(n: number): TxId {
  return makeTxId({ beginTimestamp: ts(0), nodeId: 'coord' as never, counter: n });
}

/** A row with committed versions at `commits` (ms offsets), and optionally an intent of `intentTx` on top. */
function chain(commits: readonly number[], intentTx?: TxId) {
  const mv = new MemoryStorageEngine().mvPartition(P1);
  mv.runConsistently(() => {
    const rowId = mv.ensureRowId('k');
    for (const c of commits) mv.addWriteCommitted(rowId, `v${c}`, ts(c));
    if (intentTx !== undefined) mv.addWrite(rowId, 'intent', intentTx, P0);
  });
  return mv;
}

describe('rule 16: inference from the primary version chain', () => {
  const T = tx(1);

  it('a committed version with newestCommitTs < commitTs ≤ readTs → COMMITTED at that commitTs', () => {
    assert.deepEqual(inferFromChain(chain([10, 20]), { txId: T, key: 'k', readTs: ts(30), newestCommitTs: ts(10) }), {
      state: 'COMMITTED',
      commitTs: ts(20),
    });
    assert.deepEqual(inferFromChain(chain([20]), { txId: T, key: 'k', readTs: ts(20) }), {
      state: 'COMMITTED',
      commitTs: ts(20),
    });
  });

  it('only commits after readTs → UNKNOWN (not committed at or below readTs)', () => {
    assert.deepEqual(inferFromChain(chain([10, 40]), { txId: T, key: 'k', readTs: ts(30), newestCommitTs: ts(10) }), {
      state: 'UNKNOWN',
    });
  });

  it('the primary still holds the intent of the tx → UNKNOWN: it never infers from its own chain then', () => {
    assert.deepEqual(inferFromChain(chain([10], T), { txId: T, key: 'k', readTs: ts(30), newestCommitTs: ts(10) }), {
      state: 'UNKNOWN',
    });
  });

  it('nothing committed above newestCommitTs → ABORTED; a row that is gone → ABORTED', () => {
    assert.deepEqual(inferFromChain(chain([10]), { txId: T, key: 'k', readTs: ts(30), newestCommitTs: ts(10) }), {
      state: 'ABORTED',
    });
    assert.deepEqual(
      inferFromChain(chain([10], tx(2)), { txId: T, key: 'k', readTs: ts(30), newestCommitTs: ts(10) }),
      {
        state: 'ABORTED',
      },
    );
    assert.deepEqual(inferFromChain(chain([]), { txId: T, key: 'other', readTs: ts(30) }), { state: 'ABORTED' });
  });
});
