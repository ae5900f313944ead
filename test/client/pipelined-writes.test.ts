/**
 * Pipelined writes end to end (simulated, fixed seeds; DESIGN §2 "Writes", rules 4, 6 and 7): a primary answers a
 * write of a tx once its lock is held and its command proposed, and the commit first confirms every such write's
 * apply result. A write that cannot be confirmed makes the commit abort; it never commits.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError, type NodeName } from '../../src/index.js';
import type { ReplicaPartitionHost } from '../../src/node/replica-host.js';
import { type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

function hostOf(cluster: TestCluster, name: NodeName): ReplicaPartitionHost {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  return node.partitions as ReplicaPartitionHost;
}

/** A key whose primary is not n1 (the client's coordinator). */
async function remoteKey(cluster: TestCluster, prefix: string): Promise<string> {
  let key: string | undefined;
  await cluster.waitFor(
    () => {
      for (let i = 0; i < 1_000 && key === undefined; i++) {
        const primary = cluster.placement(T, `${prefix}${i}`).primary;
        if (primary !== undefined && primary !== 'n1') key = `${prefix}${i}`;
      }
      return key !== undefined;
    },
    { what: 'a key with a primary other than n1' },
  );
  return key!;
}

describe('pipelined writes (simulated)', () => {
  it('a put returns while its command is still replicating; commit waits for the apply, then commits it', () =>
    withSimCluster('pipelined-confirm', {}, async (cluster, client) => {
      const key = await remoteKey(cluster, 'p');
      const { partition, primary } = cluster.placement(T, key);
      assert.ok(primary !== undefined);
      await client.put(T, key, 'old');
      const hosted = hostOf(cluster, primary).partition(partition)!;
      const confirmsBefore = cluster.network.count({ kind: 'WriteConfirmRequest' });
      // The primary's appends reach its followers, their acks do not come back: nothing commits meanwhile.
      const acks = cluster.network.hold({ kind: 'Raft', to: primary, group: partition });
      const tx = await client.begin();
      await tx.put(T, key, 'new');
      assert.ok(hosted.proposals.inFlightCount > 0, 'the put was answered before its command applied');
      let committed = false;
      const commit = tx.commit().then(() => {
        committed = true;
      });
      await cluster.runFor(300);
      assert.equal(committed, false, 'commit waits for the write to apply');
      acks.release();
      await cluster.drive(commit);
      assert.equal(cluster.network.count({ kind: 'WriteConfirmRequest' }) - confirmsBefore, 1, 'one confirmation');
      assert.equal(await client.get(T, key), 'new');
    }));

  it('a younger write waits for an older holder that is committing instead of dying under wait-die', () =>
    withSimCluster('pipelined-finishing-holder', {}, async (cluster, client) => {
      const key = await remoteKey(cluster, 'f');
      await client.put(T, key, 0);
      const older = await client.begin();
      await older.put(T, key, 1);
      // The older tx's commit confirms its write, then its finish is held: it holds the lock while committing.
      const finishes = cluster.network.hold({ kind: 'TxFinishRequest' });
      const commit = older.commit();
      await cluster.waitFor(() => cluster.network.count({ kind: 'WriteConfirmRequest' }) > 0, {
        what: 'the older tx confirmed its write',
      });
      await cluster.runFor(50);
      const younger = await cluster.client('n2').begin();
      let outcome: unknown = 'pending';
      const put = younger.put(T, key, 2).then(
        () => {
          outcome = 'written';
        },
        (error: unknown) => {
          outcome = error;
        },
      );
      // Longer than a request waits for an in-line settle of an older holder (inlineSettleWaitMsMax) before it dies.
      await cluster.runFor(1_500);
      assert.equal(outcome, 'pending', `the younger write waits: ${String(outcome)}`);
      finishes.release();
      await cluster.drive(commit);
      await cluster.drive(put);
      assert.equal(outcome, 'written');
      await younger.commit();
      assert.equal(await client.get(T, key), 2);
    }));

  it('a put answered before it applied whose apply cannot be confirmed aborts the commit: nothing of it is visible', () =>
    withSimCluster('pipelined-unconfirmed', {}, async (cluster, client) => {
      const key = await remoteKey(cluster, 'u');
      const { partition, primary } = cluster.placement(T, key);
      assert.ok(primary !== undefined);
      await client.put(T, key, 'old');
      const hosted = hostOf(cluster, primary).partition(partition)!;
      const acks = cluster.network.hold({ kind: 'Raft', to: primary, group: partition });
      const tx = await client.begin();
      await tx.put(T, key, 'new');
      assert.ok(hosted.proposals.inFlightCount > 0, 'the put was answered before its command applied');
      // The primary goes before the write applied there: whatever became of the entry, no one can confirm it.
      acks.release();
      await cluster.stopNode(primary);
      const error = await cluster.drive(
        tx.commit().then(
          () => undefined,
          (e: unknown) => e,
        ),
      );
      assert.ok(isBasaltError(error, 'TX_ABORTED'), `commit without a confirmation: ${String(error)}`);
      assert.equal(error.retryable, true);
      assert.equal(error.details?.['reason'], 'write-unconfirmed');
      await cluster.runFor(10_000);
      assert.equal(await client.get(T, key), 'old', 'the unconfirmed write never commits');
    }));
});
