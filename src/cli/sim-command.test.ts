/**
 * `basalt sim` and `basalt check` as a user runs them: a seed replayed in a fresh process prints the same history and
 * trace hashes, usage errors exit 1, a history file with an anomaly exits with the checker code and names the
 * anomaly, and a failing run's report carries its seed, the command that replays it and the last events.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseHistory } from '../sim/check/history.js';
import type { SimRunResult } from '../sim/workload/run.js';
import { BASALT_MAIN } from './child-node.js';
import { failureReport, type SimCommandOptions, seedList } from './sim-command.js';

const run = promisify(execFile);

async function basalt(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [BASALT_MAIN, ...args], { timeout: 120_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

const OPTIONS: SimCommandOptions = {
  seeds: [9],
  workloads: ['bank'],
  faults: ['crash'],
  faultsSpec: 'crash',
  nodes: 3,
  durationS: 2,
  livenessS: 20,
  workers: 5,
  partitions: 4,
  traceLines: 3,
};

describe('basalt sim', () => {
  it('replays a seed in a fresh process with the same hashes, and writes a history the reader parses', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-sim-'));
    try {
      const file = join(dir, 'h.jsonl');
      const args = ['sim', '--seed', '2', '--workload', 'register', '--duration', '1', '--faults', 'all'];
      const first = await basalt(...args, '--history', file);
      const again = await basalt(...args);
      assert.equal(first.code, 0, first.stdout + first.stderr);
      const hashes = (s: string) => /history (\w+), trace (\w+)/.exec(s)?.slice(1);
      assert.ok(hashes(first.stdout) !== undefined, first.stdout);
      assert.deepEqual(hashes(again.stdout), hashes(first.stdout));
      const history = parseHistory(readFileSync(file, 'utf8'));
      assert.ok(history.length > 10);
      assert.ok(history.every((op) => ['read', 'write', 'cas'].includes(op.f)));
      const checked = await basalt('check', file, '--workload', 'register');
      assert.equal(checked.code, 0);
      assert.match(checked.stdout, /^valid: register/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits 1 on an unknown fault or workload', async () => {
    assert.equal((await basalt('sim', '--faults', 'meteor')).code, 1);
    assert.equal((await basalt('sim', '--workload', 'queue')).code, 1);
  });

  it('basalt check exits 4 on a history with an anomaly and names it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'basalt-check-'));
    try {
      const file = join(dir, 'g1a.jsonl');
      const lines = [
        { process: 0, type: 'invoke', f: 'txn', value: [['append', 'x', 1]], time: 1 },
        { process: 0, type: 'fail', f: 'txn', value: [['append', 'x', 1]], time: 2 },
        { process: 1, type: 'invoke', f: 'txn', value: [['r', 'x', null]], time: 3 },
        { process: 1, type: 'ok', f: 'txn', value: [['r', 'x', [1]]], time: 4 },
      ];
      writeFileSync(file, lines.map((l) => JSON.stringify(l)).join('\n'));
      const checked = await basalt('check', file, '--workload', 'list-append');
      assert.equal(checked.code, 4);
      assert.match(checked.stdout, /INVALID/);
      assert.match(checked.stdout, /G1a: key x/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a failure report names the seed, the command that replays it, and the last events', () => {
    const result: SimRunResult = {
      seed: 9,
      workload: 'bank',
      failure: { class: 'checker', message: '1 anomalies: wrong-total: read sums to 590' },
      history: [
        { index: 0, process: 0, type: 'invoke', f: 'read', value: null, time: 500_000_000 },
        { index: 1, process: 0, type: 'fail', f: 'read', value: null, time: 1_300_000_000, error: 'TIMEOUT' },
      ],
      check: { valid: false, summary: 'bank: 1 reads', anomalies: ['wrong-total: read sums to 590'] },
      marks: {},
      faultLog: ['t=0.200s drop n1>n2 rate=0.10', 't=1.150s crash n2 for 500 ms'],
      trace: [
        { timeMs: 1000, label: 'timer:n1#1' },
        { timeMs: 1100, label: 'msg:n1>n2' },
        { timeMs: 1200, label: 'timer:n2#1' },
        { timeMs: 1400, label: 'timer:harness' },
      ],
      traceHash: 'abc',
      historyHash: 'def',
      virtualMs: 3000,
      counts: { ok: 0, fail: 0, info: 0, okAfterHeal: 0 },
    };
    const report = failureReport(OPTIONS, result);
    assert.match(report, /^FAIL checker: workload bank, seed 9/);
    assert.match(
      report,
      /replay: basalt sim --seed 9 --workload bank --faults crash --nodes 3 --duration 2 --liveness 20 --workers 5 --partitions 4/,
    );
    assert.match(report, /wrong-total: read sums to 590/);
    assert.match(report, /crash n2 for 500 ms/);
    assert.doesNotMatch(report, /timer:n1#1/, 'only the last events');
    assert.doesNotMatch(report, /"invoke"/, 'nothing from before them');
    const lines = report.split('\n').map((l) => l.trim());
    const at = (text: string) => lines.findIndex((l) => l.includes(text));
    assert.ok(at('1.1000  msg:n1>n2') < at('1.1500  fault  crash n2'), report);
    assert.ok(at('fault  crash n2') < at('1.2000  timer:n2#1'), report);
    assert.ok(at('timer:n2#1') < at('1.3000  op     {"process":0,"type":"fail"'), report);
    assert.ok(at('"error":"TIMEOUT"') < at('1.4000  timer:harness'), report);
  });

  it('reads seeds as one, a range or a list', () => {
    assert.deepEqual(seedList('4'), [4]);
    assert.deepEqual(seedList('3..6'), [3, 4, 5, 6]);
    assert.deepEqual(seedList('1,x,9'), [1, 'x', 9]);
  });
});
