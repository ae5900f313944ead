/**
 * The TCP client against a real-time 3-node in-memory cluster with a client port on n1: the `Client` API over the
 * wire (transactions across partitions, rollback, retries, implicit operations, tables), coded errors rethrown with
 * their code and `retryable`, timeouts and lost connections, a dropped connection rolling back its open transaction,
 * and the protocol's refusals (hello version, malformed requests) seen from a raw socket.
 */
import assert from 'node:assert/strict';
import { connect as netConnect, type Socket } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { BasaltError, isBasaltError } from '../core/errors.js';
import type { HybridTimestamp, TxId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { RealTimers } from '../env/real-timers.js';
import type { Cluster } from '../harness/cluster.js';
import { type Client, startCluster } from '../index.js';
import { decode } from '../net/codec.js';
import { encodeFrame, FrameDecoder } from '../net/frame.js';
import { beginTimestampOf, timeoutOf, txDeadline } from '../tx/core/tx-id.js';
import { startClientServer } from './cluster-server.js';
import { nodeClient } from './node-client.js';
import { CLIENT_MAGIC } from './protocol.js';
import { connect, type RemoteClient } from './remote.js';
import { ClientServer } from './server.js';

const T = 'accounts';

async function rejectsWith(promise: Promise<unknown>, code: string, retryable?: boolean): Promise<BasaltError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(isBasaltError(error), `expected a BasaltError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    if (retryable !== undefined) assert.equal(error.retryable, retryable);
    return error;
  }
  assert.fail(`expected ${code}, the call succeeded`);
}

/** A raw client socket that collects decoded frames. */
class RawSocket {
  readonly frames: unknown[] = [];
  readonly closed: Promise<void>;
  private readonly decoder = new FrameDecoder(LIMITS.frameBytesMax);
  private readonly socket: Socket;

  constructor(port: number) {
    this.socket = netConnect({ host: '127.0.0.1', port });
    this.socket.on('data', (chunk: Buffer) => {
      for (const frame of this.decoder.push(chunk).frames) this.frames.push(decode(frame));
    });
    this.socket.on('error', () => {});
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  send(payload: unknown): void {
    this.socket.write(Buffer.concat(encodeFrame(payload, LIMITS.frameBytesMax)));
  }

  async waitFrames(n: number): Promise<unknown[]> {
    for (let i = 0; i < 200 && this.frames.length < n; i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(this.frames.length >= n, `expected ${n} frames, got ${this.frames.length}`);
    return this.frames;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

describe('remote client over TCP (3 nodes, client port on n1)', () => {
  let cluster: Cluster<Client>;
  let server: ClientServer;
  let client: RemoteClient;

  before(async () => {
    cluster = await startCluster({ nodes: 3 });
    server = await startClientServer(cluster, 'n1');
    client = await connect(server.address);
    await client.createTable(T, { partitions: 4, replicas: 3 });
  });

  after(async () => {
    await client.close();
    await server.close();
    await cluster.stop();
  });

  afterEach(async () => {
    // Every test finishes or drops its transactions: none stays open on the server.
    for (let i = 0; i < 100 && server.openTransactions > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(server.openTransactions, 0);
  });

  it('names its node and lists tables (tables() is a Promise)', async () => {
    assert.equal(client.node, 'n1');
    const tables = await client.tables();
    assert.deepEqual(
      tables.map((t) => [t.name, t.partitions, t.replicas]),
      [[T, 4, 3]],
    );
  });

  it('commits a read-write transaction across partitions; another client and the embedded one read it', async () => {
    const keys = ['a', 'b', 'c', 'd', 'e', 'f'];
    assert.ok(new Set(keys.map((k) => cluster.placement(T, k).partition)).size > 1, 'keys span partitions');
    const tx = await client.begin();
    assert.equal(tx.readOnly, false);
    assert.equal(typeof tx.id, 'string');
    for (const k of keys) await tx.put(T, k, { k, n: [1, 2.5, -3] });
    await tx.put(T, 'bytes', new Uint8Array([1, 2, 3]));
    assert.deepEqual(await tx.get(T, 'c'), { k: 'c', n: [1, 2.5, -3] });
    await tx.putAll(T, [{ key: 'g', value: 7 }]);
    await tx.remove(T, 'f');
    await tx.commit();
    assert.equal(cluster.node('n1').txState(tx.id)?.state, 'COMMITTED');

    const other = await connect(server.address);
    try {
      const values = await other.transaction((t) => t.getAll(T, ['a', 'f', 'g', 'zz', 'bytes']));
      assert.deepEqual(values, [{ k: 'a', n: [1, 2.5, -3] }, undefined, 7, undefined, Buffer.from([1, 2, 3])]);
      const scanned = await other.transaction((t) => t.scan(T, { start: 'a', end: 'c' }));
      assert.deepEqual(
        scanned.map((e) => e.key),
        ['a', 'b', 'bytes'],
      );
    } finally {
      await other.close();
    }
    assert.deepEqual(await cluster.client('n3').get(T, 'e'), { k: 'e', n: [1, 2.5, -3] });
  });

  it('rolls back: the writes are gone and a rollback after finish is a no-op', async () => {
    await client.put(T, 'r', 'before');
    const tx = await client.begin();
    await tx.put(T, 'r', 'during');
    await tx.rollback();
    await tx.rollback();
    assert.equal(await client.get(T, 'r'), 'before');
  });

  it('implicit put, get and remove', async () => {
    await client.put(T, 'implicit', [1, 'two', null]);
    assert.deepEqual(await client.get(T, 'implicit'), [1, 'two', null]);
    await client.remove(T, 'implicit');
    assert.equal(await client.get(T, 'implicit'), undefined);
  });

  it('transaction(fn) retries retryable failures only, and concurrent increments all land', async () => {
    let attempts = 0;
    const result = await client.transaction(
      async (tx) => {
        attempts++;
        await tx.put(T, 'retry', attempts);
        if (attempts === 1) throw new BasaltError('TX_LOCK_CONFLICT', 'injected');
        return 'done';
      },
      { backoffMsMin: 1, backoffMsMax: 5 },
    );
    assert.equal(result, 'done');
    assert.equal(attempts, 2);
    assert.equal(await client.get(T, 'retry'), 2);

    // The retry kept the first attempt's age (wait-die), with a deadline of its own.
    const ids: TxId[] = [];
    await client.transaction(
      async (tx) => {
        await tx.get(T, 'retry');
        ids.push(tx.id);
        if (ids.length === 1) throw new BasaltError('TX_LOCK_CONFLICT', 'injected');
      },
      { backoffMsMin: 1, backoffMsMax: 5 },
    );
    assert.equal(ids.length, 2);
    assert.equal(beginTimestampOf(ids[1]!), beginTimestampOf(ids[0]!));
    assert.ok(txDeadline(ids[1]!, 30_000) > txDeadline(ids[0]!, 30_000));
    await rejectsWith(client.begin({ retryOf: 'not-an-id' as TxId }), 'INVALID_ARGUMENT');

    let tries = 0;
    await rejectsWith(
      client.transaction(async () => {
        tries++;
        throw new BasaltError('INVALID_ARGUMENT', 'not retryable');
      }),
      'INVALID_ARGUMENT',
    );
    assert.equal(tries, 1);

    await client.put(T, 'counter', 0);
    const second = await connect(server.address);
    try {
      await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          (i % 2 === 0 ? client : second).transaction(
            async (tx) => {
              const v = (await tx.get(T, 'counter')) as number;
              await tx.put(T, 'counter', v + 1);
            },
            { retries: 50, backoffMsMin: 2, backoffMsMax: 50 },
          ),
        ),
      );
    } finally {
      await second.close();
    }
    assert.equal(await client.get(T, 'counter'), 6);
  });

  it('rethrows coded errors with their code and retryable flag', async () => {
    const tx = await client.begin();
    await tx.put(T, 'x', 1);
    await tx.commit();
    await rejectsWith(tx.get(T, 'x'), 'TX_ALREADY_FINISHED', false);
    await rejectsWith(client.get('no-such-table', 'k'), 'UNKNOWN_TABLE', false);
    await rejectsWith(client.put(T, 'big', 'x'.repeat(LIMITS.valueBytesMax + 1)), 'INVALID_ARGUMENT', false);
    await rejectsWith(client.put(T, 'f', (() => 1) as never), 'INVALID_ARGUMENT', false);
    await rejectsWith(client.createTable(T, { partitions: 1, replicas: 1 }), 'ALREADY_EXISTS', false);
    // The connection survives every one of them.
    assert.equal(await client.get(T, 'x'), 1);
  });

  it('buffered writes travel with the commit: read back in the tx, copied at put, errors reported by the commit', async () => {
    const [k1, k2] = keysNotOn(cluster, 'n1');
    const confirms = cluster.network.count({ kind: 'WriteConfirmRequest' });
    const rw = cluster.network.count({ kind: 'ReadWriteRequest' });
    const tx = await client.begin();
    const value = { n: 1 };
    await tx.put(T, k1, value);
    value.n = 2; // changed after the put: the commit writes what was put
    await tx.putAll(T, [{ key: k2, value: 'two' }]);
    assert.equal(cluster.network.count({ kind: 'ReadWriteRequest' }), rw, 'nothing sent before the commit');
    await tx.remove(T, k2);
    await tx.put(T, k2, 'again');
    await tx.commit();
    assert.equal(cluster.network.count({ kind: 'WriteConfirmRequest' }), confirms, 'no confirmation round');
    assert.deepEqual(await client.get(T, k1), { n: 1 });
    assert.equal(await client.get(T, k2), 'again', 'the last write of a key wins');
    await rejectsWith(tx.put(T, k1, 3), 'TX_ALREADY_FINISHED', false);

    const reader = await client.begin();
    await reader.put(T, k1, { n: 3 });
    await reader.remove(T, k2);
    assert.deepEqual(await reader.getAll(T, [k1, k2]), [{ n: 3 }, undefined], 'a read sees the writes kept before it');
    await reader.rollback();
    assert.deepEqual(await client.get(T, k1), { n: 1 });

    const invalid = await client.begin();
    await rejectsWith(invalid.put(T, k1, Number.NaN), 'INVALID_ARGUMENT', false);
    await invalid.rollback();
    const unknown = await client.begin();
    await unknown.put(T, k1, 'lost');
    await unknown.put('no-such-table', 'k', 1);
    await assert.rejects(unknown.commit(), (e: unknown) => isBasaltError(e) && e.code !== 'TX_OUTCOME_UNKNOWN');
    assert.deepEqual(await client.get(T, k1), { n: 1 }, 'a commit whose write failed wrote nothing');
    assert.equal(cluster.node('n1').txState(unknown.id)?.state ?? 'ABORTED', 'ABORTED');
  });

  it('a dropped connection rolls back its open transaction: its locks are released', async () => {
    // Writes sent at once, so that the put takes its lock before the connection drops.
    const doomed = await connect(server.address, { bufferWrites: false });
    const tx = await doomed.begin();
    await tx.put(T, 'locked', 'by the doomed client');
    assert.equal(server.openTransactions, 1);
    await doomed.close();
    await rejectsWith(tx.get(T, 'locked'), 'CONNECTION_CLOSED', true);
    const started = Date.now();
    await client.transaction((t) => t.put(T, 'locked', 'by another client'), { backoffMsMin: 5, backoffMsMax: 100 });
    assert.ok(Date.now() - started < 5_000, 'the lock was released long before the tx timeout');
    assert.equal(await client.get(T, 'locked'), 'by another client');
    assert.equal(server.openTransactions, 0);
    assert.equal(cluster.node('n1').txState(tx.id)?.state, 'ABORTED');
  });

  it('a commit whose response is lost is TX_OUTCOME_UNKNOWN; a lost read is CONNECTION_CLOSED or TIMEOUT', async () => {
    // Keys whose primary is another node, so that the finish request crosses the (filtered) network.
    const [k1, k2, k3] = keysNotOn(cluster, 'n1');
    const lost = await connect(server.address);
    const tx = await lost.begin();
    await tx.put(T, k1, 1);
    const held = cluster.network.hold({ kind: 'TxFinishRequest', from: 'n1' });
    try {
      const commit = rejectsWith(tx.commit(), 'TX_OUTCOME_UNKNOWN', false);
      await new Promise((r) => setTimeout(r, 50));
      await lost.close();
      await commit;
      await rejectsWith(lost.get(T, 'unknown'), 'CONNECTION_CLOSED', true);
    } finally {
      held.release();
    }

    const impatient = await connect(server.address, { timeoutMs: 1_000 });
    try {
      const slow = await impatient.begin();
      const holdFinish = cluster.network.hold({ kind: 'TxFinishRequest', from: 'n1' });
      try {
        await slow.put(T, k2, 1);
        await rejectsWith(slow.commit(), 'TX_OUTCOME_UNKNOWN', false);
      } finally {
        holdFinish.release();
      }
      const reader = await impatient.begin();
      const holdReads = cluster.network.hold({ kind: 'ReadWriteRequest', from: 'n1' });
      try {
        await rejectsWith(reader.get(T, k3), 'TIMEOUT', true);
      } finally {
        holdReads.release();
      }
      await reader.rollback();
    } finally {
      await impatient.close();
    }
  });

  /** The read-only checks, against one remote client; `key` is written by it first. */
  async function readOnlyChecks(c: RemoteClient, key: string): Promise<void> {
    await c.put(T, key, 1);
    const ro = await c.begin({ readOnly: true });
    assert.equal(ro.readOnly, true);
    assert.equal(typeof ro.readTimestamp, 'bigint');
    await c.put(T, key, 2);
    assert.equal(await ro.get(T, key), 1, 'the snapshot predates the second write');
    await rejectsWith(ro.put(T, key, 3), 'TX_READ_ONLY', false);
    await rejectsWith(ro.get(T, key, { forUpdate: true }), 'TX_READ_ONLY', false);
    await ro.commit();
    assert.equal(await c.get(T, key), 2);
    const at = await c.begin({ readOnly: true, readTimestamp: ro.readTimestamp as HybridTimestamp });
    assert.equal(at.readTimestamp, ro.readTimestamp, 'bigint timestamps travel both ways');
    assert.equal(await at.get(T, key), 1);
    await at.rollback();
    const read = await c.transaction((tx) => tx.getAll(T, [key, 'none']), { readOnly: true, stalenessMs: 0 });
    assert.deepEqual(read, [2, undefined]);
    await rejectsWith(c.begin({ readTimestamp: 5n as HybridTimestamp }), 'INVALID_ARGUMENT', false);
  }

  it('a read forUpdate travels over the wire: it holds the row X-locked until commit; a plain read does not', async () => {
    const key = 'for-update';
    await client.put(T, key, 10);
    const embedded = cluster.client('n1'); // same coordinator as the server's: its txs begin strictly younger
    for (const forUpdate of [true, false]) {
      const tx = await client.begin();
      assert.equal(await tx.getAll(T, [key], { forUpdate }).then(([v]) => v), 10);
      const younger = await embedded.begin();
      if (forUpdate) await rejectsWith(younger.get(T, key), 'TX_LOCK_CONFLICT', true);
      else assert.equal(await younger.get(T, key), 10, 'S locks are shared');
      await younger.rollback();
      await tx.put(T, key, (await tx.get(T, key, { forUpdate })) as number);
      await tx.commit();
    }
    const tx = await client.begin();
    await rejectsWith(tx.get(T, key, { forUpdate: 1 } as never), 'INVALID_ARGUMENT', false);
    await rejectsWith(tx.getAll(T, [key], { lock: true } as never), 'INVALID_ARGUMENT', false);
    await tx.rollback();
  });

  it('read-only transactions over the wire (embedded backend): a snapshot at readTimestamp, writes refused', async () => {
    await readOnlyChecks(client, 'ro-embedded');
  });

  /** A tx's own timeout over the wire: carried into its id; out of range or on a read-only tx refused. */
  async function timeoutChecks(c: RemoteClient, key: string): Promise<void> {
    const tx = await c.begin({ timeoutMs: 120_000 });
    assert.equal(timeoutOf(tx.id), 120_000);
    await tx.put(T, key, 1);
    await tx.commit();
    // A lazy attempt (the default) has its id once its first operation began it, with the timeout riding along.
    const id = await c.transaction(
      async (t) => {
        await rejectsWith(
          Promise.resolve().then(() => t.id),
          'TX_NOT_BEGUN',
          false,
        );
        await t.get(T, key);
        return t.id;
      },
      { timeoutMs: 45_000 },
    );
    assert.equal(timeoutOf(id), 45_000);
    const eager = await c.transaction(async (t) => t.id, { timeoutMs: 50_000, lazy: false });
    assert.equal(timeoutOf(eager), 50_000);
    const plain = await c.begin();
    assert.equal(timeoutOf(plain.id), undefined, 'without the option: the cluster-wide default');
    await plain.rollback();
    for (const timeoutMs of [0, 1.5, LIMITS.txTimeoutMsMax + 1]) {
      await rejectsWith(c.begin({ timeoutMs }), 'INVALID_ARGUMENT', false);
    }
    await rejectsWith(c.begin({ readOnly: true, timeoutMs: 1_000 }), 'INVALID_ARGUMENT', false);
  }

  it('a transaction timeout travels over the wire (embedded and node-bound backends)', async () => {
    await timeoutChecks(client, 'timeout-embedded');
    const node = cluster.basaltNode('n2');
    assert.ok(node !== undefined);
    const server = await ClientServer.start({
      host: '127.0.0.1',
      port: 0,
      client: nodeClient(node),
      timers: new RealTimers(),
    });
    const c = await connect(server.address);
    try {
      await timeoutChecks(c, 'timeout-node');
    } finally {
      await c.close();
      await server.close();
    }
  });

  it('read-only transactions over the wire (node-bound backend, as in basalt node)', async () => {
    const node = cluster.basaltNode('n2');
    assert.ok(node !== undefined);
    const roServer = await ClientServer.start({
      host: '127.0.0.1',
      port: 0,
      client: nodeClient(node),
      timers: new RealTimers(),
    });
    const c = await connect(roServer.address);
    try {
      assert.equal(c.node, 'n2');
      await readOnlyChecks(c, 'ro-node');
    } finally {
      await c.close();
      await roServer.close();
    }
  });

  it('refuses a hello of another protocol version with a coded error and closes', async () => {
    const raw = new RawSocket(server.port);
    raw.send({ magic: CLIENT_MAGIC, version: 99 });
    const [hello] = await raw.waitFrames(1);
    assert.equal((hello as { error: { code: string } }).error.code, 'HANDSHAKE_FAILED');
    await raw.closed;

    const wrongMagic = new RawSocket(server.port);
    wrongMagic.send({ magic: 'basalt', protocolVersion: 1, name: 'n9', id: 'x' });
    await wrongMagic.waitFrames(1);
    await wrongMagic.closed;
  });

  it('answers malformed requests with coded errors and keeps the connection; an unattributable frame closes it', async () => {
    const raw = new RawSocket(server.port);
    try {
      raw.send({ magic: CLIENT_MAGIC, version: 1 });
      raw.send({ id: 1, kind: 'get', table: T, key: 5 });
      raw.send({ id: 2, kind: 'get', table: T, key: 'k', extra: true });
      raw.send({ id: 3, kind: 'explode' });
      raw.send({ id: 4, kind: 'commit', tx: 77 });
      raw.send({ id: 5, kind: 'begin', readTimestamp: 5 });
      raw.send({ id: 6, kind: 'tables' });
      raw.send({ id: 7, kind: 'get', table: T, key: 'k', options: { forUpdate: true } });
      raw.send({ id: 8, kind: 'getAll', table: T, keys: ['k'], options: { forUpdate: 'yes' } });
      const frames = (await raw.waitFrames(9)) as { id?: number; error?: { code: string }; result?: unknown }[];
      const byId = new Map(frames.slice(1).map((f) => [f.id, f]));
      assert.equal(byId.get(1)?.error?.code, 'INVALID_ARGUMENT');
      assert.equal(byId.get(2)?.error?.code, 'INVALID_ARGUMENT');
      assert.equal(byId.get(3)?.error?.code, 'UNKNOWN_MESSAGE');
      assert.equal(byId.get(4)?.error?.code, 'INVALID_ARGUMENT');
      assert.equal(byId.get(5)?.error?.code, 'INVALID_ARGUMENT');
      assert.ok(Array.isArray((byId.get(6)?.result as { tables?: unknown[] } | undefined)?.tables));
      assert.equal(byId.get(7)?.error?.code, 'INVALID_ARGUMENT', 'forUpdate needs a transaction');
      assert.equal(byId.get(8)?.error?.code, 'INVALID_ARGUMENT');
      raw.send([1, 2, 3]);
      const closing = (await raw.waitFrames(10))[9] as { id: number; error: { code: string } };
      assert.deepEqual([closing.id, closing.error.code], [0, 'MALFORMED_FRAME']);
      await raw.closed;
    } finally {
      raw.destroy();
    }
  });

  it('bounds open transactions per connection (OVERLOADED past the limit)', async () => {
    const small = await startClientServerWithLimits(cluster, 2);
    const c = await connect(small.address);
    try {
      const a = await c.begin();
      await c.begin();
      await rejectsWith(c.begin(), 'OVERLOADED', true);
      await a.rollback();
      const again = await c.begin();
      await again.rollback();
    } finally {
      await c.close();
      await small.close();
    }
    assert.equal(small.openTransactions, 0);
  });
});

/** Three keys whose partitions' primary is not `node`. */
function keysNotOn(cluster: Cluster<Client>, node: string): [string, string, string] {
  const keys: string[] = [];
  for (let i = 0; keys.length < 3; i++) {
    if (cluster.placement(T, `away-${i}`).primary !== node) keys.push(`away-${i}`);
  }
  return keys as [string, string, string];
}

function startClientServerWithLimits(cluster: Cluster<Client>, txHandlesMax: number): Promise<ClientServer> {
  return ClientServer.start({
    host: '127.0.0.1',
    port: 0,
    client: cluster.client('n2'),
    timers: new RealTimers(),
    txHandlesMax,
  });
}
