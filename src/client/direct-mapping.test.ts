/**
 * Direct mapping (tx/core/direct.ts) against a real-time 3-node in-memory cluster with a client port on every node:
 * a transaction's single-key operations on partitions whose primary is on another node than its coordinator go
 * straight to that node, the commit and the rollback hand them to the coordinator, and what a transaction does there
 * is exactly what it would have done through the coordinator: committed, rolled back, locks released, retried after
 * a conflict, its own writes read back after a handoff.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { TxId } from '../core/ids.js';
import type { Clock } from '../env/clock.js';
import { RealTimers } from '../env/real-timers.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';
import { parseTxId } from '../tx/core/tx-id.js';
import { nodeClient } from './node-client.js';
import { connect, type RemoteClient } from './remote.js';
import { connectCluster, ROUTES_MAX_AGE_MS, type RoutingClient } from './routing.js';
import { ClientServer } from './server.js';

const T = 'direct';
const NODES = ['n1', 'n2', 'n3'];
const KEYS = Array.from({ length: 32 }, (_, i) => `key-${i}`);

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`timed out waiting until ${what}`);
}

describe('direct mapping over TCP (3 nodes, a client port on each)', () => {
  let cluster: Cluster<Client>;
  const servers: ClientServer[] = [];
  let nowMs = 0;
  let client: RoutingClient;
  /** The same cluster without write buffering: puts are sent at once, so they too go direct. */
  let unbuffered: RoutingClient;

  before(async () => {
    cluster = await startCluster({ nodes: 3 });
    for (const name of NODES) {
      const node = cluster.basaltNode(name);
      assert.ok(node !== undefined);
      servers.push(
        await ClientServer.start({ host: '127.0.0.1', port: 0, client: nodeClient(node), timers: new RealTimers() }),
      );
    }
    const clock = { monotonicMs: () => nowMs, nowMs: () => nowMs } satisfies Clock;
    const addresses = servers.map((s) => s.address);
    client = await connectCluster(addresses, { clock, directMapping: true });
    unbuffered = await connectCluster(addresses, { clock, directMapping: true, bufferWrites: false });
    await client.createTable(T, { partitions: 6, replicas: 3 });
    await until('every partition has a primary', async () => (await client.primaries(T)).every((p) => p !== null));
    for (const key of KEYS) await client.put(T, key, 100);
    nowMs += ROUTES_MAX_AGE_MS;
    for (const c of [client, unbuffered]) {
      c.routeOf(T, KEYS[0]!);
      await until('routes name every primary', () =>
        KEYS.every((key) => c.routeOf(T, key) === cluster.placement(T, key).primary),
      );
    }
  });

  after(async () => {
    await client?.close();
    await unbuffered?.close();
    for (const s of servers) await s.close();
    await cluster?.stop();
  });

  const directOps = (): number =>
    NODES.reduce((sum, n) => sum + (cluster.basaltNode(n)?.counters.get('coordinator.directOperations') ?? 0), 0);
  const handoffs = (): number =>
    NODES.reduce((sum, n) => sum + (cluster.basaltNode(n)?.counters.get('coordinator.directHandoffs') ?? 0), 0);

  /** Two keys whose primaries are on different nodes. */
  function apart(c: RoutingClient, skip = 0): [string, string] {
    const pairs: [string, string][] = [];
    for (const a of KEYS) {
      const b = KEYS.find((k) => c.routeOf(T, k) !== c.routeOf(T, a));
      if (b !== undefined) pairs.push([a, b]);
    }
    const pair = pairs[skip % pairs.length];
    assert.ok(pair !== undefined, 'some keys have their primaries on different nodes');
    return pair;
  }

  it("reads and writes a key away from the coordinator on its primary's node, and commits them there", async () => {
    const [home, away] = apart(unbuffered);
    const before = directOps();
    const adopted = handoffs();
    let id: TxId | undefined;
    await unbuffered.transaction(async (tx) => {
      const a = (await tx.get(T, home)) as number;
      id = tx.id;
      const b = (await tx.get(T, away, { forUpdate: true })) as number;
      await tx.put(T, away, b + 5);
      await tx.put(T, home, a - 5);
    });
    assert.equal(directOps(), before + 2, 'the read and the write of the key away went direct');
    assert.equal(handoffs(), adopted + 1, 'the commit handed them over');
    assert.ok(id !== undefined);
    const coordinator = unbuffered.routeOf(T, home);
    assert.equal(parseTxId(id).nodeId, cluster.node(coordinator).ephemeralId);
    assert.equal(cluster.node(coordinator).txState(id)?.state, 'COMMITTED');
    assert.equal(await client.get(T, away), 105);
    assert.equal(await client.get(T, home), 95);
    // The locks are gone: another transaction writes the key at once.
    await client.transaction((tx) => tx.put(T, away, 100), { timeoutMs: 2_000 });
    await client.transaction((tx) => tx.put(T, home, 100), { timeoutMs: 2_000 });
  });

  it('rolls back what went direct: nothing written, locks released', async () => {
    const [home, away] = apart(unbuffered, 1);
    const tx = await unbuffered.begin({ lazy: true });
    await tx.get(T, home);
    await tx.put(T, away, 'never');
    await tx.remove(T, home);
    await tx.rollback();
    assert.equal(await client.get(T, away), 100);
    assert.equal(await client.get(T, home), 100);
    await client.transaction((t) => t.put(T, away, 100), { timeoutMs: 2_000 });
  });

  it('sends no direct operation once the commit started (the coordinator would not know of it)', async () => {
    const [home, away] = apart(unbuffered, 4);
    const tx = await unbuffered.begin({ lazy: true });
    await tx.get(T, home);
    await tx.put(T, away, 'before the commit');
    const committing = tx.commit();
    await assert.rejects(tx.put(T, away, 'after the commit'), (e: unknown) => isBasaltError(e, 'TX_ALREADY_FINISHED'));
    await committing;
    assert.equal(await client.get(T, away), 'before the commit');
    await client.put(T, away, 100);
  });

  it("hands its direct partitions over before an operation through the coordinator, which reads the tx's own writes", async () => {
    const [home, away] = apart(unbuffered, 2);
    const before = handoffs();
    await unbuffered.transaction(async (tx) => {
      await tx.get(T, home);
      await tx.put(T, away, 'mine');
      // Through the coordinator: it reaches the partition served directly, so the handoff rides on it.
      assert.deepEqual(await tx.getAll(T, [home, away]), [100, 'mine']);
      await tx.put(T, away, 'mine again');
    });
    assert.ok(handoffs() >= before + 1);
    assert.equal(await client.get(T, away), 'mine again');
    await client.put(T, away, 100);
  });

  it('keeps the total under concurrent transfers that conflict and retry (wait-die on direct operations)', async () => {
    const accounts = KEYS.slice(0, 6);
    for (const key of accounts) await client.put(T, key, 100);
    const before = directOps();
    const transfer = async (c: RoutingClient, i: number) => {
      const from = accounts[i % accounts.length]!;
      const to = accounts[(i * 5 + 1) % accounts.length]!;
      if (from === to) return;
      await c.transaction(
        async (tx) => {
          const a = (await tx.get(T, from, { forUpdate: true })) as number;
          const b = (await tx.get(T, to, { forUpdate: true })) as number;
          await tx.put(T, from, a - 1);
          await tx.put(T, to, b + 1);
        },
        { retries: 50 },
      );
    };
    await Promise.all(
      Array.from({ length: 8 }, (_, w) =>
        (async () => {
          for (let i = 0; i < 6; i++) await transfer(w % 2 === 0 ? client : unbuffered, w * 7 + i);
        })(),
      ),
    );
    let total = 0;
    for (const key of accounts) total += (await client.get(T, key)) as number;
    assert.equal(total, 100 * accounts.length);
    assert.ok(directOps() > before, 'some operations went direct');
  });

  it('refuses malformed direct requests with coded errors, and a direct operation off its primary with PRIMARY_MISS', async () => {
    const [home, away] = apart(client, 3);
    const off = NODES.find((n) => n !== client.routeOf(T, away));
    assert.ok(off !== undefined);
    let single: RemoteClient | undefined;
    try {
      single = await connect(servers[NODES.indexOf(off)]!.address);
      const wire = (single as unknown as { wire: { call(r: unknown): Promise<unknown> } }).wire;
      const tx = await client.begin({ lazy: true });
      await tx.get(T, home);
      const coordinatorId = cluster.node(client.routeOf(T, home)).ephemeralId;
      const direct = { txId: tx.id, coordinatorId, commitPartitionId: 'p', opSeq: 1 };
      await assert.rejects(wire.call({ kind: 'get', table: T, key: away, direct, tx: 1 }), (e: unknown) =>
        isBasaltError(e, 'INVALID_ARGUMENT'),
      );
      await assert.rejects(
        wire.call({ kind: 'get', table: T, key: away, direct: { ...direct, opSeq: 0 } }),
        (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
      );
      await assert.rejects(
        wire.call({ kind: 'rollback', tx: 1, handoff: { enlisted: 'all', uncertain: [] } }),
        (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
      );
      await assert.rejects(wire.call({ kind: 'get', table: T, key: away, direct }), (e: unknown) =>
        isBasaltError(e, 'PRIMARY_MISS'),
      );
      await tx.rollback();
    } finally {
      await single?.close();
    }
  });
});
