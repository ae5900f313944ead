/**
 * Operations metrics of leases and Raft commits on a simulated cluster (fixed seed): every partition's first lease is
 * counted as a holder change and as acquired by its holder, the primary partition counts add up to the partitions,
 * and when a primary is cut off from its Raft group until another replica takes the lease over, the holder change is
 * counted on both nodes' applied state, the old holder counts a lease lost and the new one a lease acquired. Leaders
 * time their proposals on the injected clock.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName } from '../../src/index.js';
import type { NodeMetrics } from '../../src/node/basalt-node.js';
import { type TestCluster, withSimCluster } from '../client/support.js';

const T = 'accounts';
const PARTITIONS = 2;

function leasesOf(cluster: TestCluster, name: NodeName): NodeMetrics['leases'] {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  return node.metrics().leases;
}

function primaryTotal(cluster: TestCluster): number {
  return cluster.nodes.reduce((sum, n) => sum + leasesOf(cluster, n).primaryPartitions, 0);
}

describe('lease and commit metrics (simulated)', () => {
  it('a lease moved off its primary is counted on both nodes: lost by the old holder, acquired by the new', () =>
    withSimCluster('lease-metrics', { partitions: PARTITIONS }, async (cluster, client) => {
      await client.transaction((t) => t.put(T, 'k', 1));
      await cluster.waitFor(() => primaryTotal(cluster) === PARTITIONS, { what: 'every partition has a primary' });
      // Backups apply a lease once they learn its commit index, a tick after the primary.
      await cluster.waitFor(() => cluster.nodes.every((n) => leasesOf(cluster, n).changes >= PARTITIONS), {
        what: "every node applied every partition's first lease",
      });
      const acquired = cluster.nodes.reduce((sum, n) => sum + leasesOf(cluster, n).acquired, 0);
      assert.ok(acquired >= PARTITIONS, 'each first lease was acquired by some node');

      const { partition, primary: old } = cluster.placement(T, 'k');
      assert.ok(old !== undefined);
      const before = new Map(cluster.nodes.map((n) => [n, leasesOf(cluster, n)]));
      const out = cluster.network.drop({ kind: 'Raft', group: partition, from: old });
      const into = cluster.network.drop({ kind: 'Raft', group: partition, to: old });
      await cluster.waitFor(
        () => {
          const p = cluster.placement(T, 'k').primary;
          return p !== undefined && p !== old;
        },
        { what: 'another replica holds the lease', timeoutMs: 60_000 },
      );
      const successor = cluster.placement(T, 'k').primary!;
      out.undo();
      into.undo();
      // Healed, the old holder applies the new lease too.
      await cluster.waitFor(() => leasesOf(cluster, old).lost > before.get(old)!.lost, {
        what: 'the old holder applied the takeover',
      });
      const oldAfter = leasesOf(cluster, old);
      const newAfter = leasesOf(cluster, successor);
      assert.ok(oldAfter.changes > before.get(old)!.changes, 'the old holder counted the holder change');
      assert.ok(newAfter.changes > before.get(successor)!.changes, 'the new holder counted the holder change');
      assert.equal(oldAfter.acquired, before.get(old)!.acquired, 'the old holder acquired nothing');
      assert.ok(newAfter.acquired > before.get(successor)!.acquired, 'the new holder acquired the lease');

      await client.transaction((t) => t.put(T, 'k', 2));
      const timed = cluster.nodes.map((n) => cluster.basaltNode(n)!.metrics().raftCommitLatencyMs);
      assert.ok(timed.reduce((sum, h) => sum + h.count, 0) > 0, 'leaders timed their proposals');
      for (const h of timed) assert.ok(h.sum >= 0 && (h.count === 0 || h.sum / h.count < 10_000), `sum ${h.sum}`);
    }));
});
