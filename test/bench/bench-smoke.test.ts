import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { BenchDocument } from '../../bench/report.js';

const BENCH_MAIN = fileURLToPath(new URL('../../bench/main.js', import.meta.url));
const SMOKE_TIMEOUT_MS = 90_000;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('npm run bench -- --quick --workload put (etcd skipped)', () => {
  it('exits 0, writes the JSON with every section and leaves no process or directory behind', async () => {
    const out = mkdtempSync(join(tmpdir(), 'bench-smoke-out-'));
    // The bench's own temp directories go here, so the test sees whether it removed them all.
    const scratch = mkdtempSync(join(tmpdir(), 'bench-smoke-tmp-'));
    try {
      const child = spawn(process.execPath, [BENCH_MAIN, '--quick', '--workload', 'put', '--out', out], {
        env: { ...process.env, TMPDIR: scratch, BASALT_BENCH_NO_ETCD: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => {
        stdout += c.toString();
      });
      child.stderr.on('data', (c: Buffer) => {
        stderr += c.toString();
      });
      const timer = setTimeout(() => child.kill('SIGINT'), SMOKE_TIMEOUT_MS);
      const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
      clearTimeout(timer);
      assert.equal(code, 0, `bench failed:\n${stdout}\n${stderr}`);

      const files = readdirSync(out).filter((f) => f.endsWith('.json'));
      assert.equal(files.length, 1);
      const doc = JSON.parse(readFileSync(join(out, files[0]!), 'utf8')) as BenchDocument;
      assert.equal(doc.schema, 'basalt-bench/1');
      assert.ok(doc.machine.cores >= 1 && doc.machine.memoryBytes > 0 && doc.machine.node.startsWith('v'));
      assert.ok(doc.machine.loadAverage.start >= 0 && doc.machine.disk.dir === scratch, JSON.stringify(doc.machine));
      assert.deepEqual(doc.parameters.workloads, ['put']);
      assert.equal(doc.parameters.fsync, true);
      assert.equal(doc.parameters.etcd.ran, false);
      assert.ok(doc.floors.rtt.p50Us > 0 && doc.floors.fsync.p50Us > 0, 'floors measured');
      assert.deepEqual(
        doc.cells.map((c) => [c.system, c.workload, c.clients]),
        [
          ['basalt', 'put', 1],
          ['basalt', 'put', 16],
        ],
      );
      for (const c of doc.cells) {
        assert.ok(c.ops > 0 && c.latency.p50Us > 0 && c.latency.p999Us >= c.latency.p99Us, JSON.stringify(c));
        assert.equal(c.failures, 0);
        assert.equal(c.cpuSPerKOps.length, 3);
      }
      assert.ok(doc.comparisons.every((r) => r.basaltP50OverFloor !== undefined && r.ratio === undefined));
      assert.match(stdout, /fsync ON/);
      assert.match(stdout, /etcd: skipped/);
      assert.match(stdout, /\| put: single-key write \| 16 \|/);

      assert.equal(doc.processes['basalt']?.length, 3);
      for (const pid of doc.processes['basalt']!) assert.equal(alive(pid), false, `node process ${pid} stopped`);
      assert.deepEqual(readdirSync(scratch), [], 'every directory the bench created is removed');
    } finally {
      rmSync(out, { recursive: true, force: true });
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
