import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { Cleanup } from '../../bench/cleanup.js';
import { BasaltCluster } from '../../bench/cluster.js';
import { parseResolutionCounts, scrape } from '../../bench/intents.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The state letter of /proc/<pid>/stat (T: stopped by a signal). */
function state(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
}

describe('bench cluster', () => {
  it('serves /metrics per node, pauses a node with SIGSTOP, and stops a paused cluster completely', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'bench-cluster-test-'));
    const cleanup = new Cleanup();
    const cluster = new BasaltCluster({ parent, fsync: false, cleanup });
    try {
      await cluster.start();
      assert.equal(cluster.metricsUrls.length, 3);
      const counts = parseResolutionCounts(await scrape(cluster.metricsUrls[0]!));
      assert.deepEqual(counts, { local: 0, coordinator: 0, commitPartition: 0, recoveries: 0, pending: 0, final: 0 });
      const pids = cluster.pids;
      cluster.pause(2);
      if (existsSync(`/proc/${pids[2]}/stat`)) {
        // The signal is delivered asynchronously.
        const deadline = Date.now() + 2_000;
        while (state(pids[2]!) !== 'T' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        assert.equal(state(pids[2]!), 'T', 'n3 is stopped');
      }
      // A stopped node answers no request: its /metrics times out while the others answer.
      await assert.rejects(scrape(cluster.metricsUrls[2]!));
      await cluster.stop();
      // A paused node that was not resumed would hold SIGINT until the SIGKILL after the stop wait.
      for (const exit of cluster.exits()) assert.doesNotMatch(exit, /SIGKILL/);
      for (const pid of pids) assert.equal(alive(pid), false, `node process ${pid} ended`);
      assert.equal(existsSync(cluster.dir), false, 'the data directory is removed');
    } finally {
      await cleanup.run();
      rmSync(parent, { recursive: true, force: true });
    }
  });
});
