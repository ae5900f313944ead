/**
 * A lease that moves while a transaction is open aborts the transaction, and the user sees a coded, retryable error
 * (simulated, fixed seeds). The lease moves either because the primary is cut off from its Raft group until its lease
 * lapses and another replica takes over, or because the primary's node crashes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName } from '../../src/index.js';
import { isBasaltError } from '../../src/index.js';
import { keyIn, type TestCluster, withSimCluster } from './support.js';

const T = 'accounts';

/** A key whose partition's primary is not n1 (the coordinator), and that primary. */
function remoteKey(cluster: TestCluster): { key: string; primary: NodeName } {
  const key = keyIn(cluster, T, (p) => {
    const primary = cluster.placement(T, keyOf(cluster, p)).primary;
    return primary !== undefined && primary !== 'n1';
  });
  const primary = cluster.placement(T, key).primary;
  assert.ok(primary !== undefined);
  return { key, primary };
}

function keyOf(cluster: TestCluster, partition: string): string {
  return keyIn(cluster, T, (p) => p === partition);
}

/** Cuts `node` off from the Raft traffic of `key`'s partition until another replica holds its lease. */
async function moveLeaseAway(cluster: TestCluster, key: string, node: NodeName): Promise<void> {
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
}

function assertRetryableAbort(error: unknown): void {
  assert.ok(isBasaltError(error), `a coded error: ${String(error)}`);
  assert.equal(error.retryable, true, `retryable: ${error.code} ${error.message}`);
  assert.ok(['TX_ABORTED', 'PRIMARY_MISS', 'TX_TIMEOUT'].includes(error.code), `code ${error.code}`);
}

describe('a lease moved during a transaction (simulated)', () => {
  it('an operation after the lease moved away fails retryably and the tx can only roll back', () =>
    withSimCluster('lease-move-op', {}, async (cluster, client) => {
      const { key, primary } = remoteKey(cluster);
      const tx = await client.begin();
      await tx.put(T, key, 'first');
      await moveLeaseAway(cluster, key, primary);
      const error = await tx.put(T, key, 'second').then(
        () => undefined,
        (e: unknown) => e,
      );
      assertRetryableAbort(error);
      const commitError = await tx.commit().then(
        () => undefined,
        (e: unknown) => e,
      );
      assertRetryableAbort(commitError);
      await tx.rollback();
      assert.equal(await client.get(T, key), undefined, 'nothing of the aborted tx is visible');
      // The retry in a fresh transaction goes to the new primary and commits.
      await client.transaction((t) => t.put(T, key, 'retried'));
      assert.equal(await client.get(T, key), 'retried');
    }));

  it('a commit after the lease moved away fails retryably and leaves nothing behind', () =>
    withSimCluster('lease-move-commit', {}, async (cluster, client) => {
      const { key, primary } = remoteKey(cluster);
      const tx = await client.begin();
      await tx.get(T, key);
      await tx.put(T, 'other', 1);
      await moveLeaseAway(cluster, key, primary);
      const error = await tx.commit().then(
        () => undefined,
        (e: unknown) => e,
      );
      assertRetryableAbort(error);
      await cluster.waitFor(() => cluster.node('n1').txState(tx.id)?.state === 'ABORTED', {
        what: 'the coordinator records the abort',
      });
      assert.equal(await client.get(T, 'other'), undefined);
    }));

  it("a crash of the primary's node aborts the open tx retryably; client.transaction retries it to success", () =>
    withSimCluster('lease-move-crash', {}, async (cluster, client) => {
      const { key, primary } = remoteKey(cluster);
      const tx = await client.begin();
      await tx.put(T, key, 'before-crash');
      await cluster.stopNode(primary);
      const error = await tx.put(T, key, 'after-crash').then(
        () => undefined,
        (e: unknown) => e,
      );
      if (error !== undefined) assertRetryableAbort(error);
      const commitError = await tx.commit().then(
        () => undefined,
        (e: unknown) => e,
      );
      assertRetryableAbort(commitError);
      await tx.rollback();
      let attempts = 0;
      await client.transaction(
        async (t) => {
          attempts++;
          await t.put(T, key, 'after');
        },
        { retries: 30 },
      );
      assert.equal(await client.get(T, key), 'after');
      assert.ok(attempts >= 1);
      await cluster.startNode(primary);
    }));
});
