/**
 * Write intent resolution meets recovery (simulated, fixed seeds): the commit partition never recovers (aborts) a tx
 * whose coordinator is alive, even when the request reaching it comes from the coordinator's own node and a commit
 * partition primary that has never heard of the tx (rule 17: the coordinator id is always known from the tx id); and a
 * storm of readers meeting the intents of one orphaned tx settles on one commit partition request in flight per
 * serving node, whatever the readers' timestamps.
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

  it('a commit whose finish is delayed past the tx deadline is not recovered under its live coordinator by the sweep', () =>
    withSimCluster('sweep-live-coordinator', { nodes: 3, partitions: 3 }, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = keyWhere(cluster, (p) => p.primary !== undefined && p.primary !== coordinator, 'k');
      const client = cluster.client(coordinator);
      const tx = await client.begin();
      await tx.put(T, key, 'late');
      const held = cluster.network.hold({ kind: 'TxFinishRequest' });
      const commit = tx.commit().then(
        () => 'committed',
        (e: unknown) => e,
      );
      // Past D, the clock skew bound and the sweep's grace, within the coordinator's foreground finish window.
      await cluster.runFor(55_000);
      held.release();
      assert.equal(await commit, 'committed', 'not recovered into an abort under its live coordinator');
      assert.equal(await client.get(T, key), 'late');
    }));

  /**
   * The orphan: coordinated on n4, its commit partition's primary on n5, 12 intents; n4 and n5 crash together. The
   * metastorage members (n1..n3) stay up, and every partition used keeps a majority.
   */
  async function orphanStorm(cluster: TestCluster, readersStartAfterPrimariesBack: boolean) {
    const coordinator = 'n4' as NodeName;
    const cpPrimary = 'n5' as NodeName;
    const survives = (replicas: readonly NodeName[]) =>
      !(replicas.includes(coordinator) && replicas.includes(cpPrimary));
    const cpKey = keyWhere(cluster, (p) => p.primary === cpPrimary && !p.replicas.includes(coordinator), 'c');
    const keys = [cpKey];
    for (let i = 0; keys.length < 12 && i < 10_000; i++) {
      const key = `s${i}`;
      const p = cluster.placement(T, key);
      if (survives(p.replicas) && p.primary !== undefined) keys.push(key);
    }
    assert.equal(keys.length, 12);
    const survivors = cluster.nodes.filter((n) => n !== coordinator && n !== cpPrimary);
    await cluster.client(survivors[0]).transaction(async (tx) => {
      for (const key of keys) await tx.put(T, key, 'old');
    });
    const orphan = await cluster.client(coordinator).begin();
    for (const key of keys) await orphan.put(T, key, 'orphan');
    await cluster.runFor(500); // the updates apply on every replica
    await cluster.stopNode(coordinator);
    await cluster.stopNode(cpPrimary);
    const partitions = [...new Set(keys.map((k) => cluster.placement(T, k).partition))];
    if (readersStartAfterPrimariesBack) {
      await cluster.waitFor(
        () =>
          partitions.every((p) => {
            const primary = cluster.placement(T, keys.find((k) => cluster.placement(T, k).partition === p)!).primary;
            return primary !== undefined && survivors.includes(primary);
          }),
        { what: 'every partition has a live primary again', timeoutMs: 60_000 },
      );
    }
    const before = {
      state: cluster.network.count({ kind: 'TxStateCommitPartitionRequest' }),
      recovery: cluster.network.count({ kind: 'TxRecoveryRequest' }),
      perNode: survivors.map((n) => cluster.network.count({ kind: 'TxStateCommitPartitionRequest', from: n })),
    };
    const readers = Array.from({ length: 48 }, async (_, i) => {
      const client = cluster.client(survivors[i % survivors.length]!);
      return client.transaction((tx) => tx.getAll(T, keys), { readOnly: true });
    });
    const values = await Promise.all(readers);
    for (const v of values)
      assert.deepEqual(
        v,
        keys.map(() => 'old'),
        'every reader sees the committed values',
      );
    const state = cluster.network.count({ kind: 'TxStateCommitPartitionRequest' }) - before.state;
    const recovery = cluster.network.count({ kind: 'TxRecoveryRequest' }) - before.recovery;
    const perNode = survivors.map(
      (n, i) => cluster.network.count({ kind: 'TxStateCommitPartitionRequest', from: n }) - before.perNode[i]!,
    );
    console.log(
      `storm (${readersStartAfterPrimariesBack ? 'primaries back' : 'lease moving'}): ` +
        `${state} commit partition state requests (per survivor ${perNode}), ${recovery} recovery requests`,
    );
    return { state, recovery, perNode, servingNodes: survivors.length };
  }

  it('48 RO readers of one orphaned tx while its commit partition lease moves send a small bounded number of commit partition requests', () =>
    withSimCluster('storm-lease-moving', { nodes: 5, partitions: 12, replicas: 3 }, async (cluster) => {
      const { perNode, recovery } = await orphanStorm(cluster, false);
      // One request in flight per serving node and tx, whatever the readers' readTs, retried with the capped backoff
      // while the commit partition has no primary (about a lease duration): a dozen at most, not one per reader.
      for (const n of perNode) assert.ok(n <= 12, `per serving node: ${perNode}`);
      // The sweeps of the intents' primaries ask for recovery, rate-limited per tx and partition.
      assert.ok(recovery <= 2 * 12, `${recovery} recovery requests`);
    }));

  it('48 RO readers of one orphaned tx once every partition has a live primary send one commit partition request per serving node', () =>
    withSimCluster('storm-primaries-back', { nodes: 5, partitions: 12, replicas: 3 }, async (cluster) => {
      const { perNode } = await orphanStorm(cluster, true);
      // One request per serving node (two messages when the first guess of the new primary answers PRIMARY_MISS
      // and the request follows its hint).
      for (const n of perNode) assert.ok(n <= 2, `per serving node: ${perNode}`);
    }));
});
