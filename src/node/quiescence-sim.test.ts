/**
 * Idle partitions rest and their Raft groups go quiet (partition-replica.ts "Rest", raft.ts "Quiescence"), on a
 * simulated cluster (virtual time): the first write after a quiet period wakes the group and gets a lease, and reads
 * after it (a fresh RO read, an implicit get, a bounded-staleness read served by a follower) see the last committed
 * write, never the snapshot of before the rest.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startCluster } from '../index.js';
import type { ReplicaPartitionHost } from './replica-host.js';

const PARTITIONS = 4;

test('simulated: idle partitions go quiet; a write and reads after a quiet period see the last committed write', async () => {
  const cluster = await startCluster({ simulation: { seed: 'quiescence' }, nodes: 3, replicas: { rest: true } });
  try {
    await cluster.createTable('t', { partitions: PARTITIONS, replicas: 3 });
    const client = cluster.client('n1');
    await client.put('t', 'k', { v: 1 });
    await cluster.runFor(10_000);
    for (const n of cluster.nodes) {
      const m = cluster.basaltNode(n)!.metrics();
      assert.equal(m.raftQuietGroups, PARTITIONS + 1, `${n}: every group is quiet, the metastorage's included`);
    }
    const group = cluster.placement('t', 'k').partition;
    const leader = cluster.leaderOf(group)!;
    const primary = (cluster.basaltNode(leader)!.partitions as ReplicaPartitionHost).partition(group)!;
    assert.ok(primary.isResting, 'the leader replica rests');
    const check = primary.checkPrimary(primary.clock.current());
    assert.equal(check.kind, 'PRIMARY_MISS', 'its lease lapsed while nobody used the partition');

    // Quiet for long enough that the lease lapsed: the write wakes the group and waits for the renewed lease.
    await client.put('t', 'k', { v: 2 });
    assert.deepEqual(await client.get('t', 'k'), { v: 2 });
    const ro = await client.begin({ readOnly: true });
    assert.deepEqual(await ro.get('t', 'k'), { v: 2 });
    await ro.commit();

    // Quiet again; a bounded-staleness read on a follower's node is served by its local replica, whose safe time
    // stopped at the last apply: it must wake the leader and wait for safe time, not read the old snapshot.
    await client.put('t', 'k', { v: 3 });
    await cluster.runFor(10_000);
    assert.equal(cluster.basaltNode(leader)!.metrics().raftQuietGroups, PARTITIONS + 1);
    const follower = cluster.nodes.find((n) => n !== leader)!;
    const stale = await cluster.client(follower).begin({ readOnly: true, stalenessMs: 100 });
    assert.deepEqual(await stale.get('t', 'k'), { v: 3 });
    await stale.commit();

    // A metastorage command wakes the quiet metastorage group: the new table is created and usable.
    await cluster.createTable('u', { partitions: 1, replicas: 3 });
    await client.put('u', 'k', { v: 4 });
    assert.deepEqual(await client.get('u', 'k'), { v: 4 });
  } finally {
    await cluster.stop();
  }
});
