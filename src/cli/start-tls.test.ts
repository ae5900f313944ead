/**
 * Real processes with mutual TLS on the peer port: three `basalt start --certs-dir` processes, each with its own
 * directory (the CA certificate and its own node certificate, not the CA key), given their peers as bare addresses so
 * that the probes run over TLS too; a client writes a key through one node and reads it back. A node whose certificate
 * has expired refuses to start, naming the file and the dates.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '../client/remote.js';
import { CERT_FILES, createCa, createNodeCert } from './certs.js';
import { freePorts } from './free-ports.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

class NodeProcess {
  output = '';
  readonly exited: Promise<number | null>;
  private readonly child: ChildProcess;

  constructor(args: readonly string[], env: NodeJS.ProcessEnv = process.env) {
    this.child = spawn(process.execPath, [MAIN, 'start', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
    const append = (chunk: Buffer): void => {
      this.output += chunk.toString();
    };
    this.child.stdout!.on('data', append);
    this.child.stderr!.on('data', append);
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  async waitFor(pattern: RegExp, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.output)) {
      if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms; output:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  kill(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }
}

/** Runs a `basalt` command to its end: its exit status and its output. */
function basalt(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  input = '',
): { status: number | null; output: string } {
  const result = spawnSync(process.execPath, [MAIN, ...args], { env, input, encoding: 'utf8' });
  return { status: result.status, output: result.stdout + result.stderr };
}

/** A node's own certificates directory: ca.crt and its node.crt / node.key, signed with the CA of `caDir`. */
async function nodeDir(caDir: string, root: string, name: string, now?: Date): Promise<string> {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const file of [CERT_FILES.caCert, CERT_FILES.caKey]) copyFileSync(join(caDir, file), join(dir, file));
  // Named by its member name and its loopback address, which the commands dial.
  await createNodeCert(name, { certsDir: dir, hosts: ['127.0.0.1'], ...(now !== undefined && { now, days: 1 }) });
  // A node needs the CA's certificate, never its key.
  unlinkSync(join(dir, CERT_FILES.caKey));
  return dir;
}

test('basalt start --certs-dir: three nodes over mutual TLS find each other, and a client writes and reads a key', async () => {
  const root = mkdtempSync(join(tmpdir(), 'basalt-tls-nodes-'));
  const caDir = join(root, 'ca');
  await createCa({ certsDir: caDir });
  const ports = await freePorts(5);
  const clientPort = ports[3]!;
  const metricsPort = ports[4]!;
  const dirs = new Map<string, string>();
  const args = async (name: string, i: number) => [
    '--name',
    name,
    '--port',
    String(ports[i]),
    '--peers',
    ports.flatMap((p, j) => (j === i || j >= 3 ? [] : [`127.0.0.1:${p}`])).join(','),
    '--memory',
    '--certs-dir',
    dirs.set(name, await nodeDir(caDir, root, name)).get(name)!,
    '--table',
    't:2:3',
    ...(i === 0
      ? ['--client-port', String(clientPort), '--metrics-port', String(metricsPort), '--init-admin', 'admin']
      : []),
  ];
  // The first admin's password comes from the environment, never from a flag or a built-in default.
  const env = { ...process.env, BASALT_ADMIN_PASSWORD: 'first-admin-password' };
  const procs: NodeProcess[] = [];
  try {
    for (const [i, name] of ['n1', 'n2', 'n3'].entries()) procs.push(new NodeProcess(await args(name, i), env));
    for (const p of procs) await p.waitFor(/basalt: node n\d ready/);
    for (const [i, p] of procs.entries()) {
      assert.match(p.output, /\(id \S+, mutual TLS with the certificates in /);
      assert.match(p.output, new RegExp(`node n${i + 1} members: n\\d, n\\d, n\\d\n`));
    }
    const ca = readFileSync(join(caDir, CERT_FILES.caCert));
    // The client port serves n1's node certificate, which names n1 (checked here instead of the address dialed).
    const address = `127.0.0.1:${clientPort}`;
    assert.match(procs[0]!.output, /admin user admin created; it logs in with BASALT_ADMIN_PASSWORD/);
    const anonymous = await connect(address, { ca, serverName: 'n1' });
    await assert.rejects(anonymous.put('t', 'k', 'anonymous'), /UNAUTHENTICATED/);
    await anonymous.close();
    await assert.rejects(
      connect(address, { ca, serverName: 'n1', user: 'admin', password: 'not-the-password' }),
      /UNAUTHENTICATED/,
    );
    const client = await connect(address, { ca, serverName: 'n1', user: 'admin', password: 'first-admin-password' });
    try {
      await client.put('t', 'k', { over: 'tls' });
      assert.deepEqual(await client.get('t', 'k'), { over: 'tls' });
    } finally {
      await client.close();
    }
    // The commands that connect: an admin adds a readonly user whose password comes from standard input.
    const n1Dir = dirs.get('n1')!;
    const admin = ['--connect', address, '--certs-dir', n1Dir, '--user', 'admin'];
    const adminEnv = { ...process.env, BASALT_PASSWORD: 'first-admin-password' };
    const add = basalt(
      ['user', 'add', 'reader', '--role', 'readonly', '--password-stdin', ...admin],
      adminEnv,
      'reader-password\n',
    );
    assert.equal(add.status, 0, add.output);
    const list = basalt(['user', 'list', ...admin], adminEnv);
    assert.match(list.output, /^reader\treadonly; password$/m);
    assert.match(list.output, /^admin\tadmin; password$/m);
    const readerEnv = { ...process.env, BASALT_PASSWORD: 'reader-password' };
    const read = basalt(['get', 't', 'k', '--connect', address, '--certs-dir', n1Dir, '--user', 'reader'], readerEnv);
    assert.equal(read.status, 0, read.output);
    const write = basalt(
      ['put', 't', 'k', '1', '--connect', address, '--certs-dir', n1Dir, '--user', 'reader'],
      readerEnv,
    );
    assert.match(write.output, /PERMISSION_DENIED/);
    assert.notEqual(write.status, 0);
    // The metrics port is HTTPS with the node's certificate, and counts the refused logins.
    const status = basalt(['status', '--metrics', `127.0.0.1:${metricsPort}`, '--certs-dir', n1Dir], process.env);
    assert.equal(status.status, 0, status.output);
    assert.match(status.output, /n1\t127\.0\.0\.1:\d+\tup\thealthy/);
    const plain = basalt(['status', '--metrics', `127.0.0.1:${metricsPort}`], process.env);
    assert.match(plain.output, /down/);
    assert.match(procs[0]!.output, /metrics of n1: https:\/\//);
    for (const p of procs) p.kill('SIGINT');
    for (const p of procs) assert.equal(await p.exited, 0, p.output);
  } finally {
    for (const p of procs) p.kill('SIGKILL');
    rmSync(root, { recursive: true, force: true });
  }
});

test('basalt start off loopback refuses to start without --certs-dir in one line naming the flag; --insecure starts', async () => {
  const [port] = await freePorts(1);
  const refused = new NodeProcess(['--name', 'n1', '--host', '0.0.0.0', '--port', String(port), '--memory']);
  assert.equal(await refused.exited, 1, refused.output);
  assert.match(
    refused.output,
    /CERTS_REQUIRED: --host 0\.0\.0\.0 is reachable from other machines: give --certs-dir <dir> .*--insecure/,
  );
  assert.equal(refused.output.trim().split('\n').length, 1, refused.output);
  assert.doesNotMatch(refused.output, /listening on/);
  const insecure = new NodeProcess([
    '--name',
    'n1',
    '--host',
    '0.0.0.0',
    '--port',
    String(port),
    '--memory',
    '--insecure',
  ]);
  try {
    await insecure.waitFor(/node n1 listening on/);
  } finally {
    insecure.kill('SIGKILL');
    await insecure.exited;
  }
});

test('basalt start --certs-dir refuses to start with an expired node certificate, naming the file and the dates', async () => {
  const root = mkdtempSync(join(tmpdir(), 'basalt-tls-expired-'));
  try {
    const caDir = join(root, 'ca');
    const longAgo = new Date(Date.now() - 30 * 86_400_000);
    await createCa({ certsDir: caDir, now: longAgo });
    const dir = await nodeDir(caDir, root, 'n1', longAgo);
    const [port] = await freePorts(1);
    const node = new NodeProcess(['--name', 'n1', '--port', String(port), '--memory', '--certs-dir', dir]);
    assert.equal(await node.exited, 1, node.output);
    const file = join(dir, CERT_FILES.nodeCert).replace(/[.]/g, '\\.');
    assert.match(
      node.output,
      new RegExp(`TLS_CONFIG_INVALID: ${file} is expired \\(valid from \\d{4}-\\S+ to \\d{4}-`),
    );
    assert.doesNotMatch(node.output, /listening on/, 'it never opened its peer port');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
