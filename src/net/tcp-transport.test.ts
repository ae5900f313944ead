import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { after, describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import { type NodeIdentity, type NodeName, nodeId, nodeName } from '../core/ids.js';
import type { Random } from '../env/random.js';
import { RealClock } from '../env/real-clock.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import type { TransportEvent } from '../env/transport.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import type { NetDiagnostic } from './diagnostics.js';
import { encodeFrame, FRAME_HEADER_BYTES } from './frame.js';
import { HANDSHAKE_MAGIC, hello, PROTOCOL_VERSION } from './handshake.js';
import { Messenger } from './messenger.js';
import { TcpTransport, type TcpTransportOptions } from './tcp-transport.js';

const HOST = '127.0.0.1';
const timers = new RealTimers();
const random = new RealRandom();
const open: TcpTransport[] = [];

after(async () => {
  await Promise.all(open.map((t) => t.close()));
});

interface Endpoint {
  readonly transport: TcpTransport;
  readonly events: TransportEvent[];
  readonly diagnostics: NetDiagnostic[];
}

const names = (...list: string[]): NodeName[] => list.map(nodeName);
const identity = (name: string): NodeIdentity => ({ name: nodeName(name), id: nodeId(randomUUID()) });

async function endpoint(
  name: string,
  peers: Record<string, string> = {},
  extra: Partial<TcpTransportOptions> = {},
): Promise<Endpoint> {
  const events: TransportEvent[] = [];
  const diagnostics: NetDiagnostic[] = [];
  const transport = await TcpTransport.start({
    self: identity(name),
    host: HOST,
    port: 0,
    peers,
    timers,
    random,
    reconnectBackoffMsMin: 10,
    reconnectBackoffMsMax: 40,
    onDiagnostic: (d) => diagnostics.push(d),
    ...extra,
  });
  transport.setHandler((event) => events.push(event));
  open.push(transport);
  return { transport, events, diagnostics };
}

async function waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const ups = (e: Endpoint, name: string): NodeIdentity[] =>
  e.events.flatMap((ev) => (ev.kind === 'up' && ev.peer.name === name ? [ev.peer] : []));
const downs = (e: Endpoint, name: string): NodeIdentity[] =>
  e.events.flatMap((ev) => (ev.kind === 'down' && ev.peer.name === name ? [ev.peer] : []));
const messages = (e: Endpoint, from?: string): unknown[] =>
  e.events.flatMap((ev) =>
    ev.kind === 'message' && (from === undefined || ev.from.name === from) ? [ev.payload] : [],
  );

/** Two endpoints that dial each other; resolves once both are up. */
async function pair(extra: Partial<TcpTransportOptions> = {}): Promise<[Endpoint, Endpoint]> {
  const b = await endpoint('b', {}, extra);
  const a = await endpoint('a', { b: b.transport.address }, extra);
  b.transport.addPeer(nodeName('a'), a.transport.address);
  await waitFor(() => ups(a, 'b').length === 1 && ups(b, 'a').length === 1, 'a and b up');
  return [a, b];
}

/** A raw socket that says hello (or anything) and then does whatever the test writes. */
async function rawClient(port: number, greeting: unknown): Promise<{ socket: Socket; closed: Promise<void> }> {
  const socket = connect({ host: HOST, port });
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('error', () => {});
  socket.resume(); // read (and ignore) what the endpoint sends, so that its close is seen
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  if (greeting !== undefined) socket.write(Buffer.concat(encodeFrame(greeting, 1 << 20)));
  return { socket, closed };
}

function lengthPrefix(length: number): Buffer {
  const header = Buffer.alloc(FRAME_HEADER_BYTES);
  header.writeUInt32BE(length, 0);
  return header;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, HOST, () => resolve()));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  assert.ok(typeof address === 'object' && address !== null);
  return address.port;
}

describe('TcpTransport', () => {
  it('delivers 10k messages in order while a malformed connection in the middle is closed alone', async () => {
    const [a, b] = await pair();
    const total = 10_000;
    const payload = (i: number) => ({ kind: 'Seq', i, ts: BigInt(i) << 16n, bytes: Buffer.alloc(16, i & 0xff) });
    for (let i = 0; i < total / 2; i++) a.transport.send(nodeName('b'), payload(i));

    // A third identity completes a valid hello, sends one good message, then garbage.
    const intruder = await rawClient(b.transport.port, hello(identity('intruder')));
    intruder.socket.write(Buffer.concat(encodeFrame({ kind: 'Hi' }, 1 << 20)));
    intruder.socket.write(Buffer.concat([lengthPrefix(3), Buffer.from([0xc1, 0xc1, 0xc1])]));
    // Another one announces a frame far above the limit.
    const giant = await rawClient(b.transport.port, hello(identity('giant')));
    giant.socket.write(lengthPrefix(0xffff_ffff));
    for (let i = total / 2; i < total; i++) a.transport.send(nodeName('b'), payload(i));
    await Promise.all([intruder.closed, giant.closed]);

    await waitFor(() => messages(b, 'a').length === total, '10k messages');
    const received = messages(b, 'a') as Array<{ i: number; ts: bigint; bytes: Buffer }>;
    assert.deepEqual(
      received.map((m) => m.i),
      Array.from({ length: total }, (_, i) => i),
    );
    assert.equal(received[1234]!.ts, 1234n << 16n);
    assert.deepEqual(Array.from(received[300]!.bytes), Array.from(Buffer.alloc(16, 300 & 0xff)));
    assert.deepEqual(messages(b, 'intruder'), [{ kind: 'Hi' }]);
    assert.ok(b.diagnostics.some((d) => d.kind === 'malformed-frame' && d.peer === 'intruder'));
    assert.ok(b.diagnostics.some((d) => d.kind === 'frame-too-large' && d.peer === 'giant'));
    assert.deepEqual(downs(a, 'b'), []);
    assert.deepEqual(downs(b, 'a'), []);

    // Both endpoints keep working, in both directions.
    a.transport.send(nodeName('b'), { kind: 'After' });
    b.transport.send(nodeName('a'), { kind: 'Back' });
    await waitFor(() => messages(b, 'a').length === total + 1 && messages(a, 'b').length === 1, 'traffic after');
  });

  it('carries a request/response round trip through two messengers', async () => {
    const [a, b] = await pair();
    type Body = { readonly kind: 'Add'; readonly x: bigint } | { readonly kind: 'Sum'; readonly x: bigint };
    const ma = new Messenger<Body>({ transport: a.transport, clock: new HybridClock(new RealClock()), timers });
    const mb = new Messenger<Body>({ transport: b.transport, clock: new HybridClock(new RealClock()), timers });
    mb.handle('Add', (body) => ({ kind: 'Sum', x: body.x + 1n }));
    ma.handle('Add', (body) => ({ kind: 'Sum', x: body.x + 2n }));
    assert.deepEqual(await ma.request(nodeName('b'), { kind: 'Add', x: 1n << 70n }), {
      kind: 'Sum',
      x: (1n << 70n) + 1n,
    });
    assert.deepEqual(await mb.request(nodeName('a'), { kind: 'Add', x: 5n }), { kind: 'Sum', x: 7n });
    const error = await ma.request(nodeName('b'), { kind: 'Sum', x: 0n }).catch((e: unknown) => e);
    assert.ok(isBasaltError(error, 'UNKNOWN_MESSAGE'));
  });

  it('reconnects to a restarted peer and reports it up with its new id, delivering what was queued', async () => {
    const [a, b] = await pair();
    const oldId = b.transport.self.id;
    const port = b.transport.port;
    await b.transport.close();
    await waitFor(() => downs(a, 'b').length === 1, 'down');
    assert.equal(downs(a, 'b')[0]!.id, oldId);
    for (let i = 0; i < 5; i++) a.transport.send(nodeName('b'), { kind: 'Queued', i });

    const b2 = await endpoint('b', { a: a.transport.address }, { port });
    await waitFor(() => ups(a, 'b').length === 2, 'up again');
    const newId = ups(a, 'b')[1]!.id;
    assert.notEqual(newId, oldId);
    assert.equal(newId, b2.transport.self.id);
    await waitFor(() => messages(b2, 'a').length === 5, 'queued messages');
    assert.deepEqual(
      messages(b2, 'a').map((m) => (m as { i: number }).i),
      [0, 1, 2, 3, 4],
    );
    assert.deepEqual(
      a.transport.livePeers().map((p) => p.id),
      [newId],
    );
  });

  it('treats an inbound hello with a new id for a known peer as a restart: the stale outbound link goes down', async () => {
    const [a, b] = await pair();
    const oldId = b.transport.self.id;
    const impostor = await rawClient(a.transport.port, hello({ name: nodeName('b'), id: nodeId('b-restarted') }));
    await waitFor(() => downs(a, 'b').length === 1, 'down of the stale link');
    assert.equal(downs(a, 'b')[0]!.id, oldId);
    // The real b still answers at its address, so a reconnects to it.
    await waitFor(() => ups(a, 'b').length === 2, 'reconnected');
    assert.equal(ups(a, 'b')[1]!.id, oldId);
    impostor.socket.destroy();
  });

  it('drops an inbound connection that does not say hello in time', async () => {
    const a = await endpoint('a', {}, { handshakeTimeoutMs: 100 });
    const silent = await rawClient(a.transport.port, undefined);
    const startedMs = Date.now();
    await silent.closed;
    assert.ok(Date.now() - startedMs >= 80, 'not closed before the timeout');
    assert.ok(a.diagnostics.some((d) => d.kind === 'handshake-failed' && /no hello/.test(d.message)));
  });

  it('gives up on a dialed peer that never says hello, and keeps retrying', async () => {
    const accepted: Socket[] = [];
    const mute: Server = createServer((socket) => {
      socket.on('error', () => {});
      accepted.push(socket);
    });
    await new Promise<void>((resolve) => mute.listen(0, HOST, () => resolve()));
    const address = mute.address();
    assert.ok(typeof address === 'object' && address !== null);
    const a = await endpoint('a', { b: `${HOST}:${address.port}` }, { handshakeTimeoutMs: 50 });
    await waitFor(() => accepted.length >= 2, 'a second attempt');
    assert.ok(a.diagnostics.some((d) => d.kind === 'handshake-failed'));
    assert.deepEqual(ups(a, 'b'), []);
    await a.transport.close();
    for (const s of accepted) s.destroy();
    await new Promise<void>((resolve) => mute.close(() => resolve()));
  });

  it('refuses bad hellos: wrong magic, wrong version, own name, unexpected peer', async () => {
    const a = await endpoint('a');
    const bad = [
      { magic: 'nope', protocolVersion: PROTOCOL_VERSION, name: 'x', id: 'y' },
      { magic: HANDSHAKE_MAGIC, protocolVersion: PROTOCOL_VERSION + 1, name: 'x', id: 'y' },
      { magic: HANDSHAKE_MAGIC, protocolVersion: PROTOCOL_VERSION, name: 'a', id: 'y' },
      [1, 2, 3],
    ];
    for (const greeting of bad) await (await rawClient(a.transport.port, greeting)).closed;
    assert.equal(a.diagnostics.filter((d) => d.kind === 'handshake-failed').length, bad.length);

    // c is dialed at the address it was given for "b": the hello names c, so the connection is refused.
    const c = await endpoint('c');
    const d = await endpoint('d', { b: c.transport.address });
    await waitFor(
      () => d.diagnostics.some((x) => x.kind === 'handshake-failed' && /expected b/.test(x.message)),
      'refusal',
    );
    assert.deepEqual(ups(d, 'b'), []);
  });

  it('closes a connection whose frame exceeds the limit and refuses to send one', async () => {
    const [a, b] = await pair({ frameBytesMax: 1024 });
    const raw = await rawClient(b.transport.port, hello(identity('big')));
    raw.socket.write(Buffer.concat([lengthPrefix(1025), Buffer.alloc(1025)]));
    await raw.closed;
    assert.ok(b.diagnostics.some((d) => d.kind === 'frame-too-large' && d.code === 'FRAME_TOO_LARGE'));
    assert.throws(
      () => a.transport.send(nodeName('b'), { kind: 'Big', bytes: Buffer.alloc(2000) }),
      (e: unknown) => isBasaltError(e, 'FRAME_TOO_LARGE'),
    );
    a.transport.send(nodeName('b'), { kind: 'Small' });
    await waitFor(() => messages(b, 'a').length === 1, 'the small message');
  });

  it('bounds the queue of a peer that is down, dropping the oldest payloads', async () => {
    const port = await freePort();
    const a = await endpoint('a', { b: `${HOST}:${port}` }, { peerSendQueueMax: 10 });
    for (let i = 0; i < 25; i++) a.transport.send(nodeName('b'), { kind: 'Q', i });
    assert.ok(a.diagnostics.some((d) => d.kind === 'payload-dropped' && d.code === 'OVERLOADED'));
    const b = await endpoint('b', {}, { port });
    await waitFor(() => messages(b, 'a').length === 10, 'the 10 newest');
    assert.deepEqual(
      messages(b, 'a').map((m) => (m as { i: number }).i),
      Array.from({ length: 10 }, (_, k) => 15 + k),
    );
  });

  it('drops the connection of a peer that does not drain its socket', async () => {
    const stuck: Socket[] = [];
    const reader: Server = createServer((socket) => {
      socket.on('error', () => {});
      socket.write(Buffer.concat(encodeFrame(hello(identity('b')), 1 << 20)));
      socket.pause(); // never reads what a sends
      stuck.push(socket);
    });
    await new Promise<void>((resolve) => reader.listen(0, HOST, () => resolve()));
    const address = reader.address();
    assert.ok(typeof address === 'object' && address !== null);
    const a = await endpoint('a', { b: `${HOST}:${address.port}` }, { peerWriteBufferBytesMax: 64 * 1024 });
    await waitFor(() => ups(a, 'b').length === 1, 'up');
    for (let i = 0; i < 1000; i++) a.transport.send(nodeName('b'), { kind: 'Blob', bytes: Buffer.alloc(10_000) });
    await waitFor(() => downs(a, 'b').length >= 1, 'down');
    assert.ok(a.diagnostics.some((d) => d.kind === 'connection-error' && /does not drain/.test(d.message)));
    await a.transport.close();
    for (const s of stuck) s.destroy();
    await new Promise<void>((resolve) => reader.close(() => resolve()));
  });

  it('reports down when a peer is removed, and drops sends to unknown peers', async () => {
    const [a] = await pair();
    a.transport.removePeer(nodeName('b'));
    assert.equal(downs(a, 'b').length, 1);
    a.transport.send(nodeName('b') as NodeName, { kind: 'Lost' });
    assert.ok(a.diagnostics.some((d) => d.kind === 'payload-dropped' && /no address/.test(d.message)));
  });

  it('refuses a peer with another member set on both sides, reports it once per peer while retrying, and connects once they agree', async () => {
    let redials = 0;
    const counting: Random = {
      next: () => {
        redials++;
        return random.next();
      },
      int: (n) => random.int(n),
      uuid: () => random.uuid(),
      fork: (label) => random.fork(label),
    };
    const b = await endpoint('b', {}, { members: names('a', 'b') });
    const a = await endpoint('a', { b: b.transport.address }, { members: names('c', 'b', 'a'), random: counting });
    b.transport.addPeer(nodeName('a'), a.transport.address);
    await waitFor(() => redials >= 5, 'a to redial b several times');
    const refusals = (e: Endpoint) => e.diagnostics.filter((d) => d.kind === 'member-mismatch');
    assert.deepEqual(refusals(a), [
      {
        kind: 'member-mismatch',
        message: `member sets differ: this node has a,b,c, peer b at ${b.transport.address} has a,b`,
        peer: 'b',
        code: 'HANDSHAKE_FAILED',
      },
    ]);
    assert.equal(refusals(b).length, 1, 'the other end refused too, and reported it once');
    assert.match(
      refusals(b)[0]!.message,
      /^member sets differ: this node has a,b, peer a (at|from) 127\.0\.0\.1\S* has a,b,c$/,
    );
    assert.deepEqual([...ups(a, 'b'), ...ups(b, 'a')], [], 'no up on either side');
    assert.deepEqual(messages(b), []);

    b.transport.setMembers(names('a', 'b', 'c'));
    // A hello b sent before the change may still be refused by a (and that link go down again), hence "live now".
    const live = (e: Endpoint, name: string) => e.transport.livePeers().some((p) => p.name === name);
    await waitFor(() => live(a, 'b') && live(b, 'a'), 'a and b up once they agree');
    assert.equal(refusals(a).length, 1);
  });

  it('connects two transports with equal member sets, and accepts a hello without members', async () => {
    const [a, b] = await pair({ members: names('b', 'a') });
    a.transport.send(nodeName('b'), { kind: 'Ping' });
    await waitFor(() => messages(b, 'a').length === 1, 'ping');
    const plain = await endpoint('c', { a: a.transport.address });
    await waitFor(() => ups(plain, 'a').length === 1, 'a transport without members is accepted');
    assert.equal([...a.diagnostics, ...b.diagnostics].filter((d) => d.kind === 'member-mismatch').length, 0);
  });

  it('setMembers refuses an open connection whose peer listed other members; a joined node carries the founders', async () => {
    const x = await endpoint('x');
    const y = await endpoint('y', { x: x.transport.address }, { members: names('x', 'y') });
    await waitFor(() => ups(y, 'x').length === 1, 'y up to x, which has no members yet');
    x.transport.setMembers(names('x', 'y', 'z'));
    await waitFor(() => downs(y, 'x').length === 1, 'y down');
    const refusal = x.diagnostics.find((d) => d.kind === 'member-mismatch');
    assert.equal(refusal?.message, 'member sets differ: this node has x,y,z, peer y from 127.0.0.1 has x,y');
    await waitFor(() => y.diagnostics.some((d) => d.kind === 'member-mismatch'), 'y refuses x on its redial');
    // A node that joined after the cluster was founded (x here) carries the founders' names, not its own.
    assert.doesNotThrow(() => x.transport.setMembers(names('y', 'z')));
    assert.throws(
      () => x.transport.setMembers([]),
      (e) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });
});
