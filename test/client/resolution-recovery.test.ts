/**
 * Write intent resolution meets recovery (simulated, fixed seeds): the commit partition never recovers (aborts) a tx
 * whose coordinator is alive, even when the request reaching it comes from the coordinator's own node and a commit
 * partition primary that has never heard of the tx (rule 17: the coordinator id is always known from the tx id).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, PartitionId } from '../../src/index.js';
import { type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

/** The first key `prefix<i>` whose placement satisfies `accept`. */
function keyWhere(
  cluster: TestCluster,
  accept: (p: { partition: PartitionId; primary: NodeName | undefined; replicas: readonly NodeName[] }) => boolean,
  prefix: string,
): string {
  for (let i = 0; i < 10_000; i++) {
    if (accept(cluster.placement(T, `${prefix}${i}`))) return `${prefix}${i}`;
  }
  throw new Error('no key for the placement predicate');
}

/** Cuts `node` off from the Raft traffic of `key`'s partition until another replica holds its lease. */
async function moveLeaseAway(cluster: TestCluster, key: string, node: NodeName): Promise<NodeName> {
  const group = cluster.placement(T, key).partition;
  const out = cluster.network.drop({ kind: 'Raft', group, from: node });
  const into = cluster.network.drop({ kind: 'Raft', group, to: node });
  await cluster.waitFor(
    () => {
      const p = cluster.placement(T, key).primary;
      return p !== undefined && p !== node;
    },
    { what: 'another replica holds the lease', timeoutMs: 60_000 },
  );
  out.undo();
  into.undo();
  const primary = cluster.placement(T, key).primary;
  assert.ok(primary !== undefined);
  return primary;
}

describe('resolution and recovery (simulated)', () => {
  it('an RO read on the coordinator node whose FINISHING wait times out does not get the committing tx recovered', () =>
    withSimCluster('resolve-own-finishing', { nodes: 6, partitions: 8, replicas: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      // A: the commit partition (read first), sharing no node with B, so that its next primary has no entry of the
      // tx. B: written, its primary on the coordinator's node, where the RO read meets the intent.
      const keyB = keyWhere(cluster, (p) => p.primary === coordinator, 'b');
      const replicasB = cluster.placement(T, keyB).replicas;
      const keyA = keyWhere(
        cluster,
        (p) => p.primary !== undefined && p.replicas.every((r) => !replicasB.includes(r)),
        'a',
      );
      const client = cluster.client(coordinator);
      const tx = await client.begin();
      await tx.get(T, keyA);
      await tx.put(T, keyB, 'committed');
      const held = cluster.network.hold({ kind: 'TxFinishRequest' });
      const commit = tx.commit().then(
        () => 'committed',
        (e: unknown) => e,
      );
      await cluster.waitFor(() => held.heldCount > 0, { what: 'finish request held' });
      const oldPrimary = cluster.placement(T, keyA).primary;
      assert.ok(oldPrimary !== undefined);
      const newPrimary = await moveLeaseAway(cluster, keyA, oldPrimary);
      assert.notEqual(newPrimary, coordinator);
      assert.equal(cluster.node(newPrimary).txState(tx.id), undefined, 'the new commit partition primary never saw it');

      const asked = cluster.network.count({ kind: 'TxStateCommitPartitionRequest', to: newPrimary });
      const ro = await client.begin({ readOnly: true });
      const read = ro.get(T, keyB).then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
      await cluster.waitFor(
        () => cluster.network.count({ kind: 'TxStateCommitPartitionRequest', to: newPrimary }) > asked,
        { what: 'the read falls back to the commit partition', timeoutMs: 30_000 },
      );
      await cluster.runFor(1_000);
      held.release();
      assert.equal(await commit, 'committed', 'the commit is not recovered into an abort');
      const outcome = await read;
      if ('value' in outcome) assert.equal(outcome.value, 'committed', 'the read sees the commit below its readTs');
      await cluster.waitFor(() => cluster.node(newPrimary).txState(tx.id)?.state === 'COMMITTED', {
        what: 'the commit partition primary final COMMITTED',
      });
      assert.equal(await client.get(T, keyB), 'committed');
    }));
});
