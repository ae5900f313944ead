/**
 * Protected timestamps on an in-process cluster whose nodes keep one second of history: a protected timestamp keeps
 * reads at it working on every node (the low watermark stays at it) far past the retention, through the client
 * protocol as through the embedded client; once released, or lapsed without renewal, the watermark passes it. A
 * backup whose reads take several times the retention (and its protection's lifetime) still reads its snapshot.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HybridTimestamp } from '../core/ids.js';
import { type Client, type Cluster, connect, isBasaltError, startClientServer, startCluster } from '../index.js';
import { denial, permissionOf } from './authorization.js';
import { type BackupSource, backup } from './backup.js';

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

describe('a backup under a protected timestamp', () => {
  it('runs far past the retention and the RO reads of its start, and holds exactly the snapshot at T', async () => {
    const client = cluster.client('n1');
    await client.createTable('slow', { partitions: 3, replicas: 3 });
    await client.transaction((tx) =>
      tx.putAll(
        'slow',
        ['k0', 'k1', 'k2', 'k3'].map((key) => ({ key, value: 1 })),
      ),
    );
    const at = await now();
    await client.transaction((tx) =>
      tx.putAll(
        'slow',
        ['k0', 'k1', 'k2', 'k3', 'k4'].map((key) => ({ key, value: 2 })),
      ),
    );
    let scans = 0;
    // Every scan waits 900 ms: three partitions read one after the other take three times the retention.
    const slow: BackupSource = {
      tables: () => client.tables(),
      protectTimestamp: (ts, options) => client.protectTimestamp(ts, options),
      renewProtectedTimestamp: (id, options) => client.renewProtectedTimestamp(id, options),
      releaseProtectedTimestamp: (id) => client.releaseProtectedTimestamp(id),
      begin: async (options) => {
        const tx = await client.begin(options);
        return {
          readTimestamp: tx.readTimestamp,
          scan: async (table, range, scanOptions) => {
            scans += 1;
            await sleep(900);
            return tx.scan(table, range, scanOptions);
          },
          rollback: () => tx.rollback(),
        };
      },
    };
    const dir = mkdtempSync(join(tmpdir(), 'basalt-pts-'));
    try {
      const started = Date.now();
      const summary = await backup(slow, {
        to: join(dir, 'b'),
        tables: ['slow'],
        at,
        concurrency: 1,
        protectionLifetimeMs: 1_200,
      });
      assert.ok(Date.now() - started >= 2_700 && scans >= 3, 'the backup ran past the retention and the lifetime');
      assert.equal(summary.timestamp, at);
      assert.equal(summary.rows, 4, 'the rows at T, not the later k4');
      await client.restore({ from: join(dir, 'b'), as: 'slow_at' });
      const restored = await readAll('slow_at');
      assert.deepEqual(restored, new Map(['k0', 'k1', 'k2', 'k3'].map((k) => [k, 1])), 'the values at T');
      await sleep(1_500);
      await assert.rejects(readAt('n1', at), tooOld, 'released: the watermark passes T');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

async function readAll(table: string): Promise<Map<string, unknown>> {
  const tx = await cluster.client('n1').begin({ readOnly: true });
  try {
    return new Map((await tx.scan(table, {})).map((r) => [r.key, r.value]));
  } finally {
    await tx.rollback();
  }
}
