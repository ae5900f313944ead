/**
 * Transactions with their own timeout (`begin({ timeoutMs })`), end to end through the public client on simulated
 * clusters (fixed seeds): the timeout travels in the tx id so every node derives the same hard deadline (rule 15). A
 * 120 s tx outlives the 30 s default and commits; a 2 s one fails TX_TIMEOUT once past it; out-of-range values and
 * timeouts on read-only transactions are refused; without the option nothing changes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LIMITS } from '../../src/core/limits.js';
import { startCluster, type TxId } from '../../src/index.js';
import { timeoutOf } from '../../src/tx/core/tx-id.js';
import { keysInDistinctPartitions, rejectsWith, withSimCluster } from './support.js';

const T = 'accounts';

describe('RW transactions with their own timeout (simulated)', () => {
  it('a tx begun with timeoutMs 120 s is still open after 35 s of virtual time, then commits everywhere', () =>
    withSimCluster('long-tx-commits', { partitions: 4 }, async (cluster, client) => {
      const [a, b] = keysInDistinctPartitions(cluster, T, 2) as [string, string];
      const tx = await client.begin({ timeoutMs: 120_000 });
      assert.equal(timeoutOf(tx.id as TxId), 120_000, 'the id carries the timeout');
      await tx.put(T, a, 1);
      await cluster.runFor(LIMITS.txTimeoutMsDefault + 5_000);
      await tx.put(T, b, 2);
      assert.equal(await tx.get(T, a), 1);
      await cluster.runFor(10_000);
      await tx.commit();
      const values = await cluster.client('n2').transaction((t) => t.getAll(T, [a, b]));
      assert.deepEqual(values, [1, 2]);
    }));

  it('a tx begun with timeoutMs 2 s fails TX_TIMEOUT on its next operation and on commit after 3 s', () =>
    withSimCluster('short-tx-times-out', {}, async (cluster, client) => {
      const tx = await client.begin({ timeoutMs: 2_000 });
      await tx.put(T, 'k', 1);
      await cluster.runFor(3_000);
      await rejectsWith(tx.put(T, 'k2', 2), 'TX_TIMEOUT');
      await rejectsWith(tx.commit(), 'TX_TIMEOUT');
      assert.equal(await client.get(T, 'k'), undefined, 'nothing of it committed');
      // Its locks are gone: another tx writes the key at once.
      await client.transaction((t) => t.put(T, 'k', 3));
      assert.equal(await client.get(T, 'k'), 3);
    }));

  it('the same timeout through client.transaction: a run that outlives it fails TX_TIMEOUT', () =>
    withSimCluster('short-tx-transaction', {}, async (cluster, client) => {
      const ran: string[] = [];
      const error = await rejectsWith(
        client.transaction(
          async (t) => {
            ran.push(t.id);
            await t.put(T, 'x', 1);
            await cluster.runFor(1_500);
          },
          { timeoutMs: 1_000, retries: 1 },
        ),
        'TX_TIMEOUT',
      );
      assert.equal(error.retryable, true);
      assert.equal(ran.length, 2, 'retried once in a fresh tx, which timed out too');
      for (const id of ran) assert.equal(timeoutOf(id as TxId), 1_000);
    }));

  it('out-of-range timeouts are INVALID_ARGUMENT, and so is a timeout on a read-only tx; the default is unchanged', () =>
    withSimCluster('tx-timeout-refused', {}, async (_cluster, client) => {
      for (const timeoutMs of [0, -1, 1.5, LIMITS.txTimeoutMsMax + 1, Number.NaN, '5000' as unknown as number]) {
        await rejectsWith(client.begin({ timeoutMs }), 'INVALID_ARGUMENT');
      }
      await rejectsWith(client.begin({ readOnly: true, timeoutMs: 5_000 }), 'INVALID_ARGUMENT');
      await rejectsWith(
        client.transaction(() => Promise.resolve(), { timeoutMs: LIMITS.txTimeoutMsMax + 1 }),
        'INVALID_ARGUMENT',
      );
      const longest = await client.begin({ timeoutMs: LIMITS.txTimeoutMsMax });
      assert.equal(timeoutOf(longest.id as TxId), LIMITS.txTimeoutMsMax);
      await longest.rollback();
      const plain = await client.begin();
      assert.equal(timeoutOf(plain.id as TxId), undefined, 'an id without the field: the cluster-wide 30 s');
      await plain.rollback();
    }));

  it('the maximum is configurable per cluster (coordinator tuning txTimeoutMsMax)', async () => {
    const cluster = await startCluster({
      simulation: { seed: 'tx-timeout-max' },
      coordinator: { txTimeoutMsMax: 60_000 },
    });
    try {
      const client = cluster.client();
      await rejectsWith(client.begin({ timeoutMs: 60_001 }), 'INVALID_ARGUMENT');
      const tx = await client.begin({ timeoutMs: 60_000 });
      assert.equal(timeoutOf(tx.id as TxId), 60_000);
      await tx.rollback();
    } finally {
      await cluster.stop();
    }
  });
});
