/**
 * Protected timestamps on an in-process cluster whose nodes keep one second of history: a protected timestamp keeps
 * reads at it working on every node (the low watermark stays at it) far past the retention, through the client
 * protocol as through the embedded client; once released, or lapsed without renewal, the watermark passes it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HybridTimestamp } from '../core/ids.js';
import { type Client, type Cluster, connect, isBasaltError, startClientServer, startCluster } from '../index.js';
import { denial, permissionOf } from './authorization.js';

let cluster: Cluster<Client>;

before(async () => {
  cluster = await startCluster({ nodes: 3, replicas: { lowWatermarkRetentionMs: 1_000 } });
  await cluster.client('n1').createTable('pt', { partitions: 3, replicas: 3 });
  await cluster.client('n1').put('pt', 'a', 1);
});
after(() => cluster.stop());

/** A read of every partition at `ts`, coordinated on `node`. */
async function readAt(node: string, ts: HybridTimestamp): Promise<number> {
  const tx = await cluster.client(node).begin({ readOnly: true, readTimestamp: ts });
  try {
    let rows = 0;
    for (let partition = 0; partition < 3; partition++) rows += (await tx.scan('pt', {}, { partition })).length;
    return rows;
  } finally {
    await tx.rollback().catch(() => {});
  }
}

const tooOld = (e: unknown) => isBasaltError(e) && e.code === 'TX_READ_ONLY_TOO_OLD';

async function now(): Promise<HybridTimestamp> {
  const tx = await cluster.client('n1').begin({ readOnly: true });
  await tx.rollback();
  return tx.readTimestamp!;
}

describe('protected timestamps', () => {
  it('over the client protocol: held on every node past the retention, released at the end', async () => {
    const server = await startClientServer(cluster, 'n1');
    const remote = await connect(server.address);
    try {
      const ts = await now();
      const record = await remote.protectTimestamp(ts, { lifetimeMs: 60_000 });
      assert.equal(record.ts, ts);
      await sleep(2_500);
      for (const node of ['n1', 'n2', 'n3']) assert.equal(await readAt(node, ts), 1, `a read at it on ${node}`);
      const renewed = await remote.renewProtectedTimestamp(record.id, { lifetimeMs: 90_000 });
      assert.ok(renewed.expiresAt > record.expiresAt && renewed.ts === ts, 'renewed: later expiry, same ts');
      await remote.releaseProtectedTimestamp(record.id);
      await remote.releaseProtectedTimestamp(record.id);
      await assert.rejects(
        remote.renewProtectedTimestamp(record.id),
        (e) => isBasaltError(e) && e.code === 'NOT_FOUND',
      );
      await sleep(1_500);
      for (const node of ['n1', 'n2', 'n3']) await assert.rejects(readAt(node, ts), tooOld, `released on ${node}`);
    } finally {
      await remote.close();
      await server.close();
    }
  });

  it('one that is not renewed lapses, and the watermark passes it', async () => {
    const client = cluster.client('n2');
    const ts = await now();
    await client.protectTimestamp(ts, { lifetimeMs: 1_500 });
    await sleep(1_200);
    assert.equal(await readAt('n3', ts), 1, 'held while unexpired');
    await sleep(1_800);
    await assert.rejects(readAt('n3', ts), tooOld);
  });

  it('needs a cluster-wide admin or readwrite role; lifetimes past the bound are refused', async () => {
    const permission = permissionOf({ id: 1, kind: 'protect', ts: 5n });
    assert.equal(denial({ name: 'w', role: 'readwrite' }, permission), undefined);
    assert.equal(denial({ name: 'a', role: 'admin' }, permission), undefined);
    assert.match(denial({ name: 'r', role: 'readonly' }, permission) ?? '', /admin or readwrite/);
    assert.match(denial({ name: 't', tables: [['pt', 'readwrite']] }, permission) ?? '', /admin or readwrite/);
    await assert.rejects(
      cluster.client('n1').protectTimestamp(await now(), { lifetimeMs: 3_600_000 }),
      (e) => isBasaltError(e) && e.code === 'INVALID_ARGUMENT',
    );
  });
});
