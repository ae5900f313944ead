/**
 * Keys that expire and leases, end to end on a real-time three-node cluster (DESIGN §4b "Expiry is part of a
 * version"): snapshots below a key's expiry see it and snapshots at or above it do not, on every replica; a ttl
 * through the TCP client; bad ttl values are refused with nothing written; a lease whose keepalives stop ends within
 * its ttl plus the skew bound and all of its keys vanish at one timestamp; a revoked lease takes its keys with it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { HybridTimestamp, RowId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { Cluster, defaultNodeNames } from '../harness/cluster.js';
import { RealClusterEnvironment } from '../harness/real-cluster.js';
import { addMs, physicalMs } from '../hlc/timestamp.js';
import { TOMBSTONE, type Value } from '../storage/mv-partition-storage.js';
import { type Client, embeddedClient } from './client.js';
import { startClientServer } from './cluster-server.js';
import { LEASE_TABLE, type LeaseTransaction, putWithLease } from './leases.js';
import { connect } from './remote.js';

const T = 'ttl';
const PARTITIONS = 3;
const SKEW_MS = LIMITS.maxClockSkewMsDefault;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let cluster: Cluster<Client>;
const names = defaultNodeNames(3);

before(async () => {
  const env = new RealClusterEnvironment({ names, tuning: { raftTickIntervalMs: 20 } });
  cluster = await Cluster.start<Client>(env, names, embeddedClient);
  await cluster.client('n1').createTable(T, { partitions: PARTITIONS, replicas: 3 });
});

after(async () => {
  await cluster.stop();
});

/** What node `node`'s own replica of `key`'s partition holds at `ts` (undefined: absent or not there yet). */
function replicaValueAt(node: string, key: string, ts: HybridTimestamp): Value | undefined {
  const partitionId = cluster.placement(T, key).partition;
  const mv = cluster.basaltNode(node)!.storage.mvPartition(partitionId);
  const rowId: RowId | undefined = mv.rowIdOf(key);
  if (rowId === undefined) return undefined;
  const read = mv.read(rowId, ts);
  return read.kind === 'committed' && read.value !== TOMBSTONE ? read.value : undefined;
}

/** The commit timestamp of `key`'s newest version on `node`'s replica, once it has one. */
async function commitTsOn(node: string, key: string): Promise<HybridTimestamp> {
  const partitionId = cluster.placement(T, key).partition;
  let found: HybridTimestamp | undefined;
  await cluster.waitFor(
    () => {
      const mv = cluster.basaltNode(node)!.storage.mvPartition(partitionId);
      const rowId = mv.rowIdOf(key);
      const read = rowId === undefined ? undefined : mv.readLatest(rowId);
      if (read?.kind === 'committed') found = read.commitTs;
      return found !== undefined;
    },
    { what: `${key} applied on ${node}` },
  );
  return found!;
}

async function snapshot(client: Client, keys: readonly string[], readTimestamp?: HybridTimestamp) {
  const tx = await client.begin({ readOnly: true, ...(readTimestamp !== undefined && { readTimestamp }) });
  try {
    return await tx.getAll(T, keys);
  } finally {
    await tx.commit();
  }
}

const isCode = (code: string) => (error: unknown) => isBasaltError(error, code as never);

describe('keys that expire', () => {
  it('an RO snapshot below the expiry sees the key and one at or above it does not, on every replica', async () => {
    const ttlMs = 400;
    await cluster.client('n1').put(T, 'k-ttl', 'v', { ttlMs });
    const commitTs = await commitTsOn('n1', 'k-ttl');
    const expiry = addMs(commitTs, ttlMs);
    const justBefore = (expiry - 1n) as HybridTimestamp;
    for (const node of names) {
      assert.equal(await commitTsOn(node, 'k-ttl'), commitTs, `${node} holds the same version`);
      assert.equal(replicaValueAt(node, 'k-ttl', commitTs), 'v', `${node} at the commit`);
      assert.equal(replicaValueAt(node, 'k-ttl', justBefore), 'v', `${node} just below the expiry`);
      assert.equal(replicaValueAt(node, 'k-ttl', expiry), undefined, `${node} at the expiry`);
    }
    // Through transactions coordinated by every node, once physical time has passed the expiry.
    await sleep(ttlMs + 50);
    for (const node of names) {
      const client = cluster.client(node);
      assert.deepEqual(await snapshot(client, ['k-ttl'], justBefore), ['v'], `RO at ${node} below the expiry`);
      assert.deepEqual(await snapshot(client, ['k-ttl'], expiry), [undefined], `RO at ${node} at the expiry`);
      assert.deepEqual(await snapshot(client, ['k-ttl']), [undefined], `a fresh RO at ${node}`);
      assert.equal(await client.get(T, 'k-ttl'), undefined, `an implicit get at ${node}`);
      const rw = await client.transaction((tx) => tx.get(T, 'k-ttl'));
      assert.equal(rw, undefined, `an RW read at ${node}`);
    }
  });

  it('a ttl written in a read-write transaction counts from its commit', async () => {
    const client = cluster.client('n2');
    await client.transaction(async (tx) => {
      await tx.put(T, 'k-tx', 'in-tx', { ttlMs: 300 });
      assert.equal(await tx.get(T, 'k-tx'), 'in-tx', 'the tx reads its own write');
    });
    const commitTs = await commitTsOn('n2', 'k-tx');
    assert.equal(replicaValueAt('n2', 'k-tx', addMs(commitTs, 299)), 'in-tx');
    assert.equal(replicaValueAt('n2', 'k-tx', addMs(commitTs, 300)), undefined);
    await sleep(350);
    assert.deepEqual(await snapshot(client, ['k-tx'], addMs(commitTs, 299)), ['in-tx']);
    assert.deepEqual(await snapshot(client, ['k-tx']), [undefined]);
  });

  it('a read-write tx that read a value commits only below its expiry; a retry reads it absent', async () => {
    const client = cluster.client('n3');
    await client.put(T, 'k-rw', 'brief', { ttlMs: 2_000 });
    const tx = await client.begin();
    assert.equal(await tx.get(T, 'k-rw'), 'brief');
    await sleep(2_050);
    await assert.rejects(tx.commit(), (e: unknown) => isBasaltError(e, 'TX_ABORTED') && /expired/.test(String(e)));
    let attempts = 0;
    const seen = await client.transaction(async (t) => {
      attempts++;
      return t.get(T, 'k-rw');
    });
    assert.equal(seen, undefined);
    assert.equal(attempts, 1);
    // A read of a value that does not expire binds nothing.
    await client.put(T, 'k-rw2', 'stays');
    const tx2 = await client.begin();
    assert.equal(await tx2.get(T, 'k-rw2'), 'stays');
    await sleep(50);
    await tx2.commit();
  });

  it('bad ttl values are refused with INVALID_ARGUMENT and nothing is written', async () => {
    const client = cluster.client('n1');
    for (const ttlMs of [0, -5, 1.5, Number.NaN, LIMITS.ttlMsMax + 1, '100' as unknown as number]) {
      await assert.rejects(client.put(T, 'k-bad', 'v', { ttlMs }), isCode('INVALID_ARGUMENT'), String(ttlMs));
      await assert.rejects(
        client.transaction((tx) => tx.put(T, 'k-bad', 'v', { ttlMs })),
        isCode('INVALID_ARGUMENT'),
      );
    }
    await assert.rejects(client.put(T, 'k-bad', 'v', { ttlMs: 10, lease: 'x' }), isCode('INVALID_ARGUMENT'));
    assert.equal(await client.get(T, 'k-bad'), undefined);
  });

  it('a ttl through the TCP client: written, visible, then gone; a bad one refused with nothing written', async () => {
    const server = await startClientServer(cluster, 'n3');
    const remote = await connect(`127.0.0.1:${server.port}`);
    try {
      // Ttls long enough for a loaded machine to read the keys first; then they run out.
      await remote.put(T, 'k-tcp', 'over-tcp', { ttlMs: 3_000 });
      await remote.transaction((tx) => tx.put(T, 'k-tcp2', 'tx-over-tcp', { ttlMs: 3_000 }));
      assert.equal(await remote.get(T, 'k-tcp'), 'over-tcp');
      assert.equal(await remote.get(T, 'k-tcp2'), 'tx-over-tcp');
      await assert.rejects(remote.put(T, 'k-tcp3', 'v', { ttlMs: 0 }), isCode('INVALID_ARGUMENT'));
      await assert.rejects(
        remote.put(T, 'k-tcp3', 'v', { ttlMs: 'soon' as unknown as number }),
        isCode('INVALID_ARGUMENT'),
      );
      await sleep(3_050);
      assert.equal(await remote.get(T, 'k-tcp'), undefined);
      assert.equal(await remote.get(T, 'k-tcp2'), undefined);
      assert.equal(await remote.get(T, 'k-tcp3'), undefined);
    } finally {
      await remote.close();
      await server.close();
    }
  });
});

describe('leases', () => {
  const keys = ['lease-a', 'lease-b', 'lease-c', 'lease-d'];

  it('a lease whose keepalives stop ends within its ttl plus the skew bound, all its keys at one timestamp', async () => {
    const client = cluster.client('n1');
    const ttlMs = 1_500;
    const lease = await client.grantLease(ttlMs);
    assert.equal(lease.ttlMs, ttlMs);
    await client.transaction(async (tx) => {
      for (const key of keys.slice(0, 3)) await tx.put(T, key, key, { lease: lease.id });
    });
    await client.put(T, keys[3]!, keys[3]!, { lease: lease.id });
    const keeper = client.keepAlive(lease);
    // Two renewals (every ttl / 3), however loaded the machine: the lease outlives its first ttl.
    await cluster.waitFor(
      () => keeper.renewals >= 2 && physicalMs(keeper.lease.expiresAt) > physicalMs(lease.expiresAt) + ttlMs / 2,
      {
        what: 'two keepalives',
        timeoutMs: 20_000,
      },
    );
    while (Date.now() <= physicalMs(lease.expiresAt) + 50) await sleep(20);
    assert.deepEqual(await snapshot(client, keys), keys, 'kept alive past its first end');
    keeper.close();
    await keeper.done;
    const stoppedAtMs = Date.now();
    const end = keeper.lease.expiresAt;
    assert.ok(end > lease.expiresAt, 'the keepalive moved the end');
    // The end was taken from a node clock at most the skew bound ahead of ours, before the last renewal.
    assert.ok(physicalMs(end) <= stoppedAtMs + ttlMs + SKEW_MS, 'the end is within ttl + skew of the last renewal');
    // Every snapshot sees all of the keys or none: the same versions, the same end.
    let seen: (Value | undefined)[] = keys;
    while (seen.some((v) => v !== undefined)) {
      seen = await snapshot(client, keys);
      const present = seen.filter((v) => v !== undefined).length;
      assert.ok(present === 0 || present === keys.length, `a snapshot saw ${present} of ${keys.length} keys`);
      assert.ok(Date.now() <= stoppedAtMs + ttlMs + SKEW_MS + 2_000, 'the keys vanish within ttl + skew');
      await sleep(20);
    }
    assert.deepEqual(await snapshot(client, keys, (end - 1n) as HybridTimestamp), keys, 'just below the end');
    assert.deepEqual(
      await snapshot(client, keys, end),
      keys.map(() => undefined),
      'at the end',
    );
    for (const node of names) {
      for (const key of keys) {
        assert.equal(replicaValueAt(node, key, (end - 1n) as HybridTimestamp), key, `${node} ${key} before`);
        assert.equal(replicaValueAt(node, key, end), undefined, `${node} ${key} at the end`);
      }
    }
    await assert.rejects(client.keepAliveOnce(lease.id), isCode('LEASE_NOT_FOUND'));
    await assert.rejects(client.put(T, 'late', 'v', { lease: lease.id }), isCode('LEASE_NOT_FOUND'));
    assert.equal(await client.get(T, 'late'), undefined);
  });

  it('revoke removes every key of the lease at once; the revoked lease cannot be kept or used', async () => {
    const client = cluster.client('n2');
    const lease = await client.grantLease(60_000);
    await client.put(T, 'rev-a', 1, { lease: lease.id });
    await client.put(T, 'rev-b', 2, { lease: lease.id });
    const kept = await client.keepAliveOnce(lease.id);
    assert.ok(kept.expiresAt >= lease.expiresAt);
    assert.deepEqual(await snapshot(client, ['rev-a', 'rev-b']), [1, 2]);
    await client.revokeLease(lease.id);
    assert.deepEqual(await snapshot(client, ['rev-a', 'rev-b']), [undefined, undefined]);
    assert.equal(await client.get(LEASE_TABLE, lease.id), undefined);
    await assert.rejects(client.keepAliveOnce(lease.id), isCode('LEASE_NOT_FOUND'));
    await assert.rejects(client.revokeLease(lease.id), isCode('LEASE_NOT_FOUND'));
    await assert.rejects(client.grantLease(0), isCode('INVALID_ARGUMENT'));
  });

  it('a keepalive that finds its lease ended rejects done with LEASE_NOT_FOUND', async () => {
    const client = cluster.client('n3');
    const lease = await client.grantLease(300);
    await client.revokeLease(lease.id);
    const keeper = client.keepAlive(lease);
    await assert.rejects(keeper.done, isCode('LEASE_NOT_FOUND'));
  });
});

describe('leases under clock skew', () => {
  it('with the coordinating node 400 ms ahead (within the skew bound) a lease ends within ttl ± skew', async () => {
    const ttlMs = 2_000;
    cluster.setClockOffset('n2', 400);
    try {
      const client = cluster.client('n2');
      const lease = await client.grantLease(ttlMs);
      await client.put(T, 'skew-a', 'a', { lease: lease.id });
      await client.put(T, 'skew-b', 'b', { lease: lease.id });
      const keptFromMs = Date.now();
      await client.keepAliveOnce(lease.id);
      const keptToMs = Date.now();
      const reader = cluster.client('n1');
      let goneAtMs: number | undefined;
      while (goneAtMs === undefined) {
        const seen = await snapshot(reader, ['skew-a', 'skew-b']);
        const present = seen.filter((v) => v !== undefined).length;
        assert.ok(present === 0 || present === 2, `a snapshot saw ${present} of 2 keys`);
        if (present === 0) goneAtMs = Date.now();
        else await sleep(20);
        assert.ok(Date.now() <= keptToMs + ttlMs + SKEW_MS + 2_000, 'the keys vanish within ttl + skew');
      }
      assert.ok(goneAtMs >= keptFromMs + ttlMs - SKEW_MS, `gone ${goneAtMs - keptFromMs} ms after the keepalive`);
    } finally {
      cluster.setClockOffset('n2', 0);
    }
  });
});

describe('lease key bound', () => {
  it('a lease holding leaseKeysMax keys refuses one more with LEASE_KEYS_MAX, writing nothing', async () => {
    const full = Array.from({ length: LIMITS.leaseKeysMax }, (_, i) => [T, `k${i}`]);
    const writes: string[] = [];
    const tx: LeaseTransaction = {
      get: async () => ({ ttlMs: 1000, end: '123456789', keys: full }),
      put: async (_table, key) => {
        writes.push(key);
      },
      remove: async () => {},
    };
    await assert.rejects(putWithLease(tx, 'L1', T, 'one-more', 'v'), isCode('LEASE_KEYS_MAX'));
    assert.deepEqual(writes, []);
    // A key already attached is rewritten without growing the list.
    await putWithLease(tx, 'L1', T, 'k7', 'v');
    assert.deepEqual(writes, ['k7']);
  });
});
