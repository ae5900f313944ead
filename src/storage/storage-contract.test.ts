/**
 * Runs the storage contract suites against both implementations: in memory, and LMDB in a temporary directory
 * (fsync off: durability is the subject of lmdb-storage.test.ts, not of the contract).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EngineHarness } from './contract-harness.js';
import { openLmdbEnvironment } from './lmdb-environment.js';
import { mvPartitionStorageContract } from './mv-partition-storage.contract.js';
import { LmdbStorageEngine, MemoryStorageEngine } from './storage-engine.js';
import { txStateStorageContract } from './tx-state-storage.contract.js';

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
txStateStorageContract('memory', openMemory);
txStateStorageContract('lmdb', openLmdb);
