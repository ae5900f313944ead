/**
 * `basalt watch` end to end against a real node (`basalt start`, LMDB on disk): one JSON line per change and per
 * resolved mark, and after the node is killed and started again the same watch process reconnects and goes on with
 * the next change, printing nothing twice. A malformed `--from` exits 2 without connecting.
 */
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { freeRange } from '../testing/port-range.js';
import { DATA_EXIT_CODES } from './data.js';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

interface Proc {
  readonly child: ChildProcess;
  readonly output: () => string;
}

function run(args: readonly string[]): Proc {
  const child = spawn(process.execPath, [MAIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  return { child, output: () => output };
}

async function until(what: string, p: Proc, done: (output: string) => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done(p.output())) {
    if (Date.now() > deadline || p.child.exitCode !== null) throw new Error(`${what}:\n${p.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function startNode(config: string, clientPort: number): Promise<Proc> {
  const node = run(['start', '--config', config, '--client-port', String(clientPort)]);
  await until('no ready node', node, (o) => /^basalt: (node \S+ )?ready/m.test(o));
  return node;
}

function stop(p: Proc, signal: NodeJS.Signals): Promise<void> {
  if (p.child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    p.child.once('exit', () => resolve());
    p.child.kill(signal);
  });
}

function basalt(args: readonly string[]): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { code: r.status, stderr: r.stderr };
}

/** The change lines a watch printed (JSON lines with a key). */
function changes(output: string): { key: string; value?: unknown; deleted?: true; commitTs: string }[] {
  return output
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"key"'))
    .map((l) => JSON.parse(l));
}

test('basalt watch prints each change once, with resolved marks, across a restart of its node', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-watch-'));
  const config = join(dir, 'n1.json');
  // Fixed ports below the ephemeral range: the restarted node binds the same ones.
  const base = await freeRange(2);
  const clientPort = base + 1;
  const data = join(dir, 'data');
  writeFileSync(config, JSON.stringify({ name: 'n1', port: base, data, tables: ['kv:2:1'] }));
  let node = await startNode(config, clientPort);
  const c = ['--connect', `127.0.0.1:${clientPort}`];
  const watch = run(['watch', 'kv', '--prefix', 'k/', '--progress', ...c]);
  try {
    await until('no resolved mark', watch, (o) => o.includes('"resolvedTs"'));
    assert.equal(basalt(['put', 'kv', 'k/1', '{"n":1}', ...c]).code, DATA_EXIT_CODES.ok);
    assert.equal(basalt(['put', 'kv', 'other', '1', ...c]).code, DATA_EXIT_CODES.ok);
    assert.equal(basalt(['rm', 'kv', 'k/1', ...c]).code, DATA_EXIT_CODES.ok);
    await until('no change lines', watch, (o) => changes(o).length >= 2);

    await stop(node, 'SIGKILL');
    node = await startNode(config, clientPort);
    assert.equal(basalt(['put', 'kv', 'k/2', '[2]', ...c]).code, DATA_EXIT_CODES.ok);
    await until('no change after the restart', watch, (o) => changes(o).some((e) => e.key === 'k/2'));
    const seen = changes(watch.output());
    assert.deepEqual(
      seen.map((e) => [e.key, e.value ?? (e.deleted ? 'deleted' : undefined)]),
      [
        ['k/1', { n: 1 }],
        ['k/1', 'deleted'],
        ['k/2', [2]],
      ],
      'each change once, in commit order',
    );
    assert.ok(BigInt(seen[0]!.commitTs) < BigInt(seen[1]!.commitTs));
    const marks = watch
      .output()
      .split('\n')
      .filter((l) => l.includes('"resolvedTs"'))
      .map((l) => BigInt(JSON.parse(l).resolvedTs as string));
    assert.ok(
      marks.every((m, i) => i === 0 || m > marks[i - 1]!),
      'resolved marks only grow',
    );

    const badFrom = basalt(['watch', 'kv', '--from', 'yesterday', ...c]);
    assert.equal(badFrom.code, DATA_EXIT_CODES.invalid);
    assert.match(badFrom.stderr, /INVALID_ARGUMENT/);
  } finally {
    await stop(watch, 'SIGTERM');
    await stop(node, 'SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
});
