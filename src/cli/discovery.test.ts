import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { type NodeIdentity, nodeId, nodeName } from '../core/ids.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import { TcpTransport } from '../net/tcp-transport.js';
import { discoverPeers, peerList } from './discovery.js';
import { freePort } from './free-ports.js';

const timers = new RealTimers();
const open: TcpTransport[] = [];
after(async () => {
  await Promise.all(open.map((t) => t.close()));
});

const identity = (name: string): NodeIdentity => ({ name: nodeName(name), id: nodeId(randomUUID()) });

async function node(name: string, port = 0, members?: readonly string[]): Promise<TcpTransport> {
  const t = await TcpTransport.start({
    self: identity(name),
    host: '127.0.0.1',
    port,
    ...(members !== undefined && { members: members.map(nodeName) }),
    timers,
    random: new RealRandom(),
  });
  t.setHandler(() => {});
  open.push(t);
  return t;
}

const discover = (self: string, peers: string, timeoutMs = 5_000) =>
  discoverPeers({ self: identity(self), peers: peerList(peers), timers, timeoutMs });

describe('peerList', () => {
  it('accepts name=host:port and bare host:port entries', () => {
    assert.deepEqual(peerList('n2=127.0.0.1:7002,10.0.0.3:7003,[::1]:7004'), [
      { name: 'n2', address: '127.0.0.1:7002' },
      { address: '10.0.0.3:7003' },
      { address: '[::1]:7004' },
    ]);
    assert.deepEqual(peerList(''), []);
  });

  it('refuses an entry that is not an address', () => {
    assert.throws(() => peerList('n2=localhost'), /not a host:port or name=host:port peer: n2=localhost/);
    assert.throws(() => peerList('=127.0.0.1:1'), /no name before '='/);
  });
});

describe('discoverPeers', () => {
  it('learns the names of bare addresses, one of which starts listening only later', async () => {
    const n2 = await node('n2');
    const latePort = await freePort();
    const waited: string[][] = [];
    const found = discoverPeers({
      self: identity('n1'),
      peers: peerList(`${n2.address},127.0.0.1:${latePort},n4=127.0.0.1:1`),
      timers,
      timeoutMs: 5_000,
      onWaiting: (waiting) => waited.push([...waiting.keys()]),
    });
    await new Promise((r) => setTimeout(r, 300));
    await node('n3', latePort);
    assert.deepEqual(
      await found,
      new Map([
        ['n4', '127.0.0.1:1'],
        ['n2', n2.address],
        ['n3', `127.0.0.1:${latePort}`],
      ]),
    );
    assert.ok(waited.length > 0, 'the unanswered peer was reported while waiting');
    assert.ok(waited.every((w) => w.length === 1 && w[0] === `127.0.0.1:${latePort}`));
  });

  it('refuses a peer that answers with this node name, or two peers with one name', async () => {
    const a = await node('n1');
    const b = await node('n2');
    const c = await node('n2');
    const refused = (error: unknown, pattern: RegExp): boolean =>
      isBasaltError(error, 'INVALID_ARGUMENT') && pattern.test(error.message);
    await assert.rejects(discover('n1', a.address), (e) => refused(e, /says it is n1, this node's own name/));
    await assert.rejects(discover('n1', `${b.address},${c.address}`), (e) =>
      refused(e, new RegExp(`peers at ${b.address} and ${c.address} both say they are n2`)),
    );
    await assert.rejects(discover('n1', `n2=127.0.0.1:1,${c.address}`), (e) =>
      refused(e, new RegExp(`names n2 at 127.0.0.1:1, and the peer at ${c.address} says it is n2 too`)),
    );
    await assert.rejects(discover('n1', 'n1=127.0.0.1:1'), (e) => refused(e, /this node's own name/));
    await assert.rejects(discover('n1', `n2=${b.address},${b.address}`), (e) => refused(e, /listed twice/));
  });

  it('fails fast when a running peer lists other members than this node would use, and passes when they agree', async () => {
    const n1 = await node('n1', 0, ['n1', 'n2', 'n3']);
    await assert.rejects(
      discover('n2', n1.address),
      (e) =>
        isBasaltError(e, 'INVALID_ARGUMENT') &&
        e.message.endsWith(
          `member sets differ: this node would run with n1,n2, the running peer n1 at ${n1.address} has n1,n2,n3 ` +
            '(start every node with the same members)',
        ),
    );
    const n3 = await node('n3');
    assert.deepEqual(
      await discover('n2', `${n1.address},${n3.address}`),
      new Map([
        ['n1', n1.address],
        ['n3', n3.address],
      ]),
    );
  });

  it('gives up after the startup timeout, naming the peers it still waits for', async () => {
    const port = await freePort();
    await assert.rejects(
      discover('n1', `127.0.0.1:${port}`, 300),
      (e) => isBasaltError(e, 'TIMEOUT') && e.message.includes(`from peers 127.0.0.1:${port} (connect ECONNREFUSED`),
    );
  });

  it('stops waiting when aborted', async () => {
    const controller = new AbortController();
    const found = discoverPeers({
      self: identity('n1'),
      peers: peerList(`127.0.0.1:${await freePort()}`),
      timers,
      timeoutMs: 60_000,
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 200);
    assert.equal(await found, undefined);
  });
});
