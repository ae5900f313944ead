/**
 * The routing client against a real-time 3-node in-memory cluster with a client port on every node: implicit
 * single-key operations go to the node of the key's primary (as the home node knows it), everything else goes home,
 * a closed connection or an unknown route sends the call home, and routes are refreshed once old.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import { RealTimers } from '../env/real-timers.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';
import { parseTxId } from '../tx/core/tx-id.js';
import { nodeClient } from './node-client.js';
import { connectCluster, ROUTES_MAX_AGE_MS, type RoutingClient } from './routing.js';
import { ClientServer } from './server.js';

const T = 'routed';
const NODES = ['n1', 'n2', 'n3'];

/** Keys enough to land in every partition of a small table. */
const KEYS = Array.from({ length: 24 }, (_, i) => `key-${i}`);

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`timed out waiting until ${what}`);
}

describe('routing client over TCP (3 nodes, a client port on each)', () => {
  let cluster: Cluster<Client>;
  const servers: ClientServer[] = [];
  let nowMs = 0;
  let client: RoutingClient;

  before(async () => {
    cluster = await startCluster({ nodes: 3 });
    for (const name of NODES) {
      const node = cluster.basaltNode(name);
      assert.ok(node !== undefined);
      servers.push(
        await ClientServer.start({ host: '127.0.0.1', port: 0, client: nodeClient(node), timers: new RealTimers() }),
      );
    }
    client = await connectCluster(
      servers.map((s) => s.address),
      { clock: { monotonicMs: () => nowMs, nowMs: () => nowMs } satisfies Clock },
    );
    await client.createTable(T, { partitions: 4, replicas: 3 });
  });

  after(async () => {
    await client?.close();
    for (const s of servers) await s.close();
    await cluster?.stop();
  });

  it('connects to every node, home first, and answers each partition primary', async () => {
    assert.deepEqual(client.nodes, NODES);
    assert.equal(client.node, 'n1');
    await until('every partition has a primary', async () => (await client.primaries(T)).every((p) => p !== null));
    assert.equal((await client.primaries(T)).length, 4);
  });

  it("sends an implicit single-key operation to the node of its key's primary, and a transaction home", async () => {
    for (const key of KEYS) await client.put(T, key, { v: key });
    nowMs += ROUTES_MAX_AGE_MS;
    client.routeOf(T, KEYS[0]!);
    await until('routes name every primary', () =>
      KEYS.every((key) => client.routeOf(T, key) === cluster.placement(T, key).primary),
    );
    const routedTo = new Set(KEYS.map((key) => client.routeOf(T, key)));
    assert.ok(routedTo.size > 1, `the keys' primaries are on one node only: ${[...routedTo].join(', ')}`);
    for (const key of KEYS) assert.deepEqual(await client.get(T, key), { v: key });
    await client.remove(T, KEYS[0]!);
    assert.equal(await client.get(T, KEYS[0]!), undefined);
    const read = await client.transaction(async (tx) => tx.get(T, KEYS[1]!));
    assert.deepEqual(read, { v: KEYS[1] });
  });

  /** Requests of `kind` all three servers received so far. */
  const served = (kind: string): number =>
    servers.reduce((sum, s) => sum + ((s.requestsByKind() as ReadonlyMap<string, number>).get(kind) ?? 0), 0);

  it("begins a lazy transaction with its first read, on the node of its first key's primary, which coordinates it", async () => {
    await until('routes name every primary', () =>
      KEYS.every((key) => client.routeOf(T, key) === cluster.placement(T, key).primary),
    );
    const away = KEYS.find((key) => client.routeOf(T, key) !== 'n1');
    assert.ok(away !== undefined, 'some key routes away from home');
    const owner = client.routeOf(T, away);
    const other = KEYS.find((key) => key !== away);
    assert.ok(other !== undefined);
    const begins = served('begin');
    const piggybacked = served('beginPiggybacked');
    let id: TxId | undefined;
    const read = await client.transaction(async (tx) => {
      const values = await tx.getAll(T, [away, other], { forUpdate: true });
      id = tx.id;
      await tx.putAll(T, [
        { key: away, value: { v: 'lazy' } },
        { key: other, value: { v: 'lazy' } },
      ]);
      return values;
    });
    assert.equal(read.length, 2);
    assert.equal(served('begin'), begins, 'no begin request of its own');
    assert.equal(served('beginPiggybacked'), piggybacked + 1, 'the begin rode on the getAll');
    assert.ok(id !== undefined);
    assert.equal(parseTxId(id).nodeId, cluster.node(owner).ephemeralId, `coordinated on ${owner}`);
    assert.equal(cluster.node(owner).txState(id)?.state, 'COMMITTED');
    assert.deepEqual(await client.get(T, away), { v: 'lazy' });
    assert.deepEqual(await client.get(T, other), { v: 'lazy' });
  });

  it('commits a lazy write-only transaction in one request, and begins none for one that did nothing', async () => {
    const commits = served('commit');
    const begins = served('begin');
    const piggybacked = served('beginPiggybacked');
    await client.transaction(async (tx) => {
      await tx.put(T, KEYS[2]!, { v: 'one request' });
      await tx.remove(T, KEYS[3]!);
    });
    assert.equal(served('commit'), commits + 1);
    assert.equal(served('beginPiggybacked'), piggybacked + 1);
    assert.deepEqual(await client.get(T, KEYS[2]!), { v: 'one request' });
    assert.equal(await client.get(T, KEYS[3]!), undefined);
    // Nothing read, nothing written: the transaction never begins, and its commit sends nothing.
    const requests = served('commit') + served('beginPiggybacked') + served('rollback');
    assert.equal(await client.transaction(async () => 'nothing'), 'nothing');
    const tx = await client.begin({ lazy: true });
    await tx.rollback();
    assert.equal(served('commit') + served('beginPiggybacked') + served('rollback'), requests);
    assert.equal(served('begin'), begins);
  });

  it('a lazy first read that fails leaves its transaction begun and usable; concurrent first reads begin it once', async () => {
    const tx = await client.begin({ lazy: true });
    // A key above the size limit: refused by the coordinator once the begin riding on the read has begun the tx.
    const tooLong = 'k'.repeat(LIMITS.keyBytesMax + 1);
    await assert.rejects(tx.get(T, tooLong), (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'));
    const id = tx.id;
    assert.equal(tx.id, id, 'begun by the failed read');
    assert.deepEqual(await tx.get(T, KEYS[2]!), { v: 'one request' });
    await tx.put(T, KEYS[4]!, { v: 'after a failed read' });
    await tx.commit();
    assert.deepEqual(await client.get(T, KEYS[4]!), { v: 'after a failed read' });

    const piggybacked = served('beginPiggybacked');
    const both = await client.begin({ lazy: true });
    const [a, b] = await Promise.all([both.get(T, KEYS[2]!), both.get(T, KEYS[4]!, { forUpdate: true })]);
    assert.deepEqual([a, b], [{ v: 'one request' }, { v: 'after a failed read' }]);
    assert.equal(served('beginPiggybacked'), piggybacked + 1, 'one begin for the two first reads');
    await both.rollback();
    // The lock of the rolled back transaction is gone: another transaction writes the row at once.
    await client.transaction((t) => t.put(T, KEYS[4]!, { v: 'free' }), { timeoutMs: 2_000 });
    assert.deepEqual(await client.get(T, KEYS[4]!), { v: 'free' });
  });

  it('sends home what it cannot route: an unknown table (its coded error), a key whose node is closed', async () => {
    await assert.rejects(client.put('no-such-table', 'k', 1), (e: unknown) => isBasaltError(e, 'UNKNOWN_TABLE'));
    assert.equal(client.routeOf('no-such-table', 'k'), 'n1');
    const away = KEYS.find((key) => client.routeOf(T, key) !== 'n1');
    assert.ok(away !== undefined, 'some key routes away from home');
    const owner = client.routeOf(T, away);
    const ownerServer = servers[NODES.indexOf(owner)]!;
    await ownerServer.close();
    await until(`the connection to ${owner} ends`, async () => {
      await client.get(T, away).catch(() => undefined);
      return client.routeOf(T, away) === 'n1';
    });
    await client.put(T, away, { v: 'after' });
    assert.deepEqual(await client.get(T, away), { v: 'after' });
  });
});
