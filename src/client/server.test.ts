/**
 * The client server over a scripted backend (no cluster): backpressure and the in-flight bound, handle bookkeeping,
 * what a dropped connection rolls back (open transactions, a transaction whose begin completes after the drop) and
 * what it leaves alone (a commit under way), the hello timeout, results that cannot travel, `close()`; and the
 * request validation table of the protocol.
 */
import assert from 'node:assert/strict';
import { connect as netConnect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import type { TableDescriptor } from '../cluster/metastorage-state.js';
import type { BasaltError } from '../core/errors.js';
import { txId } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { RealTimers } from '../env/real-timers.js';
import { decode } from '../net/codec.js';
import { encodeFrame, FrameDecoder } from '../net/frame.js';
import type { Value } from './client.js';
import { CLIENT_MAGIC, CLIENT_PROTOCOL_VERSION, parseRequest } from './protocol.js';
import { connect } from './remote.js';
import { type BackendTransaction, type ClientBackend, ClientServer, type ClientServerOptions } from './server.js';

/** A promise with its settle functions, for scripting when the backend answers. */
function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

class ScriptedTx implements BackendTransaction {
  readonly readOnly = false;
  rolledBack = 0;
  committed = 0;
  commitGate: Promise<void> | undefined;
  constructor(readonly id: ReturnType<typeof txId>) {}
  get = async (): Promise<Value | undefined> => 'v';
  getAll = async (_t: string, keys: readonly string[]): Promise<(Value | undefined)[]> => keys.map(() => 1);
  put = async (): Promise<void> => {};
  putAll = async (): Promise<void> => {};
  remove = async (): Promise<void> => {};
  scan = async () => [];
  commit = async (): Promise<void> => {
    this.committed++;
    await this.commitGate;
  };
  rollback = async (): Promise<void> => {
    this.rolledBack++;
  };
}

class ScriptedBackend implements ClientBackend {
  readonly node = 'n1';
  readonly txs: ScriptedTx[] = [];
  beginGate: Promise<void> | undefined;
  getGate: Promise<Value | undefined> | undefined;
  async begin(): Promise<BackendTransaction> {
    await this.beginGate;
    const tx = new ScriptedTx(txId(`tx${this.txs.length + 1}`));
    this.txs.push(tx);
    return tx;
  }
  transaction<T>(fn: (tx: BackendTransaction) => Promise<T>): Promise<T> {
    return fn(new ScriptedTx(txId('implicit')));
  }
  async get(_table: string, key: string): Promise<Value | undefined> {
    if (key === 'function') return (() => 1) as never;
    if (key === 'huge') return 'x'.repeat(2_000);
    return this.getGate ?? key;
  }
  put = async (): Promise<void> => {};
  remove = async (): Promise<void> => {};
  createTable = async (): Promise<TableDescriptor> => ({ name: 't', id: 1, partitions: 1, replicas: 1 });
  dropTable = async (): Promise<void> => {};
  tables = (): TableDescriptor[] => [];
}

function startServer(backend: ClientBackend, extra: Partial<ClientServerOptions> = {}): Promise<ClientServer> {
  return ClientServer.start({ host: '127.0.0.1', port: 0, client: backend, timers: new RealTimers(), ...extra });
}

/** A raw protocol socket: writes frames (several in one write if asked), collects decoded replies. */
class Raw {
  readonly replies: Record<string, unknown>[] = [];
  readonly closed: Promise<void>;
  private readonly socket: Socket;
  private readonly decoder = new FrameDecoder(LIMITS.frameBytesMax);

  constructor(port: number, hello = true) {
    this.socket = netConnect({ host: '127.0.0.1', port });
    this.socket.on('data', (chunk: Buffer) => {
      for (const f of this.decoder.push(chunk).frames) this.replies.push(decode(f) as Record<string, unknown>);
    });
    this.socket.on('error', () => {});
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
    if (hello) this.send({ magic: CLIENT_MAGIC, version: CLIENT_PROTOCOL_VERSION });
  }

  send(...payloads: unknown[]): void {
    this.socket.write(Buffer.concat(payloads.flatMap((p) => [...encodeFrame(p, LIMITS.frameBytesMax)])));
  }

  async reply(id: number): Promise<Record<string, unknown>> {
    for (let i = 0; i < 300; i++) {
      const found = this.replies.find((r) => r['id'] === id);
      if (found !== undefined) return found;
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.fail(`no reply to request ${id}; got ${JSON.stringify(this.replies)}`);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

const codeOf = (reply: Record<string, unknown>): unknown => (reply['error'] as { code?: unknown } | undefined)?.code;

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 300 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(condition());
}

describe('client server', () => {
  it('past requestsInFlightMax queues (same bound), then answers OVERLOADED; reading pauses and resumes', async () => {
    const backend = new ScriptedBackend();
    const gate = deferred<Value | undefined>();
    backend.getGate = gate.promise;
    const server = await startServer(backend, { requestsInFlightMax: 2 });
    const raw = new Raw(server.port);
    try {
      const get = (id: number) => ({ id, kind: 'get', table: 't', key: `k${id}` });
      raw.send(get(1), get(2), get(3), get(4), get(5), get(6));
      assert.equal(codeOf(await raw.reply(5)), 'OVERLOADED');
      assert.equal(codeOf(await raw.reply(6)), 'OVERLOADED');
      // The paused socket does not read request 7 until the requests in flight and queued finish.
      raw.send(get(7));
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(
        raw.replies.map((r) => r['id']),
        [undefined, 5, 6],
        'only the hello and the two refusals so far',
      );
      backend.getGate = undefined;
      gate.resolve('late');
      assert.deepEqual((await raw.reply(1))['result'], { value: 'late' });
      assert.deepEqual((await raw.reply(2))['result'], { value: 'late' });
      assert.deepEqual((await raw.reply(3))['result'], { value: 'k3' });
      assert.deepEqual((await raw.reply(4))['result'], { value: 'k4' });
      assert.deepEqual((await raw.reply(7))['result'], { value: 'k7' });
    } finally {
      raw.destroy();
      await server.close();
    }
  });

  it('a remote client keeps to the window the server announces: 500 concurrent calls all succeed', async () => {
    const backend = new ScriptedBackend();
    const server = await startServer(backend, { requestsInFlightMax: 4 });
    const client = await connect(server.address);
    try {
      const keys = Array.from({ length: 500 }, (_, i) => `k${i}`);
      assert.deepEqual(await Promise.all(keys.map((k) => client.get('t', k))), keys);
    } finally {
      await client.close();
      await server.close();
    }
  });

  it('finished handles answer TX_ALREADY_FINISHED, never-begun ones INVALID_ARGUMENT; rollback of a finished one is a no-op', async () => {
    const server = await startServer(new ScriptedBackend());
    const raw = new Raw(server.port);
    try {
      raw.send({ id: 1, kind: 'begin' });
      const begun = (await raw.reply(1))['result'] as { tx: number; txId: string; readOnly: boolean };
      assert.deepEqual(begun, { tx: 1, txId: 'tx1', readOnly: false });
      raw.send({ id: 2, kind: 'commit', tx: 1 }, { id: 3, kind: 'get', tx: 1, table: 't', key: 'k' });
      assert.deepEqual((await raw.reply(2))['result'], {});
      assert.equal(codeOf(await raw.reply(3)), 'TX_ALREADY_FINISHED');
      raw.send({ id: 4, kind: 'rollback', tx: 1 }, { id: 5, kind: 'get', tx: 9, table: 't', key: 'k' });
      assert.deepEqual((await raw.reply(4))['result'], {});
      assert.equal(codeOf(await raw.reply(5)), 'INVALID_ARGUMENT');
    } finally {
      raw.destroy();
      await server.close();
    }
  });

  it('a dropped connection rolls back open transactions and one whose begin completes later, not a commit under way', async () => {
    const backend = new ScriptedBackend();
    const server = await startServer(backend);
    const raw = new Raw(server.port);
    raw.send({ id: 1, kind: 'begin' }, { id: 2, kind: 'begin' });
    await raw.reply(2);
    const [open, committing] = backend.txs as [ScriptedTx, ScriptedTx];
    const commitGate = deferred<void>();
    committing.commitGate = commitGate.promise;
    const beginGate = deferred<void>();
    backend.beginGate = beginGate.promise;
    raw.send({ id: 3, kind: 'commit', tx: 2 }, { id: 4, kind: 'begin' });
    await until(() => committing.committed === 1);
    raw.destroy();
    await until(() => server.connections === 0);
    assert.equal(open.rolledBack, 1);
    assert.equal(committing.rolledBack, 0, 'a commit under way is left to finish');
    beginGate.resolve();
    await until(() => backend.txs.length === 3);
    await until(() => backend.txs[2]!.rolledBack === 1);
    commitGate.resolve();
    assert.equal(server.openTransactions, 0);
    await server.close();
  });

  it('close() stops accepting, rolls back open transactions and closes connections', async () => {
    const backend = new ScriptedBackend();
    const server = await startServer(backend);
    const client = await connect(server.address);
    const tx = await client.begin();
    assert.equal(tx.id, 'tx1');
    await server.close();
    assert.equal(backend.txs[0]!.rolledBack, 1);
    await until(() => client.closed);
    await assert.rejects(connect(server.address, { connectTimeoutMs: 500 }), (e: BasaltError) => e.retryable);
  });

  it('closes a connection that sends no hello within the timeout, answering HANDSHAKE_FAILED', async () => {
    const server = await startServer(new ScriptedBackend(), { handshakeTimeoutMs: 50 });
    const raw = new Raw(server.port, false);
    await raw.closed;
    assert.equal(codeOf(raw.replies[0] ?? {}), 'HANDSHAKE_FAILED');
    await server.close();
  });

  it('a result that cannot travel fails that request only', async () => {
    const server = await startServer(new ScriptedBackend(), { frameBytesMax: 1_000 });
    const client = await connect(server.address);
    try {
      await assert.rejects(client.get('t', 'function'), (e: BasaltError) => e.code === 'MALFORMED_FRAME');
      await assert.rejects(client.get('t', 'huge'), (e: BasaltError) => e.code === 'FRAME_TOO_LARGE');
      assert.equal(await client.get('t', 'fine'), 'fine');
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe('client protocol request validation', () => {
  const cases: [string, unknown, string | undefined][] = [
    ['a valid get', { id: 1, kind: 'get', table: 't', key: 'k' }, undefined],
    ['a valid implicit put of null', { id: 1, kind: 'put', table: 't', key: 'k', value: null }, undefined],
    ['a valid RO begin at a timestamp', { id: 1, kind: 'begin', readOnly: true, readTimestamp: 5n }, undefined],
    [
      'a valid scan',
      { id: 1, kind: 'scan', tx: 2, table: 't', range: { start: 'a' }, options: { limit: 3 } },
      undefined,
    ],
    [
      'a scan of one partition',
      { id: 1, kind: 'scan', tx: 2, table: 't', range: {}, options: { limit: 3, partition: 0 } },
      undefined,
    ],
    [
      'a scan of a negative partition',
      { id: 1, kind: 'scan', tx: 2, table: 't', range: {}, options: { partition: -1 } },
      'INVALID_ARGUMENT',
    ],
    [
      'a get forUpdate in a tx',
      { id: 1, kind: 'get', tx: 2, table: 't', key: 'k', options: { forUpdate: true } },
      undefined,
    ],
    [
      'a getAll forUpdate',
      { id: 1, kind: 'getAll', table: 't', keys: ['k'], options: { forUpdate: false } },
      undefined,
    ],
    [
      'a misspelt read option',
      { id: 1, kind: 'get', table: 't', key: 'k', options: { forupdate: true } },
      'INVALID_ARGUMENT',
    ],
    [
      'forUpdate not a boolean',
      { id: 1, kind: 'getAll', table: 't', keys: [], options: { forUpdate: 1 } },
      'INVALID_ARGUMENT',
    ],
    ['not an object', [1, 2], 'MALFORMED_FRAME'],
    ['no id', { kind: 'tables' }, 'MALFORMED_FRAME'],
    ['id 0', { id: 0, kind: 'tables' }, 'MALFORMED_FRAME'],
    ['fractional id', { id: 1.5, kind: 'tables' }, 'MALFORMED_FRAME'],
    ['unknown kind', { id: 1, kind: 'drop everything' }, 'UNKNOWN_MESSAGE'],
    ['inherited kind name', { id: 1, kind: 'toString' }, 'UNKNOWN_MESSAGE'],
    ['unknown field', { id: 1, kind: 'tables', admin: true }, 'INVALID_ARGUMENT'],
    ['missing field', { id: 1, kind: 'get', table: 't' }, 'INVALID_ARGUMENT'],
    ['key of the wrong type', { id: 1, kind: 'get', table: 't', key: 7 }, 'INVALID_ARGUMENT'],
    ['handle 0', { id: 1, kind: 'commit', tx: 0 }, 'INVALID_ARGUMENT'],
    ['a commit naming no transaction', { id: 1, kind: 'commit' }, 'INVALID_ARGUMENT'],
    ['a commit beginning its transaction', { id: 1, kind: 'commit', begin: {}, writes: [] }, undefined],
    [
      'a read beginning its transaction',
      { id: 1, kind: 'get', table: 't', key: 'k', begin: { timeoutMs: 5 } },
      undefined,
    ],
    ['a read naming and beginning', { id: 1, kind: 'get', table: 't', key: 'k', tx: 1, begin: {} }, 'INVALID_ARGUMENT'],
    [
      'a read-only piggybacked begin',
      { id: 1, kind: 'getAll', table: 't', keys: [], begin: { readOnly: true } },
      'INVALID_ARGUMENT',
    ],
    ['a malformed retryOf', { id: 1, kind: 'get', table: 't', key: 'k', begin: { retryOf: 'x' } }, 'INVALID_ARGUMENT'],
    ['a number timestamp', { id: 1, kind: 'begin', readTimestamp: 5 }, 'INVALID_ARGUMENT'],
    ['keys with a number', { id: 1, kind: 'getAll', table: 't', keys: ['a', 1] }, 'INVALID_ARGUMENT'],
    [
      'entry with an extra field',
      { id: 1, kind: 'putAll', table: 't', entries: [{ key: 'a', value: 1, x: 1 }] },
      'INVALID_ARGUMENT',
    ],
    [
      'range mixing prefix and start',
      { id: 1, kind: 'scan', table: 't', range: { prefix: 'a', start: 'b' } },
      'INVALID_ARGUMENT',
    ],
    [
      'table options with a string',
      { id: 1, kind: 'createTable', name: 'x', options: { partitions: '1', replicas: 1 } },
      'INVALID_ARGUMENT',
    ],
  ];
  for (const [what, request, code] of cases) {
    it(`${what}: ${code ?? 'accepted'}`, () => {
      const parsed = parseRequest(request);
      if (code === undefined) assert.ok(parsed.ok, parsed.ok ? '' : parsed.error.message);
      else {
        assert.ok(!parsed.ok);
        assert.equal(parsed.error.code, code);
        assert.equal(parsed.id === undefined, code === 'MALFORMED_FRAME', 'only an unattributable frame has no id');
      }
    });
  }
});
