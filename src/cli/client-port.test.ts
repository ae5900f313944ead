/**
 * The client port of the real commands, as a user meets it: `npm start` (`basalt cluster`, three `basalt start`
 * processes) prints `connect('host:port')` and a ready line; a program connects, writes, the cluster stops and starts
 * again on its data, and the writes read back. `basalt start --config` serves clients of a one-node cluster the same
 * way, its settings from a JSON file with a flag overriding one of them.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { connect } from '../client/remote.js';
import { freePort } from './free-ports.js';

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

  /**
   * The address of the last `connect('...')` line once the ready line is out: the supervisor's own line for `basalt
   * cluster` (its children's come before it), the node's for `basalt start`.
   */
  async clientAddress(timeoutMs = 30_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const address = [...this.output.matchAll(/connect\('([^']+)'\)/g)].at(-1)?.[1];
      if (address !== undefined && /^basalt: (node \S+ )?ready/m.test(this.output)) return address;
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

test('basalt cluster as npm start runs it (./data, table demo): a client writes, the cluster restarts, the writes read back', async () => {
  // The command of `npm start` in its working directory, with its relative ./data; only the ports are ephemeral here.
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-client-port-'));
  const script = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')).scripts.start;
  assert.match(script, / cluster --nodes 3 --data \.\/data --table demo:8:3$/, 'the command npm start runs');
  const args = ['cluster', '--nodes', '3', '--data', './data', '--table', 'demo:8:3', '--client-port', '0'];
  args.push('--metrics-port', '0');
  let run = new Basalt(args, dataDir);
  try {
    const address = await run.clientAddress();
    assert.match(address, /^127\.0\.0\.1:\d+$/);
    assert.match(run.output, /^basalt: connect to the cluster from a program with connect\('127\.0\.0\.1:\d+'\)$/m);
    assert.match(run.output, /^basalt: ready: 3\/3 nodes ready$/m);
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
    for (const n of ['n1', 'n2', 'n3']) {
      assert.ok(existsSync(join(dataDir, 'data', n)), `LMDB of ${n} under ./data of the working directory`);
    }

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

test('basalt start --config serves connect() clients (one-node cluster, in memory; a flag overrides the file)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-config-'));
  const config = join(dir, 'n1.json');
  const filePort = await freePort();
  const settings = { name: 'n1', port: await freePort(), memory: true, tables: ['kv:2:1'], clientPort: filePort };
  writeFileSync(config, JSON.stringify(settings));
  const run = new Basalt(['start', '--config', config, '--client-port', '0']);
  try {
    const address = await run.clientAddress();
    assert.notEqual(address, `127.0.0.1:${filePort}`, '--client-port 0 overrides the file (an ephemeral port)');
    assert.match(run.output, new RegExp(`node n1 listening on 127\\.0\\.0\\.1:${settings.port} `));
    const client = await connect(address);
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
    rmSync(dir, { recursive: true, force: true });
  }
});
