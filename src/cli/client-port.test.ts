/**
 * The client port of the real commands, as a user meets it: `basalt start` prints `connect('host:port')`; a program
 * connects, writes, the cluster stops and starts again on its data, and the writes read back. `basalt node
 * --client-port` serves clients of a one-node cluster the same way.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '../client/remote.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

class Basalt {
  output = '';
  readonly exited: Promise<number | null>;
  private readonly child: ChildProcess;

  constructor(args: readonly string[], cwd?: string) {
    this.child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], ...(cwd && { cwd }) });
    const append = (chunk: Buffer): void => {
      this.output += chunk.toString();
    };
    this.child.stdout!.on('data', append);
    this.child.stderr!.on('data', append);
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  /** The address of the printed `connect('...')` line, once the ready line is out too. */
  async clientAddress(timeoutMs = 30_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const address = /connect\('([^']+)'\)/.exec(this.output)?.[1];
      if (address !== undefined && /ready/.test(this.output)) return address;
      if (Date.now() > deadline) throw new Error(`no client port and ready line; output:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async stop(): Promise<void> {
    this.child.kill('SIGINT');
    const code = await this.exited;
    assert.equal(code, 0, this.output);
  }

  kill(): void {
    this.child.kill('SIGKILL');
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  assert.ok(typeof address === 'object' && address !== null);
  return address.port;
}

test('basalt start as npm start runs it (./data, table demo): a client writes, the cluster restarts, the writes read back', async () => {
  // The working directory of `npm start`, with its relative ./data; only the ports are ephemeral here.
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-client-port-'));
  const args = ['start', '--data-dir', './data', '--table', 'demo:8:3', '--client-port', '0', '--metrics-port', '0'];
  let run = new Basalt(args, dataDir);
  try {
    const address = await run.clientAddress();
    assert.match(address, /^127\.0\.0\.1:\d+$/);
    const client = await connect(address);
    assert.equal(client.node, 'n1');
    assert.deepEqual(
      (await client.tables()).map((t) => t.name),
      ['demo'],
    );
    await client.transaction(
      async (tx) => {
        await tx.put('demo', 'alice', { balance: 100 });
        await tx.put('demo', 'bob', { balance: 50 });
      },
      { retries: 20 },
    );
    await client.put('demo', 'carol', 7);
    await client.close();
    await run.stop();
    assert.ok(existsSync(join(dataDir, 'data', 'n1')), 'LMDB under ./data of the working directory');

    run = new Basalt(args, dataDir);
    const again = await connect(await run.clientAddress());
    try {
      const values = await again.transaction((tx) => tx.getAll('demo', ['alice', 'bob', 'carol']), {
        retries: 20,
      });
      assert.deepEqual(values, [{ balance: 100 }, { balance: 50 }, 7]);
    } finally {
      await again.close();
    }
    await run.stop();
  } finally {
    run.kill();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('basalt node --client-port serves connect() clients (one-node cluster, in memory)', async () => {
  const peerPort = await freePort();
  const run = new Basalt([
    'node',
    '--name',
    'n1',
    '--cluster',
    `n1=127.0.0.1:${peerPort}`,
    '--memory',
    '--table',
    'kv:2:1',
    '--client-port',
    '0',
  ]);
  try {
    const client = await connect(await run.clientAddress());
    try {
      assert.equal(client.node, 'n1');
      await client.transaction(
        (tx) =>
          tx.putAll('kv', [
            { key: 'a', value: 1 },
            { key: 'b', value: 2 },
          ]),
        {
          retries: 20,
        },
      );
      assert.equal(await client.get('kv', 'b'), 2);
      await client.createTable('more', { partitions: 1, replicas: 1 });
      assert.deepEqual((await client.tables()).map((t) => t.name).sort(), ['kv', 'more']);
    } finally {
      await client.close();
    }
    await run.stop();
  } finally {
    run.kill();
  }
});
