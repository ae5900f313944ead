import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { logIndex, term } from '../core/ids.js';
import { tablePartitionId } from '../core/partitioning.js';
import { openLmdbNodeStorage } from './real-cluster.js';

test('a node keeps its Raft logs and its state in two LMDB environments under its directory, and reopens both', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-node-storage-'));
  try {
    const p = tablePartitionId(1, 0);
    const first = openLmdbNodeStorage(dir);
    const entry = { index: logIndex(1), term: term(1), kind: 'data', data: new Uint8Array([7]) } as const;
    await first.log.save(p, { hardState: null, snapshot: null, entries: [entry] });
    await first.close?.();
    assert.ok(existsSync(join(dir, 'log', 'data.mdb')));
    assert.ok(existsSync(join(dir, 'state', 'data.mdb')));
    const again = openLmdbNodeStorage(dir);
    assert.equal(again.log.load(p).entries.length, 1, 'the log survives a reopen');
    await again.close?.();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a directory in the earlier one-environment layout is refused with a coded error, not opened empty', () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-node-storage-'));
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'data.mdb'), 'old');
    assert.throws(
      () => openLmdbNodeStorage(dir),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT') && /earlier data layout/.test(e.message),
    );
    assert.equal(existsSync(join(dir, 'log')), false, 'nothing was created beside the old files');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
