/**
 * Runs the storage contract suites against both implementations: in memory, and LMDB in a temporary directory
 * (fsync off: durability is the subject of lmdb-storage.test.ts, not of the contract).
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { AssertionError } from '../core/assert.js';
import { type EngineHarness, idx, pid, term, ts, tx } from '../testing/storage/contract-harness.js';
import { mvExpiryContract } from '../testing/storage/mv-expiry.contract.js';
import { mvPartitionStorageContract } from '../testing/storage/mv-partition-storage.contract.js';
import { partitionLifecycleContract } from '../testing/storage/partition-lifecycle.contract.js';
import { partitionMetaContract } from '../testing/storage/partition-meta.contract.js';
import { txStateStorageContract } from '../testing/storage/tx-state-storage.contract.js';
import { openLmdbEnvironment } from './lmdb-environment.js';
import { LmdbStorageEngine, MemoryStorageEngine } from './storage-engine.js';

function openMemory(): EngineHarness {
  return { engine: new MemoryStorageEngine(), close: async () => {} };
}

function openLmdb(): EngineHarness {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-storage-'));
  const root = openLmdbEnvironment(dir, { sync: false });
  return {
    engine: new LmdbStorageEngine(root),
    close: async () => {
      await root.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

mvPartitionStorageContract('memory', openMemory);
mvPartitionStorageContract('lmdb', openLmdb);
mvExpiryContract('memory', openMemory);
mvExpiryContract('lmdb', openLmdb);
txStateStorageContract('memory', openMemory);
txStateStorageContract('lmdb', openLmdb);
partitionMetaContract('memory', openMemory);
partitionMetaContract('lmdb', openLmdb);
partitionLifecycleContract('memory', openMemory);
partitionLifecycleContract('lmdb', openLmdb);

describe('MemoryStorageEngine crash simulation', () => {
  it('crash() undoes every write since the last flush call, whole steps at a time, and keeps flushed ones', async () => {
    const engine = new MemoryStorageEngine({ trackUnflushed: true });
    const mv = engine.mvPartition(pid('p'));
    const txState = engine.txStatePartition(pid('p'));
    const a = mv.ensureRowId('a');
    mv.runConsistently(() => {
      mv.addWriteCommitted(a, 1, ts(10));
      mv.setLastApplied(idx(1), term(1), ts(10));
    });
    await engine.flush();
    mv.runConsistently(() => {
      mv.addWriteCommitted(a, 2, ts(20));
      mv.addWriteCommitted(mv.ensureRowId('b'), 2, ts(20));
      txState.compareAndSet(tx('T'), null, { state: 'ABORTED', commitTs: undefined, enlistedPartitions: [] });
      mv.setLastApplied(idx(2), term(1), ts(20));
    });
    assert.ok(engine.crash() > 0);
    assert.deepEqual(mv.readLatest(a), { kind: 'committed', value: 1, commitTs: ts(10) });
    assert.equal(mv.rowIdOf('b'), undefined);
    assert.equal(txState.get(tx('T')), undefined);
    assert.deepEqual(mv.lastApplied(), { index: 1, term: 1 });
    assert.equal(engine.crash(), 0);
  });

  it('an engine without trackUnflushed refuses crash() (it keeps no undo log)', () => {
    assert.throws(() => new MemoryStorageEngine().crash(), AssertionError);
  });
});
