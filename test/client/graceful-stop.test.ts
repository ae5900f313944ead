/**
 * Graceful stop hands leases and leaderships over (DESIGN §2b rule 5), simulated with fixed seeds: the stopping node
 * stops renewing and granting new locks, keeps serving what its open transactions need until its acting window ends,
 * and the next lease starts at the current expiration, never earlier. The stop takes at most one lease duration.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import type { NodeName, PartitionId } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import type { ReplicaPartitionHost } from '../../src/node/replica-host.js';
import type { Lease } from '../../src/replica/partition/lease.js';
import { keyIn, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

function hostOf(cluster: TestCluster, name: NodeName): ReplicaPartitionHost {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  return node.partitions as ReplicaPartitionHost;
}

function leaseOn(cluster: TestCluster, name: NodeName, partition: PartitionId): Lease | null {
  return hostOf(cluster, name).partition(partition)?.stateMachine.currentLease() ?? null;
}

/** A node other than n1 (the client's coordinator) that is the primary of some partition, and its partitions. */
async function stoppingPrimary(cluster: TestCluster): Promise<{ node: NodeName; keys: string[] }> {
  await cluster.waitFor(() => cluster.tables()[0] !== undefined, { what: 'the table is known' });
  const byPrimary = new Map<NodeName, string[]>();
  await cluster.waitFor(
    () => {
      byPrimary.clear();
      for (let i = 0; i < 4; i++) {
        const key = keyIn(cluster, T, (p) => p.endsWith(`p${i}`));
        const primary = cluster.placement(T, key).primary;
        if (primary === undefined) return false;
        byPrimary.set(primary, [...(byPrimary.get(primary) ?? []), key]);
      }
      return [...byPrimary.keys()].some((n) => n !== 'n1');
    },
    { what: 'a node other than n1 holds a lease', timeoutMs: 30_000 },
  );
  const node = [...byPrimary.keys()].find((n) => n !== 'n1');
  assert.ok(node !== undefined);
  return { node, keys: byPrimary.get(node) ?? [] };
}

/** The nodes holding leases once every one of the table's 8 partitions has a primary, most leases first. */
async function spreadPrimaries(cluster: TestCluster): Promise<NodeName[]> {
  const count = new Map<NodeName, number>();
  await cluster.waitFor(
    () => {
      count.clear();
      for (let i = 0; i < 8; i++) {
        const primary = cluster.placement(
          T,
          keyIn(cluster, T, (p) => p.endsWith(`p${i}`)),
        ).primary;
        if (primary === undefined) return false;
        count.set(primary, (count.get(primary) ?? 0) + 1);
      }
      return true;
    },
    { what: 'every partition has a primary', timeoutMs: 30_000 },
  );
  return [...count.keys()].sort((a, b) => (count.get(b) ?? 0) - (count.get(a) ?? 0));
}

describe('graceful stop (simulated)', () => {
  it('hands every lease over within one lease duration, never shortening one, while writes go on', () =>
    withSimCluster('graceful-stop', {}, async (cluster, client) => {
      const { node, keys } = await stoppingPrimary(cluster);
      const partitions = keys.map((k) => cluster.placement(T, k).partition);
      const before = new Map(partitions.map((p) => [p, leaseOn(cluster, node, p)]));
      const stopping = cluster.basaltNode(node)!;
      const metaLeaderBefore = cluster.leaderOf('meta' as PartitionId);
      let writing = true;
      let committed = 0;
      let writerError: unknown;
      const writer = (async () => {
        for (let i = 0; writing; i++) {
          const key = keys[i % keys.length]!;
          await client.transaction((tx) => tx.put(T, key, i), { retries: 100 });
          committed++;
        }
      })();
      try {
        await stopAndCheck();
      } finally {
        writing = false;
        await writer.catch((error: unknown) => {
          writerError = error;
        });
      }
      assert.equal(writerError, undefined, `the writer failed: ${String(writerError)}`);
      assert.equal(await client.get(T, keys[(committed - 1) % keys.length]!), committed - 1);

      async function stopAndCheck(): Promise<void> {
        await cluster.runFor(50);
        const startMs = cluster.simulation!.nowMs();
        await cluster.shutdownNode(node);
        const tookMs = cluster.simulation!.nowMs() - startMs;
        assert.ok(tookMs > 0 && tookMs <= LIMITS.leaseDurationMsDefault + 100, `the stop took ${tookMs} ms`);
        assert.equal(stopping.counters.get('drain.timeouts'), 0, 'every partition was handed over in time');
        for (const p of partitions) {
          const old = before.get(p);
          assert.ok(old !== null && old !== undefined && old.holderName === node);
          // The stopping node saw the takeover applied, so it is committed; its new holder applied it too.
          const holder = cluster.leaderOf(p);
          assert.ok(holder !== undefined && holder !== node, `${p}: another replica leads`);
          const next = leaseOn(cluster, holder, p);
          assert.ok(next !== null && next.holderName === holder, `${p}: a takeover lease is applied on ${holder}`);
          assert.ok(next.start >= old.expiration, `${p}: the next lease starts at or after the old expiration`);
        }
        if (metaLeaderBefore === node) {
          const leader = cluster.leaderOf('meta' as PartitionId);
          assert.ok(leader !== undefined && leader !== node, 'the metastorage leadership was handed over');
        }
        const atStop = committed;
        await cluster.waitFor(() => committed >= atStop + keys.length, {
          what: 'writes to the handed-over partitions commit after the stop',
          timeoutMs: 10_000,
        });
      }
    }));

  it('two primaries stopping at the same time hand their leases to the node that stays, not to each other', () =>
    withSimCluster('graceful-stop-two', { partitions: 8 }, async (cluster) => {
      const primaries = await spreadPrimaries(cluster);
      const [x, y] = primaries;
      assert.ok(x !== undefined && y !== undefined, `two nodes hold leases: ${primaries.join(',')}`);
      const stay = cluster.nodes.find((n) => n !== x && n !== y)!;
      const stopping = [x, y].map((n) => cluster.basaltNode(n)!);
      const startMs = cluster.simulation!.nowMs();
      await Promise.all([cluster.shutdownNode(x), cluster.shutdownNode(y)]);
      const tookMs = cluster.simulation!.nowMs() - startMs;
      assert.ok(tookMs <= LIMITS.leaseDurationMsDefault + 100, `the stops took ${tookMs} ms`);
      for (const node of stopping)
        assert.equal(node.counters.get('drain.timeouts'), 0, `${node.name} handed over in time`);
      for (let i = 0; i < 8; i++) {
        const key = keyIn(cluster, T, (p) => p.endsWith(`p${i}`));
        const p = cluster.placement(T, key).partition;
        const lease = leaseOn(cluster, stay, p);
        assert.ok(lease !== null && lease.holderName === stay, `${p}: ${stay}, which stays, holds the lease`);
      }
    }));

  it('a replica handing its lease over refuses new locks but lets an open transaction commit', () =>
    withSimCluster('graceful-hand-over-locks', {}, async (cluster, client) => {
      const { node, keys } = await stoppingPrimary(cluster);
      const key = keys[0]!;
      const partition = cluster.placement(T, key).partition;
      const open = await client.begin();
      await open.put(T, key, 'open');
      hostOf(cluster, node).partition(partition)!.handOver();
      const lateKey = keyIn(cluster, T, (p) => p === partition, 'late');
      const late = await client.begin();
      const error = await late.put(T, lateKey, 1).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(isBasaltError(error), `no new lock on a partition being handed over: ${String(error)}`);
      assert.equal(error.retryable, true, `${error.code}: ${error.message}`);
      await late.rollback();
      await open.commit();
      assert.equal(await client.get(T, key), 'open');
    }));
});
