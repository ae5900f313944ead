/**
 * Rotation without a restart (`watchCertificates`, as `basalt start --certs-dir` runs it): renewed files that are out
 * of date are refused with the file and its dates, and the ports keep the material they have; valid renewed files
 * reach every port (the peer transport, the client and metrics ports) for their next connections. Under load: three
 * `basalt start` processes on mutual TLS, bank transfers over TLS clients; every node's certificate is replaced in its
 * directory by a new one of the same CA; fresh handshakes with every peer and client port then present the new
 * certificates, the connections opened before go on, a new one works, and the bank loses no acknowledged transfer.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect, type RemoteClient } from '../client/remote.js';
import type { PeerTlsMaterial } from '../net/peer-tls.js';
import { freeRange } from '../testing/port-range.js';
import { checkBank, SMALL_BANK } from '../testing/small-bank.js';
import {
  CERT_FILES,
  createCa,
  createNodeCert,
  localClientCerts,
  localClusterCerts,
  renewLocalNodeCert,
} from './certs.js';
import { ChildNode } from './child-node.js';
import { LOCAL_ADMIN } from './cluster-command.js';
import { presentedFingerprint } from './jepsen.js';
import { watchCertificates } from './start-command.js';

async function until(
  condition: () => boolean,
  what: string,
  timeoutMs = 20_000,
  poll: () => Promise<void> = async () => {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (await poll(); !condition(); await poll()) {
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('renewed certificates: an expired node.crt is refused with its dates and the old material kept, a valid one is used', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-rotation-'));
  const aborted = new AbortController();
  const lines: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
    lines.push(String(chunk));
    return write(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    await createCa({ certsDir: dir });
    await createNodeCert('n1', { certsDir: dir });
    const updates: PeerTlsMaterial[] = [];
    const target = { updateTls: (material: PeerTlsMaterial) => updates.push(material) };
    watchCertificates(dir, 'n1', [target, target], aborted.signal);

    const longAgo = new Date(Date.now() - 30 * 86_400_000);
    await createNodeCert('n1', { certsDir: dir, overwrite: true, now: longAgo, days: 1 });
    const file = join(dir, CERT_FILES.nodeCert);
    await until(() => lines.some((l) => l.includes('refused, keeping the current ones')), 'no refusal');
    const refusal = lines.find((l) => l.includes('refused, keeping the current ones'))!;
    assert.ok(refusal.includes(`${file} is expired (valid from ${longAgo.getUTCFullYear()}`), refusal);
    assert.equal(updates.length, 0, 'the ports keep what they have');

    await createNodeCert('n1', { certsDir: dir, overwrite: true });
    await until(() => updates.length === 2, 'no update');
    assert.equal(updates[0]!.cert, readFileSync(file, 'utf8'));
    assert.equal(updates[1], updates[0], 'every port gets the same renewed material');
    assert.ok(lines.some((l) => l.includes('are used for new peer, client and metrics connections')));
  } finally {
    process.stdout.write = write;
    aborted.abort();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('every node certificate renewed while transfers run over TLS: new handshakes get the new ones, no acknowledged transfer is lost', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-rotation-load-'));
  const names = ['n1', 'n2', 'n3'];
  const base = await freeRange(6);
  const peerPort = (i: number) => base + i;
  const clientPort = (i: number) => base + 3 + i;
  const certsDir = join(dir, 'certs');
  const nodeDirs = await localClusterCerts(certsDir, names);
  const clientDir = await localClientCerts(certsDir, LOCAL_ADMIN);
  const read = (file: string) => readFileSync(join(clientDir, file), 'utf8');
  const material = {
    ca: read(CERT_FILES.caCert),
    cert: read(CERT_FILES.clientCert(LOCAL_ADMIN)),
    key: read(CERT_FILES.clientKey(LOCAL_ADMIN)),
  };
  const { table, accounts, initialBalance, account, ends } = SMALL_BANK;
  const children = names.map((name, i) => {
    const peers = names.flatMap((n, j) => (j === i ? [] : [`${n}=127.0.0.1:${peerPort(j)}`]));
    const args = ['start', '--name', name, '--port', String(peerPort(i)), '--peers', peers.join(',')];
    args.push('--data', join(dir, name), '--client-port', String(clientPort(i)), '--table', `${table}:4:3`);
    args.push('--certs-dir', nodeDirs.get(name)!, '--log-level', 'warn', '--status-interval', '60000');
    if (i === 0) args.push('--init-admin', LOCAL_ADMIN);
    return new ChildNode(args);
  });
  const clients: RemoteClient[] = [];
  const acknowledged: number[] = [];
  const unknown: number[] = [];
  let next = 0;
  let stopping = false;
  let workers: Promise<void>[] = [];
  const transfers = async (client: RemoteClient, acked: number[]): Promise<void> => {
    while (!stopping) {
      const id = next++;
      const [from, to] = ends(id).map(account) as [string, string];
      try {
        await client.transaction(
          async (tx) => {
            const [a, b] = (await tx.getAll(table, [from, to])) as [number, number];
            await tx.put(table, from, a - 1);
            await tx.put(table, to, b + 1);
            await tx.put(table, `xfer/${id}`, id);
          },
          { retries: 30 },
        );
        acknowledged.push(id);
        acked.push(id);
      } catch (error) {
        if ((error as { code?: string }).code === 'TX_OUTCOME_UNKNOWN') unknown.push(id);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  /** A client of node i, once it knows the admin n1 created (a login is refused until it applied that). */
  const connectTo = async (i: number): Promise<RemoteClient> => {
    for (let attempt = 1; ; attempt++) {
      try {
        const client = await connect(`127.0.0.1:${clientPort(i)}`, { timeoutMs: 10_000, ...material });
        clients.push(client);
        return client;
      } catch (error) {
        if (attempt >= 40 || (error as { code?: string }).code !== 'UNAUTHENTICATED') throw error;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  };
  const served = async (i: number) =>
    Promise.all([presentedFingerprint(peerPort(i), material), presentedFingerprint(clientPort(i), material)]);
  try {
    await Promise.all(children.map((c, i) => c.waitFor(new RegExp(`basalt: node ${names[i]} ready`), 90_000)));
    const first = await connectTo(0);
    const entries = Array.from({ length: accounts }, (_, i) => ({ key: account(i), value: initialBalance }));
    await first.transaction((tx) => tx.putAll(table, entries), { retries: 50 });
    const second = await connectTo(1);
    const acks: number[][] = [[], []];
    workers = [first, second].map((c, i) => transfers(c, acks[i]!));
    await until(() => acknowledged.length >= 10, 'transfers before the renewal', 60_000);

    const before = await Promise.all(names.map((_, i) => served(i)));
    const renewed = await Promise.all(names.map((n) => renewLocalNodeCert(certsDir, n)));
    for (const [i, r] of renewed.entries()) assert.ok(!before[i]!.includes(r.fingerprint256), 'a new certificate');
    // Each node polls its directory: within a poll or two, every port's new handshakes present the new certificate.
    const presented: (string | undefined)[][] = [];
    await until(
      () => presented.length === 3 && presented.every((p, i) => p.every((f) => f === renewed[i]!.fingerprint256)),
      'every peer and client port presenting its renewed certificate',
      30_000,
      async () => {
        presented.splice(0, 3, ...(await Promise.all(names.map((_, i) => served(i)))));
      },
    );
    // The connections opened before the renewal go on; a new one, over the new material, serves transfers too.
    const afterRenewal = acks.map((a) => a.length);
    const fresh = await connectTo(2);
    const freshAcked: number[] = [];
    workers.push(transfers(fresh, freshAcked));
    await until(
      () => acks.every((a, i) => a.length >= afterRenewal[i]! + 5) && freshAcked.length >= 5,
      'transfers on the connections opened before the renewal and on a new one',
      60_000,
    );
    stopping = true;
    await Promise.all(workers);
    await checkBank(fresh, { ...SMALL_BANK, acknowledged, unknown });
  } finally {
    stopping = true;
    await Promise.all(workers).catch(() => undefined);
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    for (const child of children) child.signal('SIGKILL');
    await Promise.all(children.map((c) => c.exited));
    rmSync(dir, { recursive: true, force: true });
  }
});
