import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect, createServer, type TLSSocket } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { isBasaltError } from '../core/errors.js';
import {
  CERT_FILES,
  certStatus,
  createCa,
  createClientCert,
  createNodeCert,
  formatCertList,
  listCerts,
  loadPeerTls,
} from './certs.js';

const root = mkdtempSync(join(tmpdir(), 'basalt-certs-'));
after(() => rmSync(root, { recursive: true, force: true }));

/** One CA with a node and a client certificate, and a second CA with its own node certificate. */
const dir = join(root, 'cluster');
const otherDir = join(root, 'other');
before(async () => {
  await createCa({ certsDir: dir });
  await createNodeCert('n1', { certsDir: dir, hosts: ['127.0.0.1', 'db.example.com'] });
  await createClientCert('alice', { certsDir: dir });
  await createCa({ certsDir: otherDir });
  await createNodeCert('n1', { certsDir: otherDir });
  await createClientCert('alice', { certsDir: otherDir });
});

const read = (certsDir: string, file: string): string => readFileSync(join(certsDir, file), 'utf8');
const cert = (certsDir: string, file: string): X509Certificate => new X509Certificate(read(certsDir, file));

describe('basalt cert', () => {
  it('creates a CA that node:crypto parses as a CA, with its key and directory private to the owner', () => {
    const ca = cert(dir, CERT_FILES.caCert);
    assert.equal(ca.ca, true);
    assert.equal(ca.subject, 'CN=Basalt CA\nO=Basalt');
    assert.equal(ca.verify(ca.publicKey), true, 'self-signed');
    assert.equal(statSync(join(dir, CERT_FILES.caKey)).mode & 0o777, 0o600);
    assert.equal(statSync(dir).mode & 0o777, 0o700, 'a directory basalt cert creates is 0700');
    const years = (new Date(ca.validTo).getTime() - new Date(ca.validFrom).getTime()) / (365 * 86_400_000);
    assert.ok(years > 9.9 && years < 10.1, `CA valid for ${years} years`);
  });

  it('signs a node certificate naming the member in the CN and as a DNS SAN, --host names and addresses added', () => {
    const ca = cert(dir, CERT_FILES.caCert);
    const node = cert(dir, CERT_FILES.nodeCert);
    assert.equal(node.verify(ca.publicKey), true, 'node.crt verifies against ca.crt');
    assert.equal(node.verify(cert(otherDir, CERT_FILES.caCert).publicKey), false, 'and not against another CA');
    assert.equal(node.ca, false);
    assert.equal(node.subject, 'CN=n1\nO=Basalt');
    assert.equal(node.issuer, ca.subject);
    assert.equal(node.subjectAltName, 'DNS:n1, IP Address:127.0.0.1, DNS:db.example.com');
    assert.equal(node.checkHost('n1'), 'n1');
    assert.equal(node.checkIP('127.0.0.1'), '127.0.0.1');
    assert.equal(statSync(join(dir, CERT_FILES.nodeKey)).mode & 0o777, 0o600);
    const days = (new Date(node.validTo).getTime() - Date.now()) / 86_400_000;
    assert.ok(days > 364 && days <= 365, `node certificate valid for ${days} more days`);
    assert.ok(node.checkPrivateKey(createPrivateKey(read(dir, CERT_FILES.nodeKey))), 'node.key is the key of node.crt');
  });

  it('signs a client certificate with CN = user and no SAN', () => {
    const client = cert(dir, CERT_FILES.clientCert('alice'));
    assert.equal(client.verify(cert(dir, CERT_FILES.caCert).publicKey), true);
    assert.equal(client.subject, 'CN=alice\nO=Basalt');
    assert.equal(client.subjectAltName, undefined);
    assert.equal(statSync(join(dir, CERT_FILES.clientKey('alice'))).mode & 0o777, 0o600);
  });

  it('--days sets the validity, and a certificate never outlives its CA', async () => {
    const certsDir = join(root, 'days');
    await createCa({ certsDir, days: 30 });
    await createClientCert('bob', { certsDir, days: 2 });
    await createNodeCert('n2', { certsDir, days: 400 });
    const ca = cert(certsDir, CERT_FILES.caCert);
    const days = (file: string) => (new Date(cert(certsDir, file).validTo).getTime() - Date.now()) / 86_400_000;
    assert.ok(days(CERT_FILES.clientCert('bob')) > 1.9 && days(CERT_FILES.clientCert('bob')) <= 2);
    assert.equal(cert(certsDir, CERT_FILES.nodeCert).validTo, ca.validTo, 'cut at the CA’s end');
  });

  it('refuses a node or client certificate without a CA, naming the missing file', async () => {
    const certsDir = join(root, 'empty');
    for (const create of [() => createNodeCert('n1', { certsDir }), () => createClientCert('alice', { certsDir })]) {
      await assert.rejects(
        create,
        (e: unknown) => isBasaltError(e, 'NOT_FOUND') && e.message.includes(join(certsDir, CERT_FILES.caCert)),
      );
    }
  });

  it('refuses to overwrite a CA (or any certificate) unless asked to', async () => {
    const caBefore = read(dir, CERT_FILES.caCert);
    await assert.rejects(
      () => createCa({ certsDir: dir }),
      (e: unknown) => isBasaltError(e, 'ALREADY_EXISTS') && e.message.includes(CERT_FILES.caCert),
    );
    await assert.rejects(
      () => createNodeCert('n1', { certsDir: dir }),
      (e: unknown) => isBasaltError(e, 'ALREADY_EXISTS'),
    );
    assert.equal(read(dir, CERT_FILES.caCert), caBefore, 'the CA is untouched');
    const certsDir = join(root, 'overwrite');
    await createCa({ certsDir });
    const first = read(certsDir, CERT_FILES.caCert);
    writeFileSync(join(certsDir, CERT_FILES.caKey), read(certsDir, CERT_FILES.caKey), { mode: 0o644 });
    await createCa({ certsDir, overwrite: true });
    assert.notEqual(read(certsDir, CERT_FILES.caCert), first);
    assert.equal(statSync(join(certsDir, CERT_FILES.caKey)).mode & 0o777, 0o600, 'a replaced key is 0600 again');
  });

  it('refuses names that cannot be a DNS name or a file name', async () => {
    await assert.rejects(
      () => createNodeCert('n 1', { certsDir: dir }),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
    await assert.rejects(
      () => createClientCert('../alice', { certsDir: dir }),
      (e: unknown) => isBasaltError(e, 'INVALID_ARGUMENT'),
    );
  });

  it('refuses a CA key that is not the key of ca.crt', async () => {
    const certsDir = join(root, 'mixed');
    await createCa({ certsDir });
    writeFileSync(join(certsDir, CERT_FILES.caKey), read(otherDir, CERT_FILES.caKey));
    await assert.rejects(
      () => createNodeCert('n1', { certsDir }),
      (e: unknown) => isBasaltError(e, 'TLS_CONFIG_INVALID') && e.message.includes(CERT_FILES.caKey),
    );
  });

  it('lists every certificate with its subject, SANs, dates and status', () => {
    const entries = listCerts(dir);
    assert.deepEqual(
      entries.map((e) => e.file),
      [CERT_FILES.caCert, CERT_FILES.clientCert('alice'), CERT_FILES.nodeCert].map((f) => join(dir, f)),
    );
    const node = entries[2]!;
    assert.ok(!('error' in node));
    assert.equal(node.subject, 'CN=n1, O=Basalt');
    assert.equal(node.sans, 'DNS:n1, IP Address:127.0.0.1, DNS:db.example.com');
    assert.equal(node.status, 'valid');
    const text = formatCertList(entries).join('\n');
    assert.match(text, /node\.crt:\n {2}subject: {4}CN=n1, O=Basalt\n/);
    assert.match(text, /not after: {2}\d{4}-\d\d-\d\dT/);
    const later = listCerts(dir, new Date(Date.now() + 2 * 365 * 86_400_000));
    assert.deepEqual(
      later.map((e) => ('error' in e ? e.error : e.status)),
      ['valid', 'expired', 'expired'],
    );
  });

  it('tells expired, valid and not yet valid apart', () => {
    const from = new Date('2026-01-01T00:00:00Z');
    const to = new Date('2027-01-01T00:00:00Z');
    assert.equal(certStatus(from, to, new Date('2025-12-31T23:59:59Z')), 'not yet valid');
    assert.equal(certStatus(from, to, new Date('2026-06-01T00:00:00Z')), 'valid');
    assert.equal(certStatus(from, to, new Date('2027-01-01T00:00:01Z')), 'expired');
  });
});

describe('the basalt cert command', () => {
  const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));
  const basalt = (...args: string[]) => {
    const run = spawnSync(process.execPath, [MAIN, 'cert', ...args], { encoding: 'utf8' });
    return { code: run.status, out: run.stdout, err: run.stderr };
  };

  it('creates and lists a CA, a node and a client certificate; refuses a node without a CA with exit code 1', () => {
    const certsDir = join(root, 'command');
    const orphan = basalt('create-node', 'n1', '--certs-dir', certsDir);
    assert.equal(orphan.code, 1);
    assert.match(orphan.err, /^basalt: NOT_FOUND: no CA: .*ca\.crt does not exist/);
    assert.equal(basalt('create-ca', '--certs-dir', certsDir, '--days', '30').code, 0);
    const node = basalt('create-node', 'n1', '--certs-dir', certsDir, '--host', '10.0.0.1', '--host', 'n1.local');
    assert.equal(node.code, 0, node.err);
    assert.match(node.out, /^node n1: wrote .*node\.crt and .*node\.key \(valid until /);
    assert.equal(basalt('create-client', 'root', '--certs-dir', certsDir).code, 0);
    const list = basalt('list', '--certs-dir', certsDir);
    assert.equal(list.code, 0, list.err);
    assert.match(
      list.out,
      /node\.crt:\n {2}subject: {4}CN=n1, O=Basalt\n.*\n {2}SANs: {7}DNS:n1, IP Address:10\.0\.0\.1, DNS:n1\.local\n/,
    );
    assert.match(list.out, /client\.root\.crt:\n {2}subject: {4}CN=root, O=Basalt/);
    assert.equal(list.out.split('status:     valid').length - 1, 3);
    const again = basalt('create-ca', '--certs-dir', certsDir);
    assert.equal(again.code, 1);
    assert.match(again.err, /ALREADY_EXISTS: .*ca\.crt and .*ca\.key already exist; pass --overwrite to replace/);
  });
});

describe('basalt start --certs-dir: the peer material is checked before the node starts', () => {
  const refusedWith = (pattern: RegExp) => (e: unknown) =>
    isBasaltError(e, 'TLS_CONFIG_INVALID') && pattern.test(e.message);

  it('loads ca.crt, node.crt and node.key of a node certificate naming the member', () => {
    const material = loadPeerTls(dir, 'n1', new Date());
    assert.equal(material.ca, read(dir, CERT_FILES.caCert));
    assert.equal(material.cert, read(dir, CERT_FILES.nodeCert));
    assert.equal(material.key, read(dir, CERT_FILES.nodeKey));
  });

  it('refuses a node certificate that names another member', () => {
    assert.throws(() => loadPeerTls(dir, 'n2', new Date()), refusedWith(/node\.crt names n1, .*not this node n2/));
  });

  it('refuses an expired or not yet valid certificate, naming the file and its dates', async () => {
    const certsDir = join(root, 'dates');
    const made = new Date();
    await createCa({ certsDir, now: new Date(made.getTime() - 86_400_000) });
    await createNodeCert('n1', { certsDir, days: 2, now: made });
    const nodeCrt = join(certsDir, CERT_FILES.nodeCert).replace(/[.]/g, '\\.');
    const later = new Date(made.getTime() + 3 * 86_400_000);
    assert.throws(
      () => loadPeerTls(certsDir, 'n1', later),
      refusedWith(
        new RegExp(`${nodeCrt} is expired \\(valid from \\d{4}-.*Z to \\d{4}-.*Z, now ${later.toISOString()}\\)`),
      ),
    );
    const earlier = new Date(made.getTime() - 2 * 3_600_000);
    assert.throws(() => loadPeerTls(certsDir, 'n1', earlier), refusedWith(/node\.crt is not yet valid \(valid from/));
  });

  it('refuses a directory without node.key, a key of another certificate, and a node certificate of another CA', () => {
    assert.throws(() => loadPeerTls(join(root, 'empty'), 'n1', new Date()), refusedWith(/cannot read .*ca\.crt/));
    const mixed = join(root, 'mixed-node');
    mkdirSync(mixed, { recursive: true });
    writeFileSync(join(mixed, CERT_FILES.caCert), read(dir, CERT_FILES.caCert));
    writeFileSync(join(mixed, CERT_FILES.nodeCert), read(dir, CERT_FILES.nodeCert));
    writeFileSync(join(mixed, CERT_FILES.nodeKey), read(otherDir, CERT_FILES.nodeKey));
    assert.throws(() => loadPeerTls(mixed, 'n1', new Date()), refusedWith(/node\.key is not the key of .*node\.crt/));
    writeFileSync(join(mixed, CERT_FILES.caCert), read(otherDir, CERT_FILES.caCert));
    assert.throws(() => loadPeerTls(mixed, 'n1', new Date()), refusedWith(/node\.crt is not signed by the CA/));
  });
});

describe('certificates from basalt cert in a mutual-TLS handshake (TLS 1.3)', () => {
  it('a node certificate and a client certificate of the same CA complete the handshake', async () => {
    const result = await handshake({ server: dir, serverTrusts: dir, client: dir, clientTrusts: dir });
    assert.equal(result.ok, true, result.error);
    assert.equal(result.protocol, 'TLSv1.3');
    assert.equal(result.serverSawCn, 'alice');
    assert.equal(result.serverRefusal, undefined);
  });

  it('the server refuses a client certificate of another CA', async () => {
    const result = await handshake({ server: dir, serverTrusts: dir, client: otherDir, clientTrusts: dir });
    assert.equal(result.ok, false);
    assert.equal(result.serverSawCn, undefined, 'no authorized connection reached the server');
    // OpenSSL's reason for the server's side is not stable (it may read as a reset once the alert went out).
    assert.notEqual(result.serverRefusal, undefined, 'the server reports a refused handshake');
  });

  it('the client refuses a server certificate of another CA', async () => {
    const result = await handshake({ server: otherDir, serverTrusts: dir, client: dir, clientTrusts: dir });
    assert.equal(result.ok, false);
    assert.equal(result.serverSawCn, undefined);
    assert.match(result.error ?? '', /certificate/i);
  });
});

interface HandshakeResult {
  readonly ok: boolean;
  readonly protocol?: string | null;
  readonly serverSawCn?: string;
  /** Why the server refused the handshake, if it did. */
  readonly serverRefusal?: string;
  readonly error?: string;
}

/** Directories: whose node certificate the server shows, whose CA it trusts; the same for alice, the client. */
interface HandshakeSides {
  readonly server: string;
  readonly serverTrusts: string;
  readonly client: string;
  readonly clientTrusts: string;
}

/**
 * A TLS 1.3 server and client on loopback, as mutual TLS runs them, and the result as the client sees it once data
 * made a round trip: in TLS 1.3 the client finishes its handshake before the server has checked the client's
 * certificate, so only an answer proves that the server accepted it.
 */
async function handshake(sides: HandshakeSides): Promise<HandshakeResult> {
  let serverSawCn: string | undefined;
  let serverRefusal: string | undefined;
  const server = createServer({
    ca: read(sides.serverTrusts, CERT_FILES.caCert),
    cert: read(sides.server, CERT_FILES.nodeCert),
    key: read(sides.server, CERT_FILES.nodeKey),
    minVersion: 'TLSv1.3',
    requestCert: true,
    rejectUnauthorized: true,
  });
  server.on('secureConnection', (socket: TLSSocket) => {
    serverSawCn = String(socket.getPeerCertificate().subject?.CN);
    socket.end('hello');
  });
  server.on('tlsClientError', (error) => {
    serverRefusal = error.message;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    const result = await new Promise<HandshakeResult>((resolve) => {
      const socket = connect({
        host: '127.0.0.1',
        port,
        ca: read(sides.clientTrusts, CERT_FILES.caCert),
        cert: read(sides.client, CERT_FILES.clientCert('alice')),
        key: read(sides.client, CERT_FILES.clientKey('alice')),
        minVersion: 'TLSv1.3',
        servername: 'n1',
      });
      let data = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        data += chunk;
      });
      socket.on('error', (error) => resolve({ ok: false, error: error.message }));
      socket.on('end', () => resolve({ ok: data === 'hello', protocol: socket.getProtocol() }));
    });
    // The server's side of a refused handshake may be reported a moment after the client saw the alert.
    await new Promise((resolve) => setTimeout(resolve, 20));
    return {
      ...result,
      ...(serverSawCn !== undefined && { serverSawCn }),
      ...(serverRefusal !== undefined && { serverRefusal }),
    };
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
