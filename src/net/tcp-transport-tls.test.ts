import assert from 'node:assert/strict';
import { randomUUID, X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { CERT_FILES, createCa, createNodeCert } from '../cli/certs.js';
import { type NodeIdentity, nodeId, nodeName } from '../core/ids.js';
import { RealRandom } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import type { TransportEvent } from '../env/transport.js';
import type { NetDiagnostic } from './diagnostics.js';
import { dnsNames, PeerSockets, type PeerTlsMaterial } from './peer-tls.js';
import { probePeer } from './probe.js';
import { TcpTransport } from './tcp-transport.js';

const HOST = '127.0.0.1';
const timers = new RealTimers();
const random = new RealRandom();
const open: TcpTransport[] = [];
const root = mkdtempSync(join(tmpdir(), 'basalt-peer-tls-'));

after(async () => {
  await Promise.all(open.map((t) => t.close()));
  rmSync(root, { recursive: true, force: true });
});

/** Node certificates of the cluster CA by name, and one of another CA. */
const cluster = new Map<string, PeerTlsMaterial>();
let foreign: PeerTlsMaterial;

async function material(certsDir: string, name: string): Promise<PeerTlsMaterial> {
  await createNodeCert(name, { certsDir, overwrite: true });
  const read = (file: string) => readFileSync(join(certsDir, file), 'utf8');
  return { ca: read(CERT_FILES.caCert), cert: read(CERT_FILES.nodeCert), key: read(CERT_FILES.nodeKey) };
}

before(async () => {
  const clusterDir = join(root, 'cluster');
  await createCa({ certsDir: clusterDir });
  for (const name of ['n1', 'n2', 'n3', 'n4']) cluster.set(name, await material(clusterDir, name));
  const otherDir = join(root, 'other');
  await createCa({ certsDir: otherDir });
  foreign = await material(otherDir, 'n2');
});

interface Endpoint {
  readonly transport: TcpTransport;
  readonly events: TransportEvent[];
  readonly diagnostics: NetDiagnostic[];
}

const identity = (name: string): NodeIdentity => ({ name: nodeName(name), id: nodeId(randomUUID()) });

async function endpoint(
  name: string,
  tls: PeerTlsMaterial | undefined,
  peers: Record<string, string> = {},
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
    ...(tls !== undefined && { tls }),
    reconnectBackoffMsMin: 10,
    reconnectBackoffMsMax: 40,
    onDiagnostic: (d) => diagnostics.push(d),
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

/** Long enough for many redials at the test's backoff (at most 40 ms). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 600));

const upsOf = (e: Endpoint, name: string) => e.events.filter((ev) => ev.kind === 'up' && ev.peer.name === name);
const messagesFrom = (e: Endpoint, name: string) =>
  e.events.flatMap((ev) => (ev.kind === 'message' && ev.from.name === name ? [ev.payload] : []));
const diagnosticsOf = (e: Endpoint, kind: NetDiagnostic['kind']) => e.diagnostics.filter((d) => d.kind === kind);

describe('the names a certificate gives its holder', () => {
  it('are its DNS SANs, a quoted one whole, so that a crafted SAN cannot read as another name', () => {
    assert.deepEqual(dnsNames('DNS:n1, IP Address:127.0.0.1, DNS:db.example'), ['n1', 'db.example']);
    // node:tls quotes a value holding ", ": it stays one name, not "a" and "DNS:n2".
    assert.deepEqual(dnsNames('DNS:"a, DNS:n2", DNS:n3'), ['a, DNS:n2', 'n3']);
    assert.deepEqual(dnsNames(undefined), []);
  });
});

describe('TcpTransport over mutual TLS', () => {
  it('two nodes with certificates of the same CA come up and exchange messages both ways', async () => {
    const n2 = await endpoint('n2', cluster.get('n2'));
    const n1 = await endpoint('n1', cluster.get('n1'), { n2: n2.transport.address });
    n2.transport.addPeer(nodeName('n1'), n1.transport.address);
    await waitFor(() => upsOf(n1, 'n2').length === 1 && upsOf(n2, 'n1').length === 1, 'n1 and n2 up');
    for (let i = 0; i < 100; i++) n1.transport.send(nodeName('n2'), { kind: 'Seq', i, ts: BigInt(i) });
    n2.transport.send(nodeName('n1'), { kind: 'Back' });
    await waitFor(() => messagesFrom(n2, 'n1').length === 100 && messagesFrom(n1, 'n2').length === 1, 'messages');
    assert.deepEqual(
      messagesFrom(n2, 'n1').map((m) => (m as { i: number }).i),
      Array.from({ length: 100 }, (_, i) => i),
    );
    assert.deepEqual(n1.diagnostics, []);
    assert.deepEqual(n2.diagnostics, []);
  });

  it('refuses a node whose certificate is of another CA, in both directions, and logs it once', async () => {
    const n1 = await endpoint('n1', cluster.get('n1'));
    const impostor = await endpoint('n2', foreign, { n1: n1.transport.address });
    n1.transport.addPeer(nodeName('n2'), impostor.transport.address);
    await settle();
    assert.deepEqual(upsOf(n1, 'n2'), [], 'n1 never sees n2 up');
    assert.deepEqual(upsOf(impostor, 'n1'), []);
    assert.deepEqual(messagesFrom(n1, 'n2'), []);
    const refused = diagnosticsOf(n1, 'tls-refused');
    assert.equal(refused.length, 1, 'the refused inbound handshakes are reported once');
    // n1's own dials fail on n2's certificate, before any hello.
    assert.ok(diagnosticsOf(n1, 'connection-error').some((d) => /certificate/i.test(d.message)));
  });

  it('refuses a node whose certificate names n4 while its hello claims n2, in both directions', async () => {
    const n1 = await endpoint('n1', cluster.get('n1'));
    const impostor = await endpoint('n2', cluster.get('n4'), { n1: n1.transport.address });
    n1.transport.addPeer(nodeName('n2'), impostor.transport.address);
    impostor.transport.send(nodeName('n1'), { kind: 'Forged' });
    await settle();
    assert.deepEqual(upsOf(n1, 'n2'), [], 'n1 refuses the hello on its own dials');
    // The impostor may see n1's hello before n1 refused its own: what counts is that n1 takes nothing from it.
    assert.deepEqual(messagesFrom(n1, 'n2'), [], 'and on the connections the impostor dials');
    const mismatches = diagnosticsOf(n1, 'peer-cert-mismatch');
    assert.equal(mismatches.length, 1, 'reported once, not on every redial');
    assert.equal(mismatches[0]!.code, 'PEER_CERT_MISMATCH');
    assert.equal(mismatches[0]!.peer, 'n2');
    assert.match(mismatches[0]!.message, /says it is n2 but its certificate names n4/);
  });

  it('a plain TCP node and a TLS node do not connect', async () => {
    const secure = await endpoint('n1', cluster.get('n1'));
    const plain = await endpoint('n3', undefined, { n1: secure.transport.address });
    secure.transport.addPeer(nodeName('n3'), plain.transport.address);
    await settle();
    assert.deepEqual(upsOf(secure, 'n3'), []);
    assert.deepEqual(upsOf(plain, 'n1'), []);
  });

  it('a probe over TLS learns the name of a peer whose certificate names it, and fails on an impostor', async () => {
    const n3 = await endpoint('n3', cluster.get('n3'));
    const probe = (tls: PeerTlsMaterial | undefined, address: string) =>
      probePeer({ self: identity('n1'), address, timers, timeoutMs: 2_000, ...(tls !== undefined && { tls }) });
    const answer = await probe(cluster.get('n1'), n3.transport.address);
    assert.ok(answer.ok, answer.ok ? '' : answer.reason);
    assert.equal(answer.peer.name, 'n3');
    const impostor = await endpoint('n3', cluster.get('n4'));
    const refused = await probe(cluster.get('n1'), impostor.transport.address);
    assert.equal(refused.ok, false);
    assert.match(refused.ok ? '' : refused.reason, /says it is n3 but its certificate names n4/);
    assert.equal((await probe(foreign, n3.transport.address)).ok, false, 'a probe of another CA is refused');
  });
});

describe('peer certificates rotated without a restart', () => {
  it('new connections present the renewed certificate; a connection already open keeps working', async () => {
    const dir = join(root, 'rotation');
    await createCa({ certsDir: dir });
    const first = await material(dir, 'r1');
    const server = new PeerSockets(first, 5_000);
    const accepted: Socket[] = [];
    const listening = server.listen(
      (socket) => accepted.push(socket),
      () => {},
      16,
    );
    await new Promise<void>((resolve) => listening.listen(0, '127.0.0.1', resolve));
    const port = (listening.address() as { port: number }).port;
    const client = new PeerSockets(await material(dir, 'r2'), 5_000);
    const serialOfDial = async (): Promise<{ serial: string; socket: TLSSocket }> => {
      const socket = client.dial('127.0.0.1', port) as TLSSocket;
      await new Promise<void>((resolve, reject) => {
        socket.once('secureConnect', resolve);
        socket.once('error', reject);
      });
      return { serial: socket.getPeerCertificate().serialNumber, socket };
    };
    try {
      const before = await serialOfDial();
      assert.equal(before.serial.toLowerCase(), new X509Certificate(first.cert).serialNumber.toLowerCase());
      const renewed = await material(dir, 'r1');
      server.update(renewed);
      const after = await serialOfDial();
      assert.equal(after.serial.toLowerCase(), new X509Certificate(renewed.cert).serialNumber.toLowerCase());
      assert.notEqual(after.serial, before.serial, 'the renewed certificate is another one');
      // The connection made before the renewal still carries data.
      const echoed = new Promise<string>((resolve) => accepted[0]!.once('data', (b: Buffer) => resolve(b.toString())));
      before.socket.write('still open');
      assert.equal(await echoed, 'still open');
      before.socket.destroy();
      after.socket.destroy();
    } finally {
      for (const s of accepted) s.destroy();
      await new Promise((resolve) => listening.close(resolve));
    }
  });
});
