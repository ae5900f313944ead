/**
 * The routing client against a real-time 3-node in-memory cluster with a client port on every node: implicit
 * single-key operations go to the node of the key's primary (as the home node knows it), everything else goes home,
 * a closed connection or an unknown route sends the call home, and routes are refreshed once old.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { Clock } from '../env/clock.js';
import { RealTimers } from '../env/real-timers.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';
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
