/**
 * Real-time clusters: in-memory transport and TCP on loopback with LMDB in a temp dir. Each test stops its cluster.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { type NodeName, nodeName } from '../core/ids.js';
import { Cluster } from './cluster.js';
import { RealClusterEnvironment, type RealClusterOptions } from './real-cluster.js';

const names = (n: number): NodeName[] => Array.from({ length: n }, (_, i) => nodeName(`n${i + 1}`));

async function startReal(options: Partial<RealClusterOptions> = {}, count = 3): Promise<Cluster> {
  const errors: unknown[] = [];
  const env = new RealClusterEnvironment({
    names: names(count),
    tuning: { raftTickIntervalMs: 20 },
    onError: (name, error) => errors.push(`${name}: ${String(error)}`),
    ...options,
  });
  return Cluster.start(env, names(count));
}

test('memory transport: a table is created, every partition elects a leader, placement names its replicas', async () => {
  const cluster = await startReal();
  try {
    const table = await cluster.createTable('accounts', { partitions: 4, replicas: 3 });
    assert.equal(table.partitions, 4);
    assert.deepEqual(
      cluster.tables().map((t) => t.name),
      ['accounts'],
    );
    const p = cluster.placement('accounts', 'alice');
    assert.match(p.partition, /^t1p[0-3]$/);
    assert.equal(p.replicas.length, 3);
    assert.ok(p.primary !== undefined && p.replicas.includes(p.primary));
    await assert.rejects(cluster.createTable('accounts', { partitions: 1, replicas: 1 }), (e) =>
      isBasaltError(e, 'ALREADY_EXISTS'),
    );
  } finally {
    await cluster.stop();
  }
});

test('TCP + LMDB: partitions elect leaders; a crashed node restarts with a new id, its data and its partitions', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-cluster-'));
  const cluster = await startReal({ transport: 'tcp', dataDir });
  try {
    await cluster.createTable('t', { partitions: 3, replicas: 3 });
    const oldId = cluster.node('n3').ephemeralId;
    const n1 = cluster.basaltNode('n1')!;
    await cluster.stopNode('n3');
    assert.equal(cluster.node('n3').up, false);
    assert.equal(cluster.node('n3').txState('tx' as never), undefined, 'a down node has no tx state');
    await cluster.waitFor(() => n1.isGone(oldId), { what: 'n1 sees the crashed id gone', timeoutMs: 10_000 });
    await cluster.startNode('n3');
    const newId = cluster.node('n3').ephemeralId;
    assert.notEqual(newId, oldId, 'a restart draws a new ephemeral id');
    const n3 = cluster.basaltNode('n3')!;
    // Durable data: n3 (a metastorage member) replays the table from its own LMDB log.
    await cluster.waitFor(() => n3.metastorage.table('t') !== undefined && n3.hostedPartitions().size === 3, {
      what: 'n3 knows its table again and hosts its partitions',
    });
    await cluster.waitFor(() => n1.liveIdOf(nodeName('n3')) === newId, { what: 'n1 sees the new id live' });
    assert.equal(n1.isGone(oldId), true, 'the old id stays gone (superseded)');
    for (const p of n3.hostedPartitions().keys()) {
      await cluster.waitFor(() => (n3.raft.status(p)?.commit ?? 0) > 0, { what: `n3 catches up on ${p}` });
    }
  } finally {
    await cluster.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
