/**
 * A commit that carries its writes (DESIGN §4b "Fewer rounds per commit"), simulated over fixed seeds: the writes to
 * the commit partition, whose rows the tx read `forUpdate`, ride in the finish's own Raft entry at the commitTs the
 * commit partition takes there (no write request, no intent); the other partitions' writes go first, answered once
 * applied. Checked from outside: the values, one commitTs everywhere, a snapshot just below it that sees none of the
 * writes and one at it that sees all; and a commit partition whose primary changed after the locks were taken aborts
 * the tx (retryable) and writes nothing.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HybridTimestamp, NodeName, PartitionId, Transaction, TxId } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import type { TxWrite } from '../../src/tx/core/user-input.js';
import { keyIn, type TestCluster, twoPartitionRoles, withSimCluster } from '../client/support.js';

const T = 'accounts';

function commitWith(tx: Transaction, writes: readonly TxWrite[]): Promise<void> {
  const carrying = tx as Transaction & { commitWith(writes: readonly TxWrite[]): Promise<void> };
  return carrying.commitWith(writes);
}

function recordOf(cluster: TestCluster, node: NodeName, partition: PartitionId, txId: TxId) {
  return cluster.basaltNode(node)?.storage.txStatePartition(partition).get(txId);
}

function writeRequests(cluster: TestCluster): number {
  return cluster.network.count({ kind: 'ReadWriteRequest' });
}

describe('a commit carrying its writes to its commit partition (simulated)', () => {
  const options = { nodes: 4, partitions: 6, replicas: 3 };

  it('writes the commit partition rows in the finish entry at the commitTs it stores there: one commitTs everywhere, a snapshot below it sees none of the writes, one at it sees all', () =>
    withSimCluster('carried-two-partitions', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      await client.transaction(async (tx) => {
        await tx.put(T, roles.keyA, 100);
        await tx.put(T, roles.keyB, 100);
      });
      const tx = await client.begin();
      const a = (await tx.get(T, roles.keyA, { forUpdate: true })) as number;
      const b = (await tx.get(T, roles.keyB, { forUpdate: true })) as number;
      const before = writeRequests(cluster);
      await commitWith(tx, [
        { table: T, key: roles.keyA, value: a - 30 },
        { table: T, key: roles.keyB, value: b + 30 },
      ]);
      assert.equal(writeRequests(cluster) - before, 1, "only B's write is a request of its own");
      const record = recordOf(cluster, roles.primaryA, roles.a, tx.id);
      assert.equal(record?.state, 'COMMITTED');
      const commitTs = record?.commitTs as HybridTimestamp;
      assert.equal(cluster.node(roles.coordinator).txState(tx.id)?.commitTimestamp, commitTs);
      await cluster.waitFor(() => cluster.node(roles.primaryB).txState(tx.id)?.state === 'COMMITTED', {
        what: "B's cleanup",
        timeoutMs: 10_000,
      });
      assert.equal(cluster.node(roles.primaryB).txState(tx.id)?.commitTimestamp, commitTs);
      const keys = [roles.keyA, roles.keyB];
      const below = await client.begin({ readOnly: true, readTimestamp: (commitTs - 1n) as HybridTimestamp });
      assert.deepEqual(await below.getAll(T, keys), [100, 100], 'below commitTs: none of the writes');
      await below.commit();
      const at = await client.begin({ readOnly: true, readTimestamp: commitTs });
      assert.deepEqual(await at.getAll(T, keys), [70, 130], 'at commitTs: all of them');
      await at.commit();
    }));

  it('a tx whose writes all land on its commit partition commits without a write request', () =>
    withSimCluster('carried-one-partition', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const other = keyIn(cluster, T, (p) => p === roles.a, 's');
      const client = cluster.client(roles.coordinator);
      const tx = await client.begin();
      const values = await tx.getAll(T, [roles.keyA, other], { forUpdate: true });
      assert.deepEqual(values, [undefined, undefined]);
      const before = writeRequests(cluster);
      await commitWith(tx, [
        { table: T, key: roles.keyA, value: 'a' },
        { table: T, key: other, value: 'b' },
        { table: T, key: other },
      ]);
      assert.equal(writeRequests(cluster), before, 'no write request: the finish carried both rows');
      assert.equal(recordOf(cluster, roles.primaryA, roles.a, tx.id)?.state, 'COMMITTED');
      assert.deepEqual(await client.transaction((t) => t.getAll(T, [roles.keyA, other])), ['a', undefined]);
      const next = await client.begin();
      await next.put(T, roles.keyA, 'after');
      await next.commit();
      assert.equal(await client.get(T, roles.keyA), 'after', 'the locks were released');
    }));

  it('the commit partition primary changed after the rows were locked: the commit partition aborts the tx, retryably, and nothing is written', () =>
    withSimCluster('carried-locks-lost', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      await client.transaction(async (tx) => {
        await tx.put(T, roles.keyA, 1);
        await tx.put(T, roles.keyB, 1);
      });
      const tx = await client.begin();
      await tx.get(T, roles.keyA, { forUpdate: true });
      await tx.get(T, roles.keyB, { forUpdate: true });
      await cluster.stopNode(roles.primaryA);
      await cluster.waitFor(
        () => {
          const primary = cluster.placement(T, roles.keyA).primary;
          return primary !== undefined && primary !== roles.primaryA;
        },
        { what: 'a new primary for A', timeoutMs: 60_000 },
      );
      // B's lease as last heard must cover the commit: read B again to hear it anew.
      await tx.get(T, roles.keyB, { forUpdate: true });
      const failed = await commitWith(tx, [
        { table: T, key: roles.keyA, value: 2 },
        { table: T, key: roles.keyB, value: 2 },
      ]).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(isBasaltError(failed), `the commit failed with a coded error: ${String(failed)}`);
      assert.equal(failed.code, 'TX_ABORTED', failed.message);
      assert.equal(failed.retryable, true);
      assert.equal(cluster.node(roles.coordinator).txState(tx.id)?.state, 'ABORTED');
      assert.deepEqual(await client.transaction((t) => t.getAll(T, [roles.keyA, roles.keyB])), [1, 1]);
    }));
});
