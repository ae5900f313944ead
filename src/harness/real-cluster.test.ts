import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { logIndex, term } from '../core/ids.js';
import { tablePartitionId } from '../core/partitioning.js';
import { startCluster } from '../index.js';
import { openNodeStorage } from './real-cluster.js';

test('a node keeps its Raft logs in a segmented log and its state in an LMDB environment, and reopens both', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-node-storage-'));
  try {
    const p = tablePartitionId(1, 0);
    const first = await openNodeStorage(dir);
    const entry = { index: logIndex(1), term: term(1), kind: 'data', data: new Uint8Array([7]) } as const;
    await first.log.save(p, { hardState: null, snapshot: null, entries: [entry] });
    await first.close?.();
    assert.deepEqual(readdirSync(join(dir, 'raftlog')), ['0000000000000001.seg']);
    assert.ok(existsSync(join(dir, 'state', 'data.mdb')));
    const again = await openNodeStorage(dir);
    assert.equal(again.log.load(p).entries.length, 1, 'the log survives a reopen');
    await again.close?.();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a directory in the earlier one-environment layout is refused with a coded error, not opened empty', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-node-storage-'));
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'data.mdb'), 'old');
    await assert.rejects(
      () => openNodeStorage(dir),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT') && /earlier data layout/.test(e.message),
    );
    assert.equal(existsSync(join(dir, 'raftlog')), false, 'nothing was created beside the old files');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a directory whose Raft logs are in an LMDB environment under log/ is refused with a coded error', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-node-storage-'));
  try {
    mkdirSync(join(dir, 'log'), { recursive: true });
    writeFileSync(join(dir, 'log', 'data.mdb'), 'old');
    await assert.rejects(
      () => openNodeStorage(dir),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT') && /log\/ \(an earlier data layout\)/.test(e.message),
    );
    assert.equal(existsSync(join(dir, 'raftlog')), false, 'nothing was created beside the old files');
    assert.equal(existsSync(join(dir, 'state')), false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('after a reboot that may have cost the unsynced state, every node rebuilds it from its Raft log: snapshot, then entries', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-state-rebuild-'));
  const cluster = await startCluster({ nodes: 3, dataDir, tuning: { raftCompactEntriesMin: 20 } });
  try {
    const table = await cluster.createTable('t', { partitions: 2, replicas: 3 });
    const client = cluster.client();
    const keys = Array.from({ length: 120 }, (_, i) => `k${i}`);
    for (const [i, key] of keys.entries()) await client.put('t', key, { i });
    const groups = Array.from({ length: 2 }, (_, p) => tablePartitionId(table.id, p));
    for (const name of cluster.nodes) {
      const raft = cluster.basaltNode(name)!.raft;
      for (const g of groups) assert.ok(raft.status(g)!.snapshotIndex > 0, `${name} compacted the log of ${g}`);
    }
    const stateDir = (name: string) => join(dataDir, name, 'state');
    for (const name of cluster.nodes) await cluster.stopNode(name);
    // The machine went down before the state was synced: each session record says so, under an earlier boot, and the
    // state files hold pages that never reached the disk (garbage here: opening them would fail).
    for (const name of cluster.nodes) {
      const record = JSON.stringify({ bootId: 'an-earlier-boot', clean: false });
      writeFileSync(join(stateDir(name), 'session.json'), record);
      writeFileSync(join(stateDir(name), 'data.mdb'), Buffer.alloc(64 * 1024, 0xab));
    }
    await Promise.all(cluster.nodes.map((name) => cluster.startNode(name)));
    for (const name of cluster.nodes) {
      const session = JSON.parse(readFileSync(join(stateDir(name), 'session.json'), 'utf8')) as { bootId: unknown };
      assert.notEqual(session.bootId, 'an-earlier-boot', `${name} opened its state in a new session`);
    }
    const again = cluster.client('n2');
    for (const [i, key] of keys.entries()) assert.deepEqual(await again.get('t', key), { i }, key);
  } finally {
    await cluster.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
