import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startCluster } from '../../src/index.js';

test('smoke: simulated put/get/commit', async () => {
  const cluster = await startCluster({ simulation: { seed: 1 } });
  try {
    const client = cluster.client();
    await client.createTable('accounts', { partitions: 4, replicas: 3 });
    const tx = await client.begin();
    await tx.put('accounts', 'alice', { balance: 100 });
    await tx.put('accounts', 'bob', { balance: 50 });
    assert.deepEqual(await tx.get('accounts', 'alice'), { balance: 100 });
    await tx.commit();
    assert.deepEqual(await client.get('accounts', 'bob'), { balance: 50 });
    await client.put('accounts', 'carol', 7);
    assert.equal(await client.get('accounts', 'carol'), 7);
  } finally {
    await cluster.stop();
  }
});
