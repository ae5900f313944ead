/**
 * Users and roles on a TLS client port, with real TLS 1.3 handshakes on loopback: a node of an in-process cluster
 * serves its client port with a node certificate of a throwaway CA and checks users (the setup `basalt start
 * --certs-dir` runs). Refusals carry their codes and write nothing; the failed logins of one (address, user) are
 * slowed and counted; every request kind declares what it needs.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { REQUEST_PERMISSIONS } from '../client/authorization.js';
import { nodeClient } from '../client/node-client.js';
import { hashPassword, SALT_BYTES } from '../client/passwords.js';
import { CLIENT_MAGIC, REQUEST_KINDS } from '../client/protocol.js';
import { type ConnectOptions, connect, type RemoteClient } from '../client/remote.js';
import { ClientServer } from '../client/server.js';
import { isBasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { RealClock } from '../env/real-clock.js';
import { secureRandomBytes } from '../env/real-random.js';
import { RealTimers } from '../env/real-timers.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';
import { encodeFrame, FrameDecoder } from '../net/frame.js';
import type { BasaltNode } from '../node/basalt-node.js';
import { CERT_FILES, createCa, createClientCert, createNodeCert, loadClientTls, loadPeerTls } from './certs.js';

const T = 'accounts';
const OTHER = 'ledger';
const ADMIN_PASSWORD = 'admin-password-1';

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<string> {
  try {
    await promise;
  } catch (error) {
    assert.ok(isBasaltError(error), `expected a BasaltError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    assert.equal(error.retryable, false);
    return error.message;
  }
  assert.fail(`expected ${code}, the call succeeded`);
}

describe('client port with users (TLS 1.3, one node)', () => {
  let dir: string;
  let cluster: Cluster<Client>;
  let node: BasaltNode;
  let server: ClientServer;
  let ca: Buffer;
  let admin: RemoteClient;
  const open: RemoteClient[] = [];

  const files = (name: string) => ({
    cert: readFileSync(join(dir, CERT_FILES.clientCert(name))),
    key: readFileSync(join(dir, CERT_FILES.clientKey(name))),
  });
  const dial = async (options: Omit<ConnectOptions, 'ca'> = {}): Promise<RemoteClient> => {
    const client = await connect(server.address, { ca, ...options });
    open.push(client);
    return client;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'basalt-client-auth-'));
    await createCa({ certsDir: dir });
    await createNodeCert('n1', { certsDir: dir, hosts: ['127.0.0.1'] });
    for (const user of ['carol', 'nobody']) await createClientCert(user, { certsDir: dir });
    // An expired client certificate of the same CA.
    const longAgo = new Date(Date.now() - 30 * 86_400_000);
    await createClientCert('dave', { certsDir: dir, now: longAgo, days: 1 });
    // A certificate of another CA, for a user that exists.
    const foreign = join(dir, 'foreign');
    await createCa({ certsDir: foreign });
    await createClientCert('carol', { certsDir: foreign });
    ca = readFileSync(join(dir, CERT_FILES.caCert));

    cluster = await startCluster({ nodes: 1 });
    node = cluster.basaltNode('n1')!;
    const password = await hashPassword(ADMIN_PASSWORD, secureRandomBytes(SALT_BYTES));
    await node.metastorage.createUser({ name: 'root', role: 'admin', password });
    server = await ClientServer.start({
      host: '127.0.0.1',
      port: 0,
      client: nodeClient(node),
      timers: new RealTimers(),
      tls: loadPeerTls(dir, 'n1', new Date()),
      auth: { clock: new RealClock(), salts: secureRandomBytes },
    });
    admin = await dial({ user: 'root', password: ADMIN_PASSWORD });
    await admin.createTable(T, { partitions: 2, replicas: 1 });
    await admin.createTable(OTHER, { partitions: 1, replicas: 1 });
    await admin.transaction((tx) => tx.put(T, 'seed', 1), { retries: 20 });
  });

  after(async () => {
    for (const client of open) await client.close();
    await server?.close();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every request kind declares its permission', () => {
    assert.deepEqual(Object.keys(REQUEST_PERMISSIONS).sort(), [...REQUEST_KINDS].sort());
    for (const kind of REQUEST_KINDS) assert.equal(typeof REQUEST_PERMISSIONS[kind], 'function', kind);
  });

  it('a client without credentials connects, and its requests fail UNAUTHENTICATED and write nothing', async () => {
    const anonymous = await dial();
    assert.equal(anonymous.user, undefined);
    await rejectsWith(anonymous.put(T, 'anon', 1), 'UNAUTHENTICATED');
    await rejectsWith(anonymous.get(T, 'seed'), 'UNAUTHENTICATED');
    await rejectsWith(anonymous.begin(), 'UNAUTHENTICATED');
    await rejectsWith(anonymous.tables(), 'UNAUTHENTICATED');
    await rejectsWith(
      anonymous.createUser('mallory', { password: 'mallory-password', role: 'admin' }),
      'UNAUTHENTICATED',
    );
    assert.equal(await admin.get(T, 'anon'), undefined);
    assert.deepEqual(
      (await admin.users()).map((u) => u.name),
      ['root'],
    );
  });

  it('a wrong password fails connect with UNAUTHENTICATED (no password in the message)', async () => {
    const message = await rejectsWith(
      connect(server.address, { ca, user: 'root', password: 'not-it-at-all' }),
      'UNAUTHENTICATED',
    );
    assert.doesNotMatch(message, /not-it-at-all/);
    await rejectsWith(connect(server.address, { ca, user: 'ghost', password: 'whatever-it-is' }), 'UNAUTHENTICATED');
  });

  it('an admin creates users, and each logs in with its password or its client certificate', async () => {
    await admin.createUser('alice', { password: 'alice-password', role: 'readonly' });
    await admin.createUser('bob', { password: 'bob-password', role: 'readwrite' });
    await admin.createUser('carol', { role: 'readwrite' });
    const users = await admin.users();
    assert.deepEqual(
      users.map((u) => [u.name, u.role, u.password]),
      [
        ['alice', 'readonly', true],
        ['bob', 'readwrite', true],
        ['carol', 'readwrite', false],
        ['root', 'admin', true],
      ],
    );
    const alice = await dial({ user: 'alice', password: 'alice-password' });
    assert.equal(alice.user, 'alice');
    const carol = await dial(files('carol'));
    assert.equal(carol.user, 'carol');
    await carol.put(T, 'by-carol', 'cert');
    assert.equal(await admin.get(T, 'by-carol'), 'cert');
    await rejectsWith(admin.createUser('alice', { password: 'another-password' }), 'ALREADY_EXISTS');
    await rejectsWith(admin.createUser('short', { password: 'short' }), 'INVALID_ARGUMENT');
  });

  it("a readonly user's put is refused PERMISSION_DENIED and writes nothing; its reads are served", async () => {
    const alice = await dial({ user: 'alice', password: 'alice-password' });
    await rejectsWith(alice.put(T, 'by-alice', 1), 'PERMISSION_DENIED');
    // A write kept for the commit is refused with the commit that carries it.
    const writing = await alice.begin();
    await writing.put(T, 'by-alice', 2);
    await rejectsWith(writing.commit(), 'PERMISSION_DENIED');
    const tx = await alice.begin();
    await rejectsWith(tx.get(T, 'seed', { forUpdate: true }), 'PERMISSION_DENIED');
    assert.equal(await tx.get(T, 'seed'), 1);
    assert.deepEqual(
      (await tx.scan(T, { prefix: 'seed' })).map((e) => e.key),
      ['seed'],
    );
    await tx.commit();
    assert.equal(await admin.get(T, 'by-alice'), undefined);
    await rejectsWith(alice.createUser('eve', { password: 'eve-password' }), 'PERMISSION_DENIED');
    await rejectsWith(alice.users(), 'PERMISSION_DENIED');
  });

  it("a readwrite user's dropTable (and other admin calls) is refused PERMISSION_DENIED; the table stays", async () => {
    const bob = await dial({ user: 'bob', password: 'bob-password' });
    await bob.put(T, 'by-bob', 1);
    await rejectsWith(bob.dropTable(T), 'PERMISSION_DENIED');
    await rejectsWith(bob.createTable('bobs', { partitions: 1, replicas: 1 }), 'PERMISSION_DENIED');
    await rejectsWith(bob.removeNode('n1'), 'PERMISSION_DENIED');
    await rejectsWith(bob.grant('bob', 'admin'), 'PERMISSION_DENIED');
    assert.deepEqual((await admin.tables()).map((t) => t.name).sort(), [OTHER, T].sort());
    // A user changes its own password, not another's.
    await rejectsWith(bob.setPassword('alice', 'taken-over-1'), 'PERMISSION_DENIED');
    await bob.setPassword('bob', 'bob-password-2');
    await rejectsWith(connect(server.address, { ca, user: 'bob', password: 'bob-password' }), 'UNAUTHENTICATED');
    await dial({ user: 'bob', password: 'bob-password-2' });
  });

  it('a role on one table allows that table only, and a revoked role takes effect on the next request', async () => {
    await admin.createUser('tina', { password: 'tina-password' });
    await admin.grant('tina', 'readwrite', { table: OTHER });
    const tina = await dial({ user: 'tina', password: 'tina-password' });
    await tina.put(OTHER, 'k', 'mine');
    await rejectsWith(tina.put(T, 'k', 'not mine'), 'PERMISSION_DENIED');
    await rejectsWith(tina.get(T, 'seed'), 'PERMISSION_DENIED');
    await admin.grant('tina', 'none', { table: OTHER });
    await rejectsWith(tina.put(OTHER, 'k', 'again'), 'PERMISSION_DENIED');
    assert.equal(await admin.get(OTHER, 'k'), 'mine');
    await admin.removeUser('tina');
    await rejectsWith(tina.tables(), 'UNAUTHENTICATED');
    await rejectsWith(admin.removeUser('root'), 'INVALID_ARGUMENT');
  });

  it('client certificates: an expired one, one of another CA, one for no user, and one for another user are refused', async () => {
    const expired = await rejectsWith(connect(server.address, { ca, ...files('dave') }), 'UNAUTHENTICATED');
    assert.match(expired, /client certificate of dave was refused: CERT_HAS_EXPIRED \(valid from .+ to .+\)/);
    const foreign = {
      cert: readFileSync(join(dir, 'foreign', CERT_FILES.clientCert('carol'))),
      key: readFileSync(join(dir, 'foreign', CERT_FILES.clientKey('carol'))),
    };
    await rejectsWith(connect(server.address, { ca, ...foreign }), 'UNAUTHENTICATED');
    await rejectsWith(connect(server.address, { ca, ...files('nobody') }), 'UNAUTHENTICATED');
    await rejectsWith(connect(server.address, { ca, ...files('carol'), user: 'root' }), 'UNAUTHENTICATED');
    assert.equal(await admin.get(T, 'seed'), 1);
  });

  it('the commands refuse to load an expired client certificate, naming the file and its dates', () => {
    assert.throws(
      () => loadClientTls(dir, 'dave', new Date()),
      (error: unknown) =>
        isBasaltError(error, 'TLS_CONFIG_INVALID') &&
        error.message.includes(join(dir, CERT_FILES.clientCert('dave'))) &&
        /is expired \(valid from \d{4}-.* to \d{4}-/.test(error.message),
    );
    assert.equal(loadClientTls(dir, 'carol', new Date()).cert?.includes('BEGIN CERTIFICATE'), true);
  });

  it('renewed server material (another CA) is used by the next connection; an open one keeps working', async () => {
    const renewed = join(dir, 'renewed');
    await createCa({ certsDir: renewed });
    await createNodeCert('n1', { certsDir: renewed, hosts: ['127.0.0.1'] });
    const before = await dial({ user: 'root', password: ADMIN_PASSWORD });
    server.updateTls(loadPeerTls(renewed, 'n1', new Date()));
    try {
      // The old CA no longer verifies the server; the new one does.
      await assert.rejects(connect(server.address, { ca, user: 'root', password: ADMIN_PASSWORD }));
      const renewedCa = readFileSync(join(renewed, CERT_FILES.caCert));
      const after = await connect(server.address, { ca: renewedCa, user: 'root', password: ADMIN_PASSWORD });
      open.push(after);
      assert.equal(await after.get(T, 'seed'), 1);
      assert.equal(await before.get(T, 'seed'), 1, 'the connection made before the renewal goes on');
    } finally {
      server.updateTls(loadPeerTls(dir, 'n1', new Date()));
    }
  });

  it('a server certificate of another CA is refused by the client', async () => {
    const foreignCa = readFileSync(join(dir, 'foreign', CERT_FILES.caCert));
    await assert.rejects(connect(server.address, { ca: foreignCa, user: 'root', password: ADMIN_PASSWORD }));
  });

  it('garbage over TLS (hellos with odd credentials, malformed frames, denied requests) leaves the port serving', async () => {
    // A small seeded stream (mulberry32): the same frames on every run.
    let seed = 34;
    const next = (): number => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
    };
    const pick = <V>(values: readonly V[]): V => values[Math.floor(next() * values.length)]!;
    const hellos: unknown[] = [
      { magic: CLIENT_MAGIC, version: 1 },
      { magic: CLIENT_MAGIC, version: 1, user: 'alice', password: 'alice-password' },
      { magic: CLIENT_MAGIC, version: 1, user: 'alice', password: 7 },
      { magic: CLIENT_MAGIC, version: 1, password: 'no-user-at-all' },
      { magic: CLIENT_MAGIC, version: 1, user: 'x'.repeat(10_000), password: 'p' },
      { magic: CLIENT_MAGIC, version: 1, user: 'root', extra: true },
      'not a hello',
    ];
    const requests: unknown[] = [
      { id: 1, kind: 'put', table: T, key: 'fuzzed', value: 1 },
      { id: 2, kind: 'createUser', name: 'fuzzed', password: 'fuzzed-password', role: 'admin' },
      { id: 3, kind: 'grant', name: 'alice', role: 'admin' },
      { id: 4, kind: 'dropTable', name: T },
      { id: 5, kind: 'get', table: T, key: 'seed' },
      { id: 6, kind: 'users', extra: 1 },
      { id: 0, kind: 'put' },
    ];
    const frame = (payload: unknown): Buffer => Buffer.concat(encodeFrame(payload, LIMITS.frameBytesMax));
    let answers = 0;
    for (let c = 0; c < 60; c++) {
      const parts = [frame(pick(hellos))];
      for (let r = 0; r < 4; r++)
        parts.push(next() < 0.8 ? frame(pick(requests)) : Buffer.from([0xff, 1, 2, next() * 255]));
      await new Promise<void>((resolve) => {
        const socket = tlsConnect({ host: '127.0.0.1', port: server.port, ca, minVersion: 'TLSv1.3' });
        const decoder = new FrameDecoder(LIMITS.frameBytesMax);
        const done = (): void => {
          clearTimeout(safety);
          socket.destroy();
          resolve();
        };
        const safety = setTimeout(done, 3_000);
        socket.on('secureConnect', () => socket.write(Buffer.concat(parts)));
        socket.on('data', (chunk: Buffer) => {
          answers += decoder.push(chunk).frames.length;
        });
        socket.on('error', () => {});
        socket.on('close', done);
      });
    }
    assert.ok(answers >= 60, `only ${answers} frames answered`);
    // Nothing the anonymous or readonly connections sent took effect, and the port still serves.
    assert.equal(await admin.get(T, 'fuzzed'), undefined);
    assert.ok(!(await admin.users()).some((u) => u.name === 'fuzzed'));
    assert.equal((await admin.users()).find((u) => u.name === 'alice')?.role, 'readonly');
    assert.ok((await admin.tables()).some((t) => t.name === T));
    for (let i = 0; i < 100 && server.connections > open.filter((c) => !c.closed).length; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(server.connections, open.filter((c) => !c.closed).length, 'every fuzz connection is closed');
  });

  it('100 wrong passwords of one user from one address are slowed and counted; the right one waits too', async () => {
    await admin.createUser('victim', { password: 'victim-password' });
    const before = server.authCounters();
    const startedMs = Date.now();
    for (let i = 0; i < 100; i++) {
      await rejectsWith(
        connect(server.address, { ca, user: 'victim', password: `guess-${i}-guess` }),
        'UNAUTHENTICATED',
      );
    }
    const elapsedMs = Date.now() - startedMs;
    const counted = server.authCounters();
    assert.equal(counted.auth_failures_total - before.auth_failures_total, 100);
    const throttled = counted.auth_throttled_total - before.auth_throttled_total;
    // Only a handful of the guesses were checked at all: the rest were refused during the growing waits.
    assert.ok(throttled >= 80, `throttled ${throttled} of 100 (in ${elapsedMs} ms)`);
    const message = await rejectsWith(
      connect(server.address, { ca, user: 'victim', password: 'victim-password' }),
      'UNAUTHENTICATED',
    );
    assert.match(message, /too many failed logins/);
    // Another user from the same address is not slowed.
    await dial({ user: 'bob', password: 'bob-password-2' });
  });
});
