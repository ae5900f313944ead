import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { after, describe, it } from 'node:test';
import { type NodeIdentity, nodeId, nodeName } from '../core/ids.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import type { TransportEvent } from '../env/transport.js';
import { probePeer } from './probe.js';
import { TcpTransport } from './tcp-transport.js';

const timers = new RealTimers();
const open: TcpTransport[] = [];
after(async () => {
  await Promise.all(open.map((t) => t.close()));
});

const identity = (name: string): NodeIdentity => ({ name: nodeName(name), id: nodeId(randomUUID()) });

async function transport(
  name: string,
  peers: Record<string, string> = {},
  members?: readonly string[],
): Promise<TcpTransport> {
  const t = await TcpTransport.start({
    self: identity(name),
    host: '127.0.0.1',
    port: 0,
    peers,
    ...(members !== undefined && { members: members.map(nodeName) }),
    timers,
    random: new RealRandom(),
  });
  open.push(t);
  return t;
}

describe('probePeer', () => {
  it('returns the name and ephemeral id the peer says hello with', async () => {
    const n2 = await transport('n2');
    const result = await probePeer({ self: identity('n1'), address: n2.address, timers });
    assert.deepEqual(result, { ok: true, peer: n2.self });
  });

  it('is accepted by a peer that runs with members (its hello has none), and returns those members', async () => {
    const n2 = await transport('n2', {}, ['n3', 'n2', 'n1']);
    const result = await probePeer({ self: identity('n9'), address: n2.address, timers });
    assert.deepEqual(result, { ok: true, peer: n2.self, members: ['n1', 'n2', 'n3'] });
  });

  it('reports a refused connection as a value', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    await new Promise((resolve) => server.close(resolve));
    const result = await probePeer({ self: identity('n1'), address: `127.0.0.1:${port}`, timers });
    assert.equal(result.ok, false);
    assert.match(result.ok ? '' : result.reason, /ECONNREFUSED/);
  });

  it('gives up after its timeout when the other end never says hello', async () => {
    const silent = createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    try {
      const result = await probePeer({ self: identity('n1'), address: `127.0.0.1:${port}`, timers, timeoutMs: 100 });
      assert.deepEqual(result, { ok: false, reason: 'no hello within 100 ms' });
    } finally {
      silent.close();
      // Closing the server does not end the accepted socket; the probe already destroyed its end.
    }
  });

  it("a probe with the node's transport identity leaves the peer's link to the node up; another id reads as a restart", async () => {
    // n1 has just started (no peers dialed yet); n2 already knows n1's address and is connected to it.
    const n1 = await transport('n1');
    const n1Events: TransportEvent[] = [];
    n1.setHandler((event) => n1Events.push(event));
    const n2 = await transport('n2', { n1: n1.address });
    const n2Events: TransportEvent[] = [];
    n2.setHandler((event) => n2Events.push(event));
    await until(() => n2Events.some((e) => e.kind === 'up'));

    assert.deepEqual(await probePeer({ self: n1.self, address: n2.address, timers }), { ok: true, peer: n2.self });
    n2.send(nodeName('n1'), { after: 'the probe' });
    await until(() => n1Events.some((e) => e.kind === 'message'));
    assert.deepEqual(
      n2Events.map((e) => e.kind),
      ['up'],
    );

    assert.ok((await probePeer({ self: identity('n1'), address: n2.address, timers })).ok);
    await until(() => n2Events.some((e) => e.kind === 'down'));
  });
});

async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    assert.ok(Date.now() < deadline, 'condition within the timeout');
    await new Promise((r) => setTimeout(r, 10));
  }
}
