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
    // Durable data: n3 (a metastorage member) replays the table from its own Raft log.
    await cluster.waitFor(() => n3.metastorage.table('t') !== undefined && n3.hostedPartitions().size === 3, {
      what: 'n3 knows its table again and hosts its partitions',
    });
    await cluster.waitFor(() => n1.liveIdOf(nodeName('n3')) === newId, { what: 'n1 sees the new id live' });
    assert.equal(n1.isGone(oldId), true, 'the old id stays gone (superseded)');
    for (const p of n3.hostedPartitions().keys()) {
      await cluster.waitFor(() => (n3.raft.status(p)?.commit ?? 0) > 0, { what: `n3 catches up on ${p}` });
    }
    // The filters wrap TCP transports too (node heartbeats go out every 500 ms).
    await cluster.waitFor(() => cluster.network.count({ kind: 'NodeHeartbeat', from: 'n1', to: 'n3' }) > 0, {
      what: 'a NodeHeartbeat from n1 to n3 passes the filters',
    });
    const held = cluster.network.hold({ kind: 'Raft', group: 'meta', to: 'n3' });
    await cluster.waitFor(() => held.heldCount > 0, { what: 'meta heartbeats to n3 held' });
    assert.ok(held.release() > 0);
  } finally {
    await cluster.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('memory transport: hold, drop and count filter by kind, group, from and to', async () => {
  const cluster = await startReal();
  try {
    const table = await cluster.createTable('t', { partitions: 1, replicas: 3 });
    const group = `t${table.id}p0`;
    const leader = cluster.leaderOf(group as never)!;
    const follower = cluster.nodes.find((n) => n !== leader)!;
    const before = cluster.network.count({ kind: 'Raft', group, from: leader, to: follower });
    await cluster.runFor(100);
    assert.ok(cluster.network.count({ kind: 'Raft', group, from: leader, to: follower }) > before);
    assert.equal(cluster.network.count({ kind: 'Raft', group, from: follower, to: follower }), 0);

    const followerNode = cluster.basaltNode(follower)!;
    const dropped = cluster.network.drop({ kind: 'Raft', group, to: follower });
    const commitBefore = followerNode.raft.status(group as never)!.commit;
    await cluster.createTable('u', { partitions: 1, replicas: 3 });
    await cluster.runFor(100);
    assert.ok(dropped.droppedCount > 0);
    assert.equal(followerNode.raft.status(group as never)!.commit, commitBefore, 'nothing of the group reached it');
    dropped.undo();

    const held = cluster.network.hold({ kind: 'MetaCommandRequest' });
    const n1 = cluster.basaltNode('n1')!;
    const metaLeader = cluster.leaderOf('meta' as never)!;
    const via = cluster.nodes.find((n) => n !== metaLeader)!;
    const creating = cluster.basaltNode(via)!.metastorage.createTable('held', { partitions: 1, replicas: 1 });
    await cluster.waitFor(() => held.heldCount > 0, { what: 'the command request is held' });
    await cluster.runFor(100);
    assert.equal(n1.metastorage.table('held'), undefined, 'not applied while its request is held');
    assert.equal(held.release(), 1);
    await creating;
    await cluster.waitFor(() => n1.metastorage.table('held') !== undefined, { what: 'applied after release' });
    assert.throws(
      () => cluster.network.count({ kind: 'Raft', bogus: 1 } as never),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  } finally {
    await cluster.stop();
  }
});

test('a cluster whose start fails leaves nothing running (the port of a failed TCP node is released)', async () => {
  const { createServer } = await import('node:net');
  const listen = (server: ReturnType<typeof createServer>, p: number) =>
    new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(p, '127.0.0.1', () => resolve(true));
    });
  const close = (server: ReturnType<typeof createServer>) =>
    new Promise<void>((resolve) => server.close(() => resolve()));
  // A blocked port whose predecessor is free (n1 listens there).
  let blocker = createServer();
  let port = 0;
  for (let attempt = 0; attempt < 20; attempt++) {
    await listen(blocker, 0);
    port = (blocker.address() as { port: number }).port;
    const before = createServer();
    if (port > 1024 && (await listen(before, port - 1))) {
      await close(before);
      break;
    }
    await close(blocker);
    blocker = createServer();
  }
  try {
    // n2 would listen on the blocked port: n1 starts, n2 fails, and n1 must be stopped again.
    await assert.rejects(startReal({ transport: 'tcp', basePort: port - 1 }, 2), /EADDRINUSE/);
    const probe = createServer();
    assert.equal(await listen(probe, port - 1), true, "n1's port was released");
    await close(probe);
  } finally {
    await close(blocker);
  }
});
