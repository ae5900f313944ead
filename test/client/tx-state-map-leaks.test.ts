/**
 * The tx state map stays flat under a steady workload (simulated, fixed seeds): every entry ends final and is
 * vacuumed after its retention, or is removed; none stays PENDING for good. Covered: read-only RW txs against a
 * remote primary (their unlock-only cleanup carries a final state), a backup that catches up through a snapshot
 * install (it never sees the cleanup commands), and the txs of a crashed coordinator that nobody touches again.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import type { NodeName, PartitionId, TxId } from '../../src/index.js';
import { startCluster } from '../../src/index.js';
import type { ReplicaPartitionHost } from '../../src/node/replica-host.js';
import { type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
/** Past the map's retention of final entries and the vacuum round that removes them. */
const PAST_RETENTION_MS = LIMITS.txStateRetentionMsDefault + 2 * LIMITS.txStateVacuumIntervalMsDefault + 1_000;
/** Past a tx's deadline D, the clock skew bound and the sweep's grace, plus a few sweep passes. */
const PAST_SWEEP_MS =
  LIMITS.txTimeoutMsDefault +
  LIMITS.maxClockSkewMsDefault +
  LIMITS.txStateSweepGraceMs +
  3 * LIMITS.txStateSweepIntervalMs;

function hostOf(cluster: TestCluster, name: NodeName): ReplicaPartitionHost {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  return node.partitions as ReplicaPartitionHost;
}

function mapSizes(cluster: TestCluster): number[] {
  return cluster.nodes.map((n) => cluster.node(n).metrics().txStateEntries);
}

/** A key whose primary is not `coordinator`. */
function remoteKey(cluster: TestCluster, coordinator: NodeName, avoid?: string): string {
  for (let i = 0; i < 10_000; i++) {
    const { primary, partition } = cluster.placement(T, `k${i}`);
    if (avoid !== undefined && cluster.placement(T, avoid).partition === partition) continue;
    if (primary !== undefined && primary !== coordinator) return `k${i}`;
  }
  throw new Error('no key with a remote primary');
}

describe('tx state map leaks (simulated)', () => {
  it('10k read-only RW txs against a remote primary leave every node map at its baseline after the retention', () =>
    withSimCluster('map-leak-read-only', { nodes: 3, partitions: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator);
      const client = cluster.client(coordinator);
      await client.put(T, key, 1);
      await cluster.runFor(PAST_RETENTION_MS);
      const baseline = mapSizes(cluster);
      const total = 10_000;
      const parallel = 50;
      let committed = 0;
      for (let done = 0; done < total; done += parallel) {
        await Promise.all(
          Array.from({ length: parallel }, (_, i) =>
            // Half commit, half roll back: both end with an unlock-only cleanup.
            client.begin().then(async (tx) => {
              assert.equal(await tx.get(T, key), 1);
              if ((done + i) % 2 === 0) {
                await tx.commit();
                committed += 1;
              } else {
                await tx.rollback();
              }
            }),
          ),
        );
      }
      assert.equal(committed, total / 2);
      const loaded = mapSizes(cluster);
      await cluster.runFor(PAST_RETENTION_MS);
      const after = mapSizes(cluster);
      console.log(`map sizes: baseline ${baseline}, after the txs ${loaded}, after the retention ${after}`);
      assert.deepEqual(after, baseline, 'every node map back at its baseline');
    }));

  it('a backup that catches up through a snapshot install ends the entries of the txs the snapshot already cleaned up', async () => {
    const seed = 'map-leak-snapshot';
    const cluster = await startCluster({ simulation: { seed }, nodes: 3, tuning: { raftCompactEntriesMin: 20 } });
    try {
      const client = cluster.client('n1');
      await client.createTable(T, { partitions: 1, replicas: 3 });
      const key = 'k0';
      const { partition, primary, replicas } = cluster.placement(T, key);
      assert.ok(primary !== undefined);
      const backup = replicas.find((n) => n !== primary && n !== 'n1') ?? replicas.find((n) => n !== primary)!;
      const txs = await Promise.all(Array.from({ length: 5 }, () => client.begin()));
      for (const [i, tx] of txs.entries()) await tx.put(T, `${key}-${i}`, i);
      await cluster.waitFor(() => txs.every((tx) => cluster.node(backup).txState(tx.id)?.state === 'PENDING'), {
        what: 'the backup applied the updates',
      });
      // The backup misses the switches and enough entries after them that the leader compacts its log past them.
      const cuts = [
        cluster.network.drop({ kind: 'Raft', group: partition, to: backup }),
        cluster.network.drop({ kind: 'Raft', group: partition, from: backup }),
      ];
      for (const tx of txs) await tx.commit();
      for (let i = 0; i < 60; i++) await client.put(T, `filler-${i}`, i);
      for (const c of cuts) c.undo();
      const host = hostOf(cluster, backup);
      const leaderApplied = () => hostOf(cluster, primary).partition(partition as PartitionId)!.stateMachine;
      await cluster.waitFor(
        () => host.partition(partition as PartitionId)!.stateMachine.appliedIndex() >= leaderApplied().appliedIndex(),
        { what: 'the backup caught up', timeoutMs: 30_000 },
      );
      await cluster.runFor(1_000);
      const states = txs.map((tx) => cluster.node(backup).txState(tx.id)?.state);
      assert.ok(
        states.every((s) => s === undefined || s === 'COMMITTED'),
        `no entry left PENDING on the backup: ${states.join(', ')}`,
      );
      await cluster.runFor(PAST_RETENTION_MS);
      for (const tx of txs)
        assert.equal(cluster.node(backup).txState(tx.id), undefined, 'vacuumed after the retention');
    } catch (error) {
      if (error instanceof Error) error.message = `[seed ${seed}] ${error.message}`;
      throw error;
    } finally {
      await cluster.stop().catch(() => {});
    }
  });

  it('the txs of a crashed coordinator that nobody touches again leave every surviving node map at its baseline', () =>
    withSimCluster('map-leak-dead-coordinator', { nodes: 3, partitions: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator);
      const other = remoteKey(cluster, coordinator, key);
      await cluster.client('n2').put(T, key, 'old');
      await cluster.runFor(PAST_RETENTION_MS);
      const survivors = cluster.nodes.filter((n) => n !== coordinator);
      const baseline = survivors.map((n) => cluster.node(n).metrics().txStateEntries);
      const client = cluster.client(coordinator);
      const reader = await client.begin();
      await reader.get(T, key);
      const writer = await client.begin();
      await writer.put(T, other, 'new');
      const ids: TxId[] = [reader.id, writer.id];
      await cluster.waitFor(() => survivors.some((n) => cluster.node(n).txState(writer.id) !== undefined));
      await cluster.stopNode(coordinator);
      await cluster.runFor(PAST_SWEEP_MS + PAST_RETENTION_MS);
      const after = survivors.map((n) => cluster.node(n).metrics().txStateEntries);
      const left = survivors.flatMap((n) => ids.map((id) => cluster.node(n).txState(id)?.state ?? '-'));
      console.log(`survivors' map sizes: baseline ${baseline}, after ${after} (entries of the two txs: ${left})`);
      assert.deepEqual(after, baseline, 'every surviving node map back at its baseline');
      assert.equal(await cluster.client('n2').get(T, other), undefined, 'the dead coordinator’s write never commits');
    }));

  it('a crashed coordinator’s intent and locks on another node are recovered with no reader and no conflicting writer', () =>
    withSimCluster('sweep-dead-coordinator', { nodes: 3, partitions: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator);
      const { partition, primary } = cluster.placement(T, key);
      assert.ok(primary !== undefined);
      const tx = await cluster.client(coordinator).begin();
      await tx.put(T, key, 'orphan');
      const hosted = () => hostOf(cluster, primary).partition(partition as PartitionId)!;
      // A pipelined write answers once proposed: its intent is there once the primary applied it.
      await cluster.waitFor(() => hosted().mv.rowsWrittenBy(tx.id).length > 0, { what: 'an intent', timeoutMs: 2_000 });
      assert.ok(hosted().locks.locksOf(tx.id).length > 0, 'locks');
      await cluster.stopNode(coordinator);
      const survivors = cluster.nodes.filter((n) => n !== coordinator);
      // Bounded: the liveness timeout (rule 17), a sweep pass, the recovery and its cleanup.
      await cluster.runFor(LIMITS.peerLivenessTimeoutMsDefault + 3 * LIMITS.txStateSweepIntervalMs + 5_000);
      assert.deepEqual(hosted().mv.rowsWrittenBy(tx.id), [], 'the intent is gone');
      assert.deepEqual(hosted().locks.locksOf(tx.id), [], 'the locks are gone');
      for (const n of survivors) {
        const state = cluster.node(n).txState(tx.id)?.state;
        assert.ok(state === undefined || state === 'ABORTED', `${n}: final or removed, got ${state}`);
      }
    }));

  it('an intent of a crashed coordinator left with no map entry anywhere (every node restarted) is recovered', () =>
    withSimCluster('sweep-intent-no-entry', { nodes: 3, partitions: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator);
      const { partition } = cluster.placement(T, key);
      await cluster.client('n2').put(T, key, 'old');
      const tx = await cluster.client(coordinator).begin();
      await tx.put(T, key, 'orphan');
      await cluster.runFor(1_000); // applied and flushed on every replica
      // Every node crashes; all restart, the coordinator with a new ephemeral id, so its old id is gone (rule 17).
      for (const n of cluster.nodes) await cluster.stopNode(n);
      for (const n of cluster.nodes) await cluster.startNode(n);
      const survivors = cluster.nodes.filter((n) => n !== coordinator);
      const primaryBack = () => {
        try {
          return cluster.placement(T, key).primary !== undefined;
        } catch {
          return false; // the restarted nodes have not relearned the table yet
        }
      };
      await cluster.waitFor(primaryBack, { what: 'a primary again', timeoutMs: 60_000 });
      const intents = () =>
        survivors.map(
          (n) =>
            hostOf(cluster, n)
              .partition(partition as PartitionId)
              ?.mv.rowsWrittenBy(tx.id).length,
        );
      for (const n of survivors) assert.equal(cluster.node(n).txState(tx.id), undefined, `${n} lost its map`);
      assert.ok(
        intents().some((count) => (count ?? 0) > 0),
        'the intent survived the restarts',
      );
      await cluster.runFor(LIMITS.peerLivenessTimeoutMsDefault + 3 * LIMITS.txStateSweepIntervalMs + 5_000);
      assert.deepEqual(
        intents(),
        survivors.map(() => 0),
        'the intent is gone on every replica',
      );
      assert.equal(await cluster.client('n2').get(T, key), 'old');
    }));
});
