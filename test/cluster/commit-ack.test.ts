/**
 * A commit is acknowledged once its outcome is durable on the commit partition, and cleanup follows it (DESIGN §2
 * "Commit acknowledgement"), simulated over fixed seeds: a commit returns while the cleanup requests are held or cut;
 * a later tx that meets the finished tx's lock or intent cleans it up in line instead of dying or waiting; an RO read
 * still sees the committed value through resolution; and a cut cleanup is re-driven until the commit partition's
 * record says its cleanup completed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, PartitionId, TxId } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { keyIn, type TestCluster, twoPartitionRoles, withSimCluster } from '../client/support.js';

const T = 'accounts';

function recordOf(cluster: TestCluster, node: NodeName, partition: PartitionId, txId: TxId) {
  return cluster.basaltNode(node)?.storage.txStatePartition(partition).get(txId);
}

function intentsOf(cluster: TestCluster, node: NodeName, partition: PartitionId, txId: TxId): number {
  return cluster.basaltNode(node)?.storage.mvPartition(partition).rowsWrittenBy(txId).length ?? 0;
}

/** Settles `p` within `ms` of virtual time, or fails naming `what`. */
async function within<V>(cluster: TestCluster, p: Promise<V>, ms: number, what: string): Promise<V> {
  let settled: { ok: true; value: V } | { ok: false; error: unknown } | undefined;
  p.then(
    (value) => {
      settled = { ok: true, value };
    },
    (error: unknown) => {
      settled = { ok: false, error };
    },
  );
  await cluster.waitFor(() => settled !== undefined, { what, timeoutMs: ms });
  assert.ok(settled !== undefined);
  if (!settled.ok) throw settled.error;
  return settled.value;
}

/** Lets `ms` of virtual time pass, in steps (one drive is bounded). */
async function runLong(cluster: TestCluster, ms: number): Promise<void> {
  for (let left = ms; left > 0; left -= 10_000) await cluster.runFor(Math.min(left, 10_000));
}

describe('commit acknowledged once durable; finished holders cleaned up in line (simulated)', () => {
  const options = { nodes: 4, partitions: 6, replicas: 3 };

  it('sequential transactions from one client writing the same keys back to back never fail TX_LOCK_CONFLICT while every cleanup request is held: each cleans its predecessor in line', () =>
    withSimCluster('ack-sequential', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      const held = cluster.network.hold({ kind: 'TxCleanupRequest' });
      const failures: string[] = [];
      for (let i = 0; i < 6; i++) {
        const tx = await client.begin();
        try {
          await tx.put(T, roles.keyA, i);
          await tx.put(T, roles.keyB, i);
          await within(cluster, tx.commit(), 5_000, `commit ${i}`);
        } catch (error) {
          failures.push(isBasaltError(error) ? `${i}: ${error.code} ${error.message}` : String(error));
          await tx.rollback().catch(() => {});
        }
      }
      assert.deepEqual(failures, [], 'no tx died or waited out a finished predecessor');
      assert.ok(held.heldCount > 0, 'the cleanup requests were held throughout');
      held.release();
      assert.deepEqual(await client.transaction((t) => t.getAll(T, [roles.keyA, roles.keyB])), [5, 5]);
    }));

  it('with TxCleanupRequest from the commit partition primary to the other enlisted primary cut for 3 minutes, commit returns COMMITTED at once and an RO read sees the value; after the link heals the cleanup is re-driven: the intent is switched and the record reaches cleanupCompleted', () =>
    withSimCluster('ack-cut-cleanup', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      const cut = cluster.network.drop({ kind: 'TxCleanupRequest', from: roles.primaryA, to: roles.primaryB });
      const tx = await client.begin();
      await tx.put(T, roles.keyA, 'a');
      await tx.put(T, roles.keyB, 'b');
      await within(cluster, tx.commit(), 5_000, 'commit acknowledged while its cleanup is cut');
      assert.equal(recordOf(cluster, roles.primaryA, roles.a, tx.id)?.state, 'COMMITTED');
      const ro = await client.begin({ readOnly: true });
      assert.deepEqual(await ro.getAll(T, [roles.keyA, roles.keyB]), ['a', 'b'], 'RO read resolves the intent');
      await ro.commit();
      await runLong(cluster, 180_000);
      assert.ok(cluster.placement(T, roles.keyA).primary === roles.primaryA, 'A kept its primary');
      assert.ok(cluster.placement(T, roles.keyB).primary === roles.primaryB, 'B kept its primary');
      assert.equal(intentsOf(cluster, roles.primaryB, roles.b, tx.id), 1, "B's intent waits for its cleanup");
      assert.equal(recordOf(cluster, roles.primaryA, roles.a, tx.id)?.cleanupCompleted, false);
      cut.undo();
      await cluster.waitFor(() => recordOf(cluster, roles.primaryA, roles.a, tx.id)?.cleanupCompleted === true, {
        what: 'the commit partition record reaches cleanupCompleted',
        timeoutMs: 30_000,
      });
      assert.equal(intentsOf(cluster, roles.primaryB, roles.b, tx.id), 0, "B's intent switched by the cleanup");
      const next = await client.begin();
      await within(cluster, next.put(T, roles.keyB, 'b2'), 2_000, "a new tx locks B's key");
      await next.commit();
      assert.equal(await client.get(T, roles.keyB), 'b2');
    }));

  it('a cleanup cut for 5 minutes while both primaries keep their leases never gives up: once the link heals, the rescan re-drives it within the bound, the intent is switched and the record reaches cleanupCompleted', () =>
    withSimCluster('cleanup-redriven', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      const cut = cluster.network.drop({ kind: 'TxCleanupRequest', from: roles.primaryA, to: roles.primaryB });
      const tx = await client.begin();
      await tx.put(T, roles.keyA, 'a');
      await tx.put(T, roles.keyB, 'b');
      const commit = tx.commit().then(
        () => 'COMMITTED',
        (e: unknown) => (isBasaltError(e) ? e.code : String(e)),
      );
      await runLong(cluster, 300_000);
      assert.equal(cluster.placement(T, roles.keyA).primary, roles.primaryA, 'A kept its primary');
      assert.equal(cluster.placement(T, roles.keyB).primary, roles.primaryB, 'B kept its primary');
      assert.equal(recordOf(cluster, roles.primaryA, roles.a, tx.id)?.state, 'COMMITTED');
      assert.equal(intentsOf(cluster, roles.primaryB, roles.b, tx.id), 1, "B's intent waits for its cleanup");
      cut.undo();
      await cluster.waitFor(() => recordOf(cluster, roles.primaryA, roles.a, tx.id)?.cleanupCompleted === true, {
        what: 'the commit partition record reaches cleanupCompleted',
        timeoutMs: 30_000,
      });
      assert.equal(intentsOf(cluster, roles.primaryB, roles.b, tx.id), 0, "B's intent switched by the cleanup");
      assert.equal(await commit, 'COMMITTED');
    }));

  it('a finish delayed past the vacuum horizon: the coordinator drops its FINISHING entry after TX_OUTCOME_UNKNOWN, and the primaries still holding its intents abort them when a reader resolves one or a new tx needs the keys (no record at or below the horizon proves it never committed)', () =>
    withSimCluster('finish-below-horizon', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const other = cluster.nodes.find((n) => n !== roles.coordinator);
      assert.ok(other !== undefined);
      const keyA2 = keyIn(cluster, T, (p) => p === roles.a, 'other');
      const late = await cluster.client(roles.coordinator).begin();
      await late.put(T, roles.keyA, 'late');
      await late.put(T, roles.keyB, 'late');
      const held = cluster.network.hold({ kind: 'TxFinishRequest', from: roles.coordinator });
      const commit = late.commit().then(
        () => 'COMMITTED',
        (e: unknown) => (isBasaltError(e) ? e.code : String(e)),
      );
      await cluster.waitFor(() => held.heldCount > 0, { what: 'the late finish held' });
      // Younger txs on the same commit partition finish, are cleaned up and vacuumed: the horizon passes the late one.
      const younger: TxId[] = [];
      for (let i = 0; i < 3; i++) {
        const tx = await cluster.client(other).begin();
        await tx.put(T, keyA2, i);
        await tx.commit();
        younger.push(tx.id);
      }
      await runLong(cluster, 65_000);
      await cluster.waitFor(() => younger.every((id) => recordOf(cluster, roles.primaryA, roles.a, id) === undefined), {
        what: 'the younger records vacuumed',
        timeoutMs: 30_000,
      });
      assert.equal(recordOf(cluster, roles.primaryA, roles.a, late.id), undefined, 'no record of the late tx');
      held.release();
      assert.equal(await commit, 'TX_OUTCOME_UNKNOWN', 'the user is told the outcome is unknown');
      await cluster.runFor(1_000);
      for (const n of cluster.nodes) {
        assert.notEqual(cluster.node(n).txState(late.id)?.state, 'FINISHING', `${n} has no FINISHING entry left`);
      }
      assert.equal(cluster.node(roles.coordinator).txState(late.id), undefined, 'the coordinator dropped its entry');
      // A reader's resolution of B's intent reaches B's primary on the primary-replica path, which aborts it.
      const ro = await cluster.client(other).begin({ readOnly: true });
      assert.equal(await ro.get(T, roles.keyB), undefined, 'the late write is not visible');
      await ro.commit();
      await cluster.waitFor(() => intentsOf(cluster, roles.primaryB, roles.b, late.id) === 0, {
        what: "B's intent of the late tx aborted after a reader met it",
        timeoutMs: 5_000,
      });
      const next = await cluster.client(other).begin();
      await within(cluster, next.put(T, roles.keyA, 'next'), 5_000, 'a new tx locks key A');
      await within(cluster, next.put(T, roles.keyB, 'next'), 5_000, 'a new tx locks key B');
      await next.commit();
      assert.equal(intentsOf(cluster, roles.primaryA, roles.a, late.id), 0, 'no intent of the late tx on A');
      assert.deepEqual(await cluster.client(other).transaction((t) => t.getAll(T, [roles.keyA, roles.keyB])), [
        'next',
        'next',
      ]);
    }));

  it('concurrent requests meeting one finished holder on one primary share a single commit partition state request and all proceed', () =>
    withSimCluster('ack-shared-settle', { ...options, nodes: 5 }, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T, true);
      const keysB = [0, 1, 2].map((i) => keyIn(cluster, T, (p) => p === roles.b, `b${i}-`));
      const client = cluster.client(roles.coordinator);
      const held = cluster.network.hold({ kind: 'TxCleanupRequest' });
      const tx = await client.begin();
      await tx.put(T, roles.keyA, 'a');
      for (const k of keysB) await tx.put(T, k, 'b');
      await tx.commit();
      // State requests, not attempts: an attempt that misses the primary is followed to the holder it names.
      const asked = () => cluster.basaltNode(roles.primaryB)?.counters.get('inlineCleanup.stateRequests') ?? 0;
      const before = asked();
      const writes = keysB.map((k, i) => cluster.client(roles.coordinator).put(T, k, i));
      await within(cluster, Promise.all(writes), 5_000, 'every write proceeds');
      assert.equal(asked() - before, 1, "one state request for the holder from B's primary");
      held.release();
      assert.deepEqual(await client.transaction((t) => t.getAll(T, keysB)), [0, 1, 2]);
    }));

  it("an older tx waiting for a younger holder is granted soon after the holder commits, although the holder's cleanup requests are held", () =>
    withSimCluster('ack-waiter', options, async (cluster) => {
      const roles = twoPartitionRoles(cluster, T);
      const client = cluster.client(roles.coordinator);
      const held = cluster.network.hold({ kind: 'TxCleanupRequest' });
      const older = await client.begin();
      await older.put(T, roles.keyA, 'older');
      const holder = await client.begin();
      await holder.put(
        T,
        keyIn(cluster, T, (p) => p === roles.a, 'a2-'),
        'holder',
      ); // its commit partition: A
      await holder.put(T, roles.keyB, 'holder');
      const waiting = older.put(T, roles.keyB, 'older');
      await cluster.runFor(500);
      await within(cluster, holder.commit(), 5_000, 'the holder commits');
      await within(cluster, waiting, 3_000, 'the older tx is granted the lock');
      await older.commit();
      held.release();
      assert.deepEqual(await client.transaction((t) => t.getAll(T, [roles.keyA, roles.keyB])), ['older', 'older']);
    }));
});
