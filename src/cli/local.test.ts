/**
 * Smoke test of `basalt local` (the whole cluster in one process): the real command as a child process (TCP on loopback, LMDB in a temp dir), waited on
 * until its ready line, then stopped with SIGINT; it must exit cleanly. A second start on the same data directory
 * finds the table created by the first (durable metastorage).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('./main.js', import.meta.url));

interface Run {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly output: string;
}

/** Runs `basalt local ...args`, sends SIGINT once the ready line appears, resolves when the process exits. */
/** `basalt local` arguments: three nodes on `dataDir`, table accounts (2 partitions, 3 replicas), any client port. */
function localArgs(dataDir: string): string[] {
  return ['--nodes', '3', '--data-dir', dataDir, '--table', 'accounts:2:3', '--client-port', '0'];
}

function runUntilReady(args: readonly string[], timeoutMs = 30_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, 'local', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let signalled = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no clean run within ${timeoutMs} ms; output:\n${output}`));
    }, timeoutMs);
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      if (!signalled && /basalt: ready/.test(output)) {
        signalled = true;
        child.kill('SIGINT');
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

test('basalt local runs a 3-node TCP + LMDB cluster, reports it ready, and stops cleanly on SIGINT', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'basalt-cli-'));
  try {
    const first = await runUntilReady(localArgs(dataDir));
    assert.equal(first.code, 0, first.output);
    assert.match(first.output, /node n1 listening on 127\.0\.0\.1:\d+/);
    assert.match(first.output, /node n3 listening on 127\.0\.0\.1:\d+/);
    assert.match(first.output, /metrics of n1: http:\/\/127\.0\.0\.1:\d+\/metrics \(health: .*\/health\)/);
    assert.match(first.output, /metrics of n3: http:\/\/127\.0\.0\.1:\d+\/metrics/);
    assert.match(first.output, /metastorage leader: n\d/);
    assert.match(first.output, /partition t1p[01] leader: n\d/);
    assert.match(first.output, /ready: 3\/3 nodes up.*partitions with a leader: 2\/2/);
    assert.match(first.output, /basalt: stopped/);

    const second = await runUntilReady(localArgs(dataDir));
    assert.equal(second.code, 0, second.output);
    assert.match(second.output, /table accounts exists/, 'the table survived the restart on disk');
    assert.match(second.output, /ready: .*tables: 1/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('basalt local rejects a bad option with a non-zero exit', async () => {
  const run = await new Promise<Run>((resolve) => {
    const child = spawn(process.execPath, [MAIN, 'local', '--nodes', 'zero'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stderr.on('data', (c: Buffer) => {
      output += c.toString();
    });
    child.on('exit', (code, signal) => resolve({ code, signal, output }));
  });
  assert.notEqual(run.code, 0);
  assert.match(run.output, /positive integer/);
});
