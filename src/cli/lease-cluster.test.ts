/**
 * `basalt put --ttl | --lease` and `basalt lease` end to end on a live `basalt cluster` (three `basalt start` child
 * processes, LMDB in a temp dir), each command sent to a different node: a ttl'd key is seen from every node and
 * then from none; a lease's keys are written, kept and revoked through different nodes; a lease left without
 * keepalives takes its keys with it, both at once in one read-only snapshot; a bad ttl exits 2 with nothing written.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { freeRange } from '../testing/port-range.js';
import { BASALT_MAIN, ChildNode } from './child-node.js';
import { DATA_EXIT_CODES } from './data.js';

const run = promisify(execFile);

/** Runs `basalt args`, resolving with its exit code and output whatever the code. */
async function basalt(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BASALT_MAIN, ...args], { timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `basalt args` with `input` on its standard input: its exit code, and stdout then stderr. */
function basaltWithInput(input: string, args: readonly string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BASALT_MAIN, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('exit', (code) => resolve({ code, out: `${out}${err}` }));
    child.stdin.end(input);
  });
}

/** The values a `basalt txn - --read-only` of `script` printed (null where absent): one snapshot. */
async function readOnlySnapshot(script: string, connect: readonly string[]): Promise<unknown[]> {
  const { code, out } = await basaltWithInput(script, ['txn', '-', '--read-only', ...connect]);
  assert.equal(code, DATA_EXIT_CODES.ok, out);
  return out
    .trim()
    .split('\n')
    .map((l) => (JSON.parse(l) as { value: unknown }).value);
}

test('basalt put --ttl and basalt lease on a three-process cluster, each command through another node', async () => {
  const data = mkdtempSync(join(tmpdir(), 'basalt-lease-'));
  const clientBase = await freeRange(3);
  const metricsBase = await freeRange(3);
  const supervisor = new ChildNode([
    'cluster',
    '--data',
    data,
    '--client-port',
    String(clientBase),
    '--metrics-port',
    String(metricsBase),
    '--table',
    'kv:3:3',
  ]);
  const at = (i: number) => ['--connect', `127.0.0.1:${clientBase + i}`];
  try {
    await supervisor.waitFor(/basalt: ready: 3\/3 nodes ready/, 60_000);

    // This machine may be slow (seconds per command): ttls checked as present are long, short ones only run out.
    assert.equal((await basalt('put', 'kv', 'long', '"l"', '--ttl', '600000', ...at(0))).code, DATA_EXIT_CODES.ok);
    for (const i of [0, 1, 2]) assert.equal((await basalt('get', 'kv', 'long', ...at(i))).stdout.trim(), '"l"');
    assert.equal((await basalt('put', 'kv', 'brief', '"b"', '--ttl', '1000', ...at(1))).code, DATA_EXIT_CODES.ok);
    const bad = await basalt('put', 'kv', 'bad', '1', '--ttl', '0', ...at(1));
    assert.equal(bad.code, DATA_EXIT_CODES.invalid, bad.stderr);
    assert.equal((await basalt('get', 'kv', 'bad', ...at(2))).code, DATA_EXIT_CODES.notFound);

    // Kept and revoked through different nodes.
    const granted = await basalt('lease', 'grant', '60000', ...at(0));
    assert.equal(granted.code, DATA_EXIT_CODES.ok, granted.stderr);
    const { id } = JSON.parse(granted.stdout) as { id: string };
    assert.equal((await basalt('put', 'kv', 'l1', '1', '--lease', id, ...at(1))).code, DATA_EXIT_CODES.ok);
    assert.equal((await basalt('put', 'kv', 'l2', '2', '--lease', id, ...at(2))).code, DATA_EXIT_CODES.ok);
    assert.equal((await basalt('lease', 'keep', id, '--once', ...at(2))).code, DATA_EXIT_CODES.ok);
    assert.equal((await basalt('lease', 'revoke', id, ...at(1))).code, DATA_EXIT_CODES.ok);
    for (const i of [0, 1, 2]) {
      assert.equal((await basalt('get', 'kv', 'l1', ...at(i))).code, DATA_EXIT_CODES.notFound, `l1 from node ${i}`);
      assert.equal((await basalt('get', 'kv', 'l2', ...at(i))).code, DATA_EXIT_CODES.notFound, `l2 from node ${i}`);
    }

    // Left without keepalives: both keys go, together in every snapshot.
    const short = JSON.parse((await basalt('lease', 'grant', '10000', ...at(2))).stdout) as { id: string };
    // Both keys from one shell session (one process: quicker than the lease's ttl however slow the machine).
    const attach = await basaltWithInput(`put kv s1 --lease ${short.id} 1\nput kv s2 --lease ${short.id} 2\n`, [
      'shell',
      ...at(0),
    ]);
    assert.equal(attach.code, DATA_EXIT_CODES.ok, attach.out);
    const script = '[{"op":"get","table":"kv","key":"s1"},{"op":"get","table":"kv","key":"s2"}]';
    const deadline = Date.now() + 60_000;
    for (let present = 2; present > 0; ) {
      assert.ok(Date.now() < deadline, 'the lease ended');
      const values = await readOnlySnapshot(script, at(2));
      present = values.filter((v) => v !== null).length;
      assert.ok(present === 0 || present === 2, `a snapshot saw ${present} of the lease's 2 keys`);
      if (present > 0) await sleep(200);
    }
    assert.equal((await basalt('get', 'kv', 'brief', ...at(1))).code, DATA_EXIT_CODES.notFound, 'the 1 s ttl ran out');
    const lost = await basalt('lease', 'keep', short.id, '--once', ...at(0));
    assert.equal(lost.code, DATA_EXIT_CODES.refused);
    assert.match(lost.stderr, /LEASE_NOT_FOUND/);

    supervisor.signal('SIGINT');
    assert.equal((await supervisor.exited).code, 0, supervisor.output);
  } finally {
    supervisor.signal('SIGTERM');
    await Promise.race([supervisor.exited, new Promise((r) => setTimeout(r, 25_000))]);
    const pids = supervisor.running ? [...supervisor.output.matchAll(/node n\d is pid (\d+)/g)] : [];
    for (const m of pids) {
      try {
        process.kill(Number(m[1]), 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
    supervisor.signal('SIGKILL');
    await supervisor.exited;
    rmSync(data, { recursive: true, force: true });
  }
});
