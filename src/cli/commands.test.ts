/**
 * The operator commands against a live `basalt cluster` (three `basalt start` child processes, LMDB in a temp dir):
 * `--help` lists every command; `bench` hands its flags to the benchmark; `table create` and `table list` over the client port; `status` from the metrics
 * endpoints; `demo` for two seconds with a clean report; a child killed with SIGKILL is reported by the supervisor
 * with its signal, and SIGINT stops the others cleanly (the supervisor then exits 1 because of the crash).
 */

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { connect } from '../client/remote.js';
import { freeRange } from '../testing/port-range.js';
import { BASALT_MAIN, ChildNode } from './child-node.js';

const run = promisify(execFile);

async function basalt(...args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [BASALT_MAIN, ...args], { timeout: 60_000 });
  return stdout;
}

test('basalt --help lists every command with a description; basalt start --help lists its flags', async () => {
  const help = await basalt('--help');
  for (const command of ['start', 'cluster', 'local', 'table', 'node', 'status', 'demo', 'backup', 'restore']) {
    assert.match(help, new RegExp(`^  ${command}( \\[options\\])? +\\w`, 'm'), command);
  }
  assert.match(await basalt('table', '--help'), /create.*\n.*list/s);
  assert.match(await basalt('node', '--help'), /list.*\n.*remove/s);
  assert.match(await basalt('backup', '--help'), /--incremental-from.*verify <dir>/s);
  const startHelp = await basalt('start', '--help');
  const flags = ['config', 'name', 'host', 'port', 'advertise', 'data', 'memory', 'peers', 'join', 'client-port'];
  for (const flag of [...flags, 'metrics-port', 'table', 'no-fsync', 'log-level', 'log-file', 'status-interval']) {
    assert.match(startHelp, new RegExp(`^  --${flag}\\b`, 'm'), flag);
  }
});

test('basalt bench passes its flags to the benchmark: its help, and its refusal of an unknown workload', async () => {
  assert.match(await basalt('--help'), /^ {2}bench \[flags\.\.\.\] +benchmark/m);
  const help = await basalt('bench', '--help');
  for (const flag of ['quick', 'workload', 'clients', 'no-fsync', 'no-etcd', 'profile']) {
    assert.match(help, new RegExp(`^  --${flag}\\b`, 'm'), flag);
  }
  await assert.rejects(basalt('bench', '--workload', 'nope'), (error: { code: number; stderr: string }) => {
    assert.equal(error.code, 1);
    assert.match(error.stderr, /unknown workload nope/);
    return true;
  });
});

test('basalt cluster: table create/list, status, demo, a crashed child reported, Ctrl-C stops the rest', async () => {
  const data = mkdtempSync(join(tmpdir(), 'basalt-cluster-'));
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
    'bank:4:3',
  ]);
  const connectTo = `127.0.0.1:${clientBase}`;
  const metrics = [0, 1, 2].map((i) => `127.0.0.1:${metricsBase + i}`).join(',');
  try {
    await supervisor.waitFor(/basalt: ready: 3\/3 nodes ready/, 45_000);
    // Ready means ready: every partition has a primary, so the first implicit writes all succeed.
    const client = await connect(`127.0.0.1:${clientBase}`);
    try {
      for (let i = 0; i < 200; i++) await client.put('bank', `first-${i}`, i);
    } finally {
      await client.close();
    }

    assert.match(
      await basalt('table', 'create', 'accounts', '--partitions', '2', '--replicas', '3', '--connect', connectTo),
      /table accounts created \(id \d+, 2 partitions, 3 replicas\)/,
    );
    const list = await basalt('table', 'list', '--connect', connectTo);
    assert.match(list, /^accounts\tid \d+\t2 partitions\t3 replicas$/m);
    assert.match(list, /^bank\tid \d+\t4 partitions\t3 replicas$/m);

    // Every node is ready once it knows the tables; leases of the new table's partitions may take a moment more.
    const settled = /^ {2}t\d+p0\tleader n\d\tprimary n\d\tterm \d+\tapplied n\d=\d+ n\d=\d+ n\d=\d+\tlag \d+$/m;
    let status = await basalt('status', '--metrics', metrics);
    for (let i = 0; i < 30 && !settled.test(status); i++) {
      await new Promise((r) => setTimeout(r, 300));
      status = await basalt('status', '--metrics', metrics);
    }
    for (const n of ['n1', 'n2', 'n3']) assert.match(status, new RegExp(`^  ${n}\\t\\S+\\tup\\thealthy`, 'm'));
    // Each node line ends in its primary partition count and commit latency quantiles (or '-' before any commit).
    assert.match(status, /^ {2}n1\t.*, primaries \d+, commit latency p50 (\d+\.\d|-) ms p99 (\d+\.\d|-) ms$/m);
    assert.match(status, /^ {2}meta\tleader n\d\t/m);
    assert.match(status, settled);

    const report = await basalt('demo', '--connect', connectTo, '--metrics', metrics, '--duration', '2');
    assert.match(report, /transfers committed [1-9]\d* in/);
    assert.match(report, /read-only snapshot checks passed [1-9]\d*, failed 0/);
    assert.match(report, /resolution local=\d+ coordinator=\d+ commit_partition=\d+ \(3\/3 nodes\)/);
    assert.match(report, /total 20000 \(expected 20000\): conserved/);

    const n3 = Number((await supervisor.waitFor(/node n3 is pid (\d+)/))[1]);
    process.kill(n3, 'SIGKILL');
    await supervisor.waitFor(new RegExp(`node n3 \\(pid ${n3}\\) exited unexpectedly: signal SIGKILL`));
    const downStatus = await basalt('status', '--metrics', metrics);
    assert.match(downStatus, /^ {2}\?\t\S+\tdown/m, 'the killed node shows as down');
    // The supervisor prints the exact command that brings the node back; run it and the node rejoins on its data.
    const command = (
      await supervisor.waitFor(/basalt: bring it back with: (.+) \(or run basalt cluster with --restart\)/)
    )[1]!;
    const words = command.split(' ');
    assert.equal(words[0], process.execPath);
    assert.equal(words[1], BASALT_MAIN);
    assert.deepEqual(words.slice(2, 5), ['start', '--name', 'n3']);
    const back = new ChildNode(words.slice(2));
    try {
      await back.waitFor(/basalt: node n3 ready/, 45_000);
      back.signal('SIGTERM');
      assert.equal((await back.exited).code, 0, `the restarted n3 stops cleanly:\n${back.output}`);
    } finally {
      back.signal('SIGKILL');
    }

    supervisor.signal('SIGINT');
    const exit = await supervisor.exited;
    assert.equal(exit.code, 1, 'a crashed child makes the supervisor exit 1');
    assert.match(supervisor.output, /node n1 exit code 0/);
    assert.match(supervisor.output, /node n2 exit code 0/);
    assert.match(supervisor.output, /node n3 signal SIGKILL/);
  } finally {
    // On a failure: a graceful stop first, then the children by the pids the supervisor printed, then the supervisor.
    supervisor.signal('SIGTERM');
    await Promise.race([supervisor.exited, new Promise((r) => setTimeout(r, 25_000))]);
    // Only while the supervisor still runs are its children's pids sure to be theirs.
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

test('basalt cluster --restart: a killed node process is restarted with backoff and serves again', async () => {
  const data = mkdtempSync(join(tmpdir(), 'basalt-restart-'));
  const supervisor = new ChildNode([
    'cluster',
    '--restart',
    '--data',
    data,
    '--client-port',
    '0',
    '--metrics-port',
    '0',
    '--table',
    'kv:2:3',
  ]);
  try {
    await supervisor.waitFor(/basalt: ready: 3\/3 nodes ready/, 45_000);
    const n2 = Number((await supervisor.waitFor(/node n2 is pid (\d+)/))[1]);
    const mark = supervisor.mark();
    process.kill(n2, 'SIGKILL');
    await supervisor.waitFor(/basalt: restarting node n2 in 1000 ms/, 10_000, mark);
    const again = Number((await supervisor.waitFor(/basalt: node n2 restarted as pid (\d+)/, 10_000, mark))[1]);
    assert.notEqual(again, n2);
    await supervisor.waitFor(/\[n2\] basalt: node n2 ready/, 45_000, mark);
    assert.doesNotMatch(supervisor.output.slice(mark), /bring it back with/, 'no manual command when it restarts');
    supervisor.signal('SIGINT');
    const exit = await supervisor.exited;
    assert.equal(exit.code, 1, 'the crash still makes the supervisor exit 1');
    assert.match(supervisor.output, /node n2 exit code 0/, 'the restarted node stops cleanly');
  } finally {
    supervisor.signal('SIGTERM');
    await Promise.race([supervisor.exited, new Promise((r) => setTimeout(r, 25_000))]);
    const pids = supervisor.running ? [...supervisor.output.matchAll(/node n\d (?:is|restarted as) pid (\d+)/g)] : [];
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
