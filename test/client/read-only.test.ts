/**
 * Read-only transactions and write intent resolution end to end through the public client on simulated clusters
 * (fixed seeds; a failure names its seed): snapshot stability against pending writes and removes, the coordinator path
 * with the finish held (visible iff commitTs ≤ readTs), the commit partition path with recovery once the coordinator
 * is gone (old value, ABORTED, a late commit refused), RO misuse errors, and the node metrics of every path.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, PartitionId } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { keyIn, rejectsWith, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

function resolutions(cluster: TestCluster): { local: number; coordinator: number; commitPartition: number } {
  const total = { local: 0, coordinator: 0, commitPartition: 0 };
  for (const n of cluster.nodes) {
    if (!cluster.node(n).up) continue;
    const r = cluster.node(n).metrics().resolution;
    total.local += r.local;
    total.coordinator += r.coordinator;
    total.commitPartition += r.commitPartition;
  }
  return total;
}

/** A key whose partition's replicas exclude `coordinator`, so every read of it meets the intent on another node. */
function remoteKey(cluster: TestCluster, coordinator: NodeName, prefix: string): string {
  return keyIn(
    cluster,
    T,
    (p: PartitionId) => !cluster.placement(T, keyOf(cluster, p, prefix)).replicas.includes(coordinator),
    prefix,
  );
}

function keyOf(cluster: TestCluster, partition: PartitionId, prefix: string): string {
  return keyIn(cluster, T, (p) => p === partition, prefix);
}

describe('RO transactions (simulated)', () => {
  it('an RO snapshot is stable: a pending write is invisible, its commit stays invisible to the old snapshot, a new RO tx sees it', () =>
    withSimCluster('ro-snapshot', { nodes: 3 }, async (cluster, client) => {
      await client.put(T, 'acct', 100);
      const rw = await client.begin();
      await rw.put(T, 'acct', 300);
      const ro1 = await cluster.client('n2').begin({ readOnly: true });
      assert.equal(ro1.readOnly, true);
      assert.ok(ro1.readTimestamp !== undefined && ro1.readTimestamp > 0n, 'an RO tx has a read timestamp');
      assert.equal(await ro1.get(T, 'acct'), 100, 'a pending write is not visible');
      await rw.commit();
      assert.equal(await ro1.get(T, 'acct'), 100, 'the old snapshot stays the same after the commit');
      const ro2 = await cluster.client('n3').begin({ readOnly: true });
      assert.equal(await ro2.get(T, 'acct'), 300, 'a new snapshot sees the commit');
      await ro1.commit();
      await ro2.commit();
      assert.equal(await client.get(T, 'acct'), 300, 'implicit get reads the latest committed value');
    }));

  it('a pending remove is invisible to an RO snapshot, and stays so after it commits', () =>
    withSimCluster('ro-remove', { nodes: 3 }, async (cluster, client) => {
      await client.put(T, 'gone', 'here');
      const rw = await client.begin();
      await rw.remove(T, 'gone');
      const ro = await cluster.client('n2').begin({ readOnly: true });
      assert.equal(await ro.get(T, 'gone'), 'here');
      await rw.commit();
      assert.equal(await ro.get(T, 'gone'), 'here');
      assert.equal(await cluster.client('n3').transaction((t) => t.get(T, 'gone'), { readOnly: true }), undefined);
    }));

  it('RO misuse: writes fail TX_READ_ONLY, reads after commit TX_ALREADY_FINISHED, a readTs beyond the skew bound INVALID_ARGUMENT', () =>
    withSimCluster('ro-misuse', { nodes: 3 }, async (_cluster, client) => {
      const ro = await client.begin({ readOnly: true });
      await rejectsWith(ro.put(T, 'k', 1), 'TX_READ_ONLY');
      await rejectsWith(ro.remove(T, 'k'), 'TX_READ_ONLY');
      await ro.commit();
      await rejectsWith(ro.get(T, 'k'), 'TX_ALREADY_FINISHED');
      const far = (ro.readTimestamp ?? 0n) + (3_600_000n << 16n);
      await rejectsWith(client.begin({ readOnly: true, readTimestamp: far as never }), 'INVALID_ARGUMENT');
    }));

  it('an explicit readTimestamp reads the past; bounded staleness fixes one readTs for the whole tx', () =>
    withSimCluster('ro-explicit', { nodes: 3 }, async (cluster, client) => {
      await client.put(T, 'v', 1);
      const before = await client.begin({ readOnly: true });
      const pastTs = before.readTimestamp!;
      await before.commit();
      await cluster.runFor(50);
      await client.put(T, 'v', 2);
      const past = await cluster.client('n2').begin({ readOnly: true, readTimestamp: pastTs });
      assert.equal(await past.get(T, 'v'), 1, 'the value as of the explicit readTs');
      await past.commit();
      const stale = await cluster.client('n3').begin({ readOnly: true, stalenessMs: 10 });
      const ts = stale.readTimestamp;
      await stale.get(T, 'v');
      await cluster.runFor(100);
      await stale.get(T, 'v');
      assert.equal(stale.readTimestamp, ts, 'one readTs for the whole tx');
      await stale.commit();
    }));
});

describe('write intent resolution (simulated, 5 nodes)', () => {
  const options = { nodes: 5, partitions: 5, replicas: 3 };

  it('coordinator path: with TxFinishRequest held, an RO read elsewhere asks the coordinator; the value is visible iff commitTs ≤ readTs', () =>
    withSimCluster('wir-coordinator', options, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator, 'c');
      const reader = cluster.placement(T, key).replicas[0]!;
      await cluster.client(reader).put(T, key, 'old');
      const tx = await cluster.client(coordinator).begin();
      await tx.put(T, key, 'new');
      const before = resolutions(cluster);
      const held = cluster.network.hold({ kind: 'TxFinishRequest' });
      const commit = tx.commit();
      await cluster.waitFor(() => held.heldCount > 0, { what: 'finish request held' });
      const commitTs = cluster.node(coordinator).txState(tx.id)?.commitTimestamp;
      assert.ok(commitTs !== undefined, 'FINISHING carries the commitTs');
      // An RO tx that began before the commit chose its timestamp reads the old value at once (never waits).
      const early = await cluster
        .client(reader)
        .transaction(async (ro) => ({ ts: ro.readTimestamp!, v: await ro.get(T, key) }), {
          readOnly: true,
          readTimestamp: (commitTs - 1n) as never,
        });
      assert.equal(early.v, 'old', 'readTs < commitTs: the intent is not visible');
      // An RO tx at a readTs ≥ commitTs waits for the outcome, which the release lets through.
      const late = cluster.client(reader).transaction((ro) => ro.get(T, key), { readOnly: true });
      await cluster.runFor(20);
      held.release();
      assert.equal(await late, 'new', 'readTs ≥ commitTs: the committed intent is visible');
      await commit;
      const after = resolutions(cluster);
      assert.ok(after.coordinator > before.coordinator, `the coordinator path was used: ${JSON.stringify(after)}`);
    }));

  it('commit partition path: the coordinator stopped before commit; an RO read sees the old value and the tx ends ABORTED; the coordinator restarted cannot commit it', () =>
    withSimCluster('wir-recovery', options, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator, 'r');
      const placement = cluster.placement(T, key);
      const reader = placement.replicas[0]!;
      await cluster.client(reader).put(T, key, 'old');
      const tx = await cluster.client(coordinator).begin();
      await tx.put(T, key, 'new');
      const before = resolutions(cluster);
      await cluster.stopNode(coordinator);
      const value = await cluster.client(reader).transaction((ro) => ro.get(T, key), { readOnly: true });
      assert.equal(value, 'old', 'an abandoned intent is not visible');
      const after = resolutions(cluster);
      assert.ok(after.commitPartition > before.commitPartition, `commit partition path used: ${JSON.stringify(after)}`);
      await cluster.waitFor(() => cluster.node(placement.primary!).txState(tx.id)?.state === 'ABORTED', {
        what: 'the commit partition aborted the orphan',
      });
      const recoveries = cluster.nodes
        .filter((n) => cluster.node(n).up)
        .map((n) => cluster.node(n).metrics().recoveries);
      assert.ok(
        recoveries.some((r) => r > 0),
        `a commit partition counted the recovery: ${recoveries}`,
      );
      // The coordinator's node is down: its handle can only say the tx never commits.
      const late = await tx.commit().then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(isBasaltError(late), `a commit through the dead coordinator fails coded: ${String(late)}`);
      await cluster.startNode(coordinator);
      // Writes to the key work again: the orphan's lock and intent are gone.
      await cluster.client(coordinator).transaction((t) => t.put(T, key, 'after'));
      assert.equal(await cluster.client(reader).get(T, key), 'after');
    }));

  it('a partitioned coordinator that comes back late cannot commit: its write is not confirmed, the tx ends ABORTED', () =>
    withSimCluster('wir-late-commit', options, async (cluster) => {
      const coordinator = 'n1' as NodeName;
      const key = remoteKey(cluster, coordinator, 'l');
      const placement = cluster.placement(T, key);
      const reader = placement.replicas[0]!;
      await cluster.client(reader).put(T, key, 'old');
      const tx = await cluster.client(coordinator).begin();
      await tx.put(T, key, 'new');
      const cutOut = cluster.network.drop({ from: coordinator });
      const cutIn = cluster.network.drop({ to: coordinator });
      await cluster.runFor(5_000); // past the liveness timeout: the others see the coordinator gone
      const value = await cluster.client(reader).transaction((ro) => ro.get(T, key), { readOnly: true });
      assert.equal(value, 'old');
      await cluster.waitFor(() => cluster.node(placement.primary!).txState(tx.id)?.state === 'ABORTED', {
        what: 'recovery aborted the tx on its commit partition',
      });
      cutOut.undo();
      cutIn.undo();
      const error = await tx.commit().then(
        () => undefined,
        (e: unknown) => e,
      );
      // Its write was answered before it applied; recovery cleaned the tx up there since, so nothing confirms it.
      assert.ok(isBasaltError(error, 'TX_ABORTED'), `late commit: ${String(error)}`);
      assert.equal(error.retryable, true);
      assert.equal(error.details?.['reason'], 'write-unconfirmed');
      assert.equal(
        cluster.node(coordinator).txState(tx.id)?.state,
        'ABORTED',
        'the coordinator learned the real outcome',
      );
      assert.equal(await cluster.client(reader).get(T, key), 'old');
    }));
});
