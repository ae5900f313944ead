/**
 * `basalt cluster --tls`: a local CA made once under <data>/certs/ca and kept, a certificate directory per member
 * without the CA key, and three `basalt start` processes that talk mutual TLS and serve a client.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '../client/remote.js';
import { freeRange } from '../testing/port-range.js';
import { CERT_FILES, localClusterCerts } from './certs.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

test('local cluster certificates: one CA kept across runs, a directory per member without the CA key', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-local-certs-'));
  try {
    const dirs = await localClusterCerts(dir, ['n1', 'n2']);
    const ca = new X509Certificate(readFileSync(join(dir, 'ca', 'ca.crt')));
    for (const name of ['n1', 'n2']) {
      const nodeDir = dirs.get(name)!;
      assert.equal(existsSync(join(nodeDir, 'ca.key')), false, 'a node holds no CA key');
      const cert = new X509Certificate(readFileSync(join(nodeDir, 'node.crt')));
      assert.ok(cert.verify(ca.publicKey), `${name}'s certificate is signed by the CA`);
      assert.match(cert.subjectAltName ?? '', new RegExp(`DNS:${name}\\b`));
    }
    await localClusterCerts(dir, ['n1', 'n2', 'n3']);
    assert.equal(new X509Certificate(readFileSync(join(dir, 'ca', 'ca.crt'))).fingerprint256, ca.fingerprint256);
    assert.ok(existsSync(join(dir, 'n3', 'node.crt')), 'a new member gets its certificate from the same CA');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('basalt cluster --tls: three nodes on mutual TLS become ready and serve a client', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-cluster-tls-'));
  const base = await freeRange(9);
  const args = ['cluster', '--tls', '--nodes', '3', '--data', join(dir, 'data'), '--table', 'kv:2:3'];
  args.push('--base-port', String(base), '--client-port', String(base + 3), '--metrics-port', String(base + 6));
  const child = spawn(process.execPath, [MAIN, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  try {
    const deadline = Date.now() + 90_000;
    let address: string | undefined;
    while (address === undefined) {
      const last = [...output.matchAll(/connect\('([^']+)'\)/g)].at(-1)?.[1];
      if (last !== undefined && /^basalt: ready/m.test(output)) address = last;
      else if (Date.now() > deadline || child.exitCode !== null) assert.fail(`no ready cluster:\n${output}`);
      else await new Promise((r) => setTimeout(r, 50));
    }
    const clientDir = join(dir, 'data', 'certs', 'client');
    const ca = readFileSync(join(clientDir, CERT_FILES.caCert));
    // Users are checked: a client without credentials is refused, the admin's client certificate logs in.
    const anonymous = await connect(address, { ca });
    await assert.rejects(anonymous.put('kv', 'k', 'anonymous'), /UNAUTHENTICATED/);
    await anonymous.close();
    const client = await connect(address, {
      ca,
      cert: readFileSync(join(clientDir, CERT_FILES.clientCert('root'))),
      key: readFileSync(join(clientDir, CERT_FILES.clientKey('root'))),
    });
    assert.equal(client.user, 'root');
    try {
      await client.transaction((tx) => tx.put('kv', 'k', 'over tls'), { retries: 20 });
      assert.equal(await client.get('kv', 'k'), 'over tls');
    } finally {
      await client.close();
    }
    assert.ok(existsSync(join(dir, 'data', 'certs', 'n2', 'node.crt')));
    // The commands log in with the same client certificate.
    const listed = spawnSync(
      process.execPath,
      [MAIN, 'table', 'list', '--connect', address, '--certs-dir', clientDir, '--user', 'root'],
      { encoding: 'utf8' },
    );
    assert.equal(listed.status, 0, listed.stderr);
    assert.match(listed.stdout, /^kv\tid \d+\t2 partitions\t3 replicas$/m);
    const refused = spawnSync(
      process.execPath,
      [MAIN, 'table', 'list', '--connect', address, '--certs-dir', clientDir],
      {
        encoding: 'utf8',
      },
    );
    assert.notEqual(refused.status, 0);
    assert.match(refused.stdout + refused.stderr, /UNAUTHENTICATED/);
  } finally {
    child.kill('SIGINT');
    assert.equal(await exited, 0, output);
    rmSync(dir, { recursive: true, force: true });
  }
});
