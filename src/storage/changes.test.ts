/**
 * `changes(range, from, to, limit)` on both storage implementations: a row's versions in the window oldest first,
 * removals as tombstones, intents handed to the reader, whole rows per page, and rows outside the range left out.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { LIMITS } from '../core/limits.js';
import { type EngineHarness, pid, ts, tx } from '../testing/storage/contract-harness.js';
import { openLmdbEnvironment } from './lmdb-environment.js';
import { type ChangesResult, type MvPartitionStorage, TOMBSTONE } from './mv-partition-storage.js';
import { LmdbStorageEngine, MemoryStorageEngine } from './storage-engine.js';

const P = pid('t_0');

function openMemory(): EngineHarness {
  return { engine: new MemoryStorageEngine(), close: async () => {} };
}

function openLmdb(): EngineHarness {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-changes-'));
  const root = openLmdbEnvironment(dir, { sync: false });
  return {
    engine: new LmdbStorageEngine(root),
    close: async () => {
      await root.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function committed(s: MvPartitionStorage, key: string, value: unknown, at: number): void {
  const result = s.addWriteCommitted(s.ensureRowId(key), value as never, ts(at));
  assert.equal(result.status, 'SUCCESS');
}

function summary(result: ChangesResult): string[] {
  return result.rows.map((r) => {
    const versions = r.versions.map((v) => `${v.value === TOMBSTONE ? 'x' : JSON.stringify(v.value)}@${v.commitTs}`);
    return `${r.key}:${versions.join(',')}${r.intent === undefined ? '' : `+intent(${String(r.intent.txId)})`}`;
  });
}

for (const [name, open] of [
  ['memory', openMemory],
  ['lmdb', openLmdb],
] as const) {
  describe(`storage changes (${name})`, () => {
    it('returns the versions in (from, to] oldest first, removals, intents, rows whole and in key order', async () => {
      const harness = open();
      try {
        const s = harness.engine.mvPartition(P);
        committed(s, 'a', 1, 10);
        committed(s, 'a', 2, 20);
        committed(s, 'a', 3, 30);
        committed(s, 'b', 1, 5);
        committed(s, 'c', 1, 15);
        committed(s, 'c', TOMBSTONE, 25);
        s.addWrite(s.ensureRowId('d'), 'pending', tx('tx-1'), P);
        committed(s, 'z', 1, 20);
        const all = s.changes({ kind: 'range', end: 'y' }, ts(10), ts(30), 100);
        assert.deepEqual(summary(all), ['a:2@20,3@30', 'c:1@15,x@25', 'd:+intent(tx-1)']);
        assert.equal(all.nextKey, undefined);
        assert.deepEqual(summary(s.changes({ kind: 'prefix', prefix: 'a' }, ts(9), ts(20), 100)), ['a:1@10,2@20']);
        // A full page ends after the row that filled it; the next page starts at the next key.
        const first = s.changes({ kind: 'range' }, ts(0), ts(40), 2);
        assert.deepEqual(summary(first), ['a:1@10,2@20,3@30']);
        assert.equal(first.nextKey, 'b');
        assert.throws(() => s.changes({ kind: 'range' }, ts(5), ts(5), 1), /window/);
        assert.throws(() => s.changes({ kind: 'range' }, ts(0), ts(5), 0), /limit/);
      } finally {
        await harness.close();
      }
    });

    it('reports an expiry as a removal at its expiry timestamp, unless a newer version replaced it first', async () => {
      const harness = open();
      try {
        const s = harness.engine.mvPartition(P);
        // e: expires at 25; f: expires at 40 but replaced at 30; g: expires at 50, outside the window.
        assert.equal(s.addWriteCommitted(s.ensureRowId('e'), 'e1', ts(10), { at: ts(25) }).status, 'SUCCESS');
        assert.equal(s.addWriteCommitted(s.ensureRowId('f'), 'f1', ts(10), { at: ts(40) }).status, 'SUCCESS');
        committed(s, 'f', 'f2', 30);
        assert.equal(s.addWriteCommitted(s.ensureRowId('g'), 'g1', ts(20), { at: ts(50) }).status, 'SUCCESS');
        const all = s.changes({ kind: 'range' }, ts(0), ts(45), 100);
        assert.deepEqual(summary(all), ['e:"e1"@10,x@25', 'f:"f1"@10,"f2"@30', 'g:"g1"@20']);
        assert.deepEqual(summary(s.changes({ kind: 'range' }, ts(25), ts(60), 100)), ['f:"f2"@30', 'g:x@50']);
      } finally {
        await harness.close();
      }
    });

    it('looks at a bounded number of rows per call, so an idle range is read in bounded steps', async () => {
      const harness = open();
      try {
        const s = harness.engine.mvPartition(P);
        const idle = LIMITS.storageChangeRowsExaminedMax + 5;
        for (let i = 0; i < idle; i++) committed(s, `a/${String(i).padStart(6, '0')}`, i, 10);
        committed(s, 'b', 1, 50);
        const first = s.changes({ kind: 'range' }, ts(20), ts(60), 100);
        assert.deepEqual(first.rows, []);
        assert.equal(first.nextKey, `a/${String(LIMITS.storageChangeRowsExaminedMax).padStart(6, '0')}`);
        const second = s.changes({ kind: 'range', start: first.nextKey! }, ts(20), ts(60), 100);
        assert.deepEqual(summary(second), ['b:1@50']);
        assert.equal(second.nextKey, undefined);
      } finally {
        await harness.close();
      }
    });
  });
}
