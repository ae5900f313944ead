/**
 * Durability across crashes: a crash is a power loss of the storage writes not yet flushed; a restarted replica
 * replays the Raft log from its durable applied position. Committed data survives crashes and restarts of every
 * replica in turn (simulated), and a whole real-time cluster restarted on its LMDB data directory finds its tables
 * and data again.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { startCluster } from '../../src/index.js';
import { keysInDistinctPartitions, withSimCluster } from './support.js';

const T = 'accounts';

it('simulated: committed data survives crashes and restarts of every replica in turn', () =>
  withSimCluster('restart-rolling', { partitions: 4 }, async (cluster) => {
    const keys = keysInDistinctPartitions(cluster, T, 4);
    const writer = cluster.client('n1');
    await writer.transaction(async (tx) => {
      for (const k of keys) await tx.put(T, k, `v1-${k}`);
    });
    for (const k of keys) await writer.put(T, `${k}-solo`, 1);
    // Crash each node right after the writes (its unflushed storage is lost), restart it, then the next one.
    for (const victim of ['n2', 'n3', 'n1']) {
      await cluster.stopNode(victim);
      const reader = cluster.client(victim === 'n1' ? 'n2' : 'n1');
      const during = await reader.transaction((tx) => tx.getAll(T, keys), { retries: 30 });
      assert.deepEqual(
        during,
        keys.map((k) => `v1-${k}`),
        `readable while ${victim} is down`,
      );
      await cluster.startNode(victim);
      await cluster.waitFor(() => keys.every((k) => cluster.placement(T, k).primary !== undefined), {
        what: 'every partition has a primary',
      });
    }
    // Every node's replicas caught up: stop the other two in turn and read through the remaining majority.
    await cluster.stopNode('n1');
    const values = await cluster.client('n3').transaction((tx) => tx.getAll(T, keys), { retries: 30 });
    assert.deepEqual(
      values,
      keys.map((k) => `v1-${k}`),
    );
    for (const k of keys) assert.equal(await cluster.client('n2').get(T, `${k}-solo`), 1);
  }));

it('real time, LMDB: a cluster restarted on its data directory finds its tables and data', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-restart-'));
  try {
    const first = await startCluster({ nodes: 3, dataDir });
    try {
      const client = first.client();
      await client.createTable(T, { partitions: 2, replicas: 3 });
      await client.transaction(async (tx) => {
        await tx.put(T, 'alice', 10);
        await tx.put(T, 'bob', 20);
      });
      await client.put(T, 'carol', 30);
    } finally {
      await first.stop();
    }
    const second = await startCluster({ nodes: 3, dataDir });
    try {
      await second.waitFor(() => second.tables().length === 1, { what: 'the table is known again' });
      const client = second.client('n2');
      await second.waitFor(() => ['alice', 'bob'].every((k) => second.placement(T, k).primary !== undefined), {
        what: 'primaries after the restart',
      });
      const values = await client.transaction((tx) => tx.getAll(T, ['alice', 'bob', 'carol']), { retries: 30 });
      assert.deepEqual(values, [10, 20, 30]);
    } finally {
      await second.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});
