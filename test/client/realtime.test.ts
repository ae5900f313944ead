/**
 * The same client API on real time: an in-process cluster with the in-memory transport and storage (the default of
 * `startCluster`), running transactions across partitions, a rollback, a one-phase write and a small concurrent
 * counter.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { startCluster } from '../../src/index.js';

it('real time, in-memory: commit across partitions, rollback, one-phase writes and a concurrent counter', async () => {
  const cluster = await startCluster({ nodes: 3 });
  try {
    const client = cluster.client();
    await client.createTable('accounts', { partitions: 4, replicas: 3 });
    assert.deepEqual(
      (await client.tables()).map((t) => t.name),
      ['accounts'],
    );
    const tx = await client.begin();
    for (const k of ['a', 'b', 'c', 'd', 'e']) await tx.put('accounts', k, { k });
    assert.deepEqual(await tx.get('accounts', 'c'), { k: 'c' });
    await tx.commit();
    const other = cluster.client('n3');
    assert.deepEqual(await other.transaction((t) => t.getAll('accounts', ['a', 'e', 'z'])), [
      { k: 'a' },
      { k: 'e' },
      undefined,
    ]);

    const rolled = await other.begin();
    await rolled.put('accounts', 'a', 'overwritten');
    await rolled.rollback();
    assert.deepEqual(await client.get('accounts', 'a'), { k: 'a' });

    await client.put('accounts', 'counter', 0);
    const clients = cluster.nodes.map((n) => cluster.client(n));
    await Promise.all(
      Array.from({ length: 9 }, (_, i) =>
        clients[i % 3]!.transaction(
          async (t) => {
            const v = (await t.get('accounts', 'counter')) as number;
            await t.put('accounts', 'counter', v + 1);
          },
          { retries: 50, backoffMsMin: 2, backoffMsMax: 50 },
        ),
      ),
    );
    assert.equal(await client.get('accounts', 'counter'), 9);
    await client.remove('accounts', 'counter');
    assert.equal(await client.get('accounts', 'counter'), undefined);
    await client.dropTable('accounts');
    assert.deepEqual(await client.tables(), []);
  } finally {
    await cluster.stop();
  }
});
