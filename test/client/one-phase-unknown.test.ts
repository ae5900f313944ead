/**
 * Rule 7 for implicit one-phase writes, end to end (simulated, fixed seed): a primary whose replica stops after it
 * proposed the write abandons the proposal with NODE_UNAVAILABLE, yet the entry sits in its followers' logs and still
 * commits under the same lease. Such a failure proves nothing, so the coordinator must not resend the write as if it
 * never ran (it could apply twice); the client is told TX_OUTCOME_UNKNOWN (not retryable), and the write applied once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName } from '../../src/index.js';
import type { ReplicaPartitionHost } from '../../src/node/replica-host.js';
import { rowLockKey } from '../../src/tx/core/lock-modes.js';
import { rejectsWith, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

function hostOf(cluster: TestCluster, name: NodeName): ReplicaPartitionHost {
  const node = cluster.basaltNode(name);
  assert.ok(node !== undefined, `${name} runs`);
  return node.partitions as ReplicaPartitionHost;
}

/** A key whose primary is not n1 (the client's coordinator). */
async function remoteKey(cluster: TestCluster): Promise<string> {
  let key: string | undefined;
  await cluster.waitFor(
    () => {
      for (let i = 0; i < 1_000 && key === undefined; i++) {
        const primary = cluster.placement(T, `k${i}`).primary;
        if (primary !== undefined && primary !== 'n1') key = `k${i}`;
      }
      return key !== undefined;
    },
    { what: 'a key with a primary other than n1' },
  );
  return key!;
}

describe('implicit one-phase writes with an unknown outcome (simulated)', () => {
  it('a put whose primary replica stops after proposing is TX_OUTCOME_UNKNOWN, sent once, and applied once', () =>
    withSimCluster('one-phase-abandoned', {}, async (cluster, client) => {
      const key = await remoteKey(cluster);
      const { partition, primary } = cluster.placement(T, key);
      assert.ok(primary !== undefined);
      const hosted = hostOf(cluster, primary).partition(partition)!;
      // The primary's appends reach its followers, their acks do not come back: nothing commits yet.
      const acks = cluster.network.hold({ kind: 'Raft', to: primary, group: partition });
      const sentBefore = cluster.network.count({ kind: 'ReadWriteRequest' });
      const put = client.put(T, key, 'once').then(
        () => undefined,
        (error: unknown) => error,
      );
      await cluster.waitFor(() => hosted.locks.holders(rowLockKey(partition, key)).length > 0, {
        what: 'the primary holds the write lock',
      });
      await cluster.runFor(50);
      assert.ok(hosted.proposals.inFlightCount > 0, 'the write is proposed, not applied');
      // The replica object stops (as its host stops or replaces it); its Raft group goes on.
      hosted.stop();
      acks.release();
      const error = await cluster.drive(put);
      assert.ok(error instanceof Error, 'the put did not report success');
      await rejectsWith(Promise.reject(error), 'TX_OUTCOME_UNKNOWN');
      assert.equal((error as { retryable?: boolean }).retryable, false);
      assert.equal(cluster.network.count({ kind: 'ReadWriteRequest' }) - sentBefore, 1, 'not resent');
      // Its node then goes (its Raft group with it): a follower takes over, commits the entry it holds (applied under
      // the old lease, still current at its log position), and a new lease serves the read.
      await cluster.stopNode(primary);
      await cluster.runFor(10_000);
      assert.equal(await client.get(T, key), 'once', 'the abandoned write applied');
    }));
});
