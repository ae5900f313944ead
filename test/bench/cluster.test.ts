import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ClientPool } from '../../bench/cells.js';
import { Cleanup } from '../../bench/cleanup.js';
import { BasaltCluster } from '../../bench/cluster.js';
import { parseResolutionCounts, scrape } from '../../bench/intents.js';
import { benchConnectOptions, benchTls, useBenchTls } from '../../bench/tls.js';
import { connect } from '../../src/client/remote.js';

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

  it('--tls: nodes with certificates, clients logged in by the admin certificate, metrics over HTTPS', async () => {
    const parent = mkdtempSync(join(tmpdir(), 'bench-cluster-tls-test-'));
    const cleanup = new Cleanup();
    const cluster = new BasaltCluster({ parent, fsync: false, cleanup, tls: true });
    try {
      await cluster.start();
      assert.match(cluster.metricsUrls[0]!, /^https:/);
      assert.match(await scrape(cluster.metricsUrls[0]!), /basalt_auth_failures_total/);
      // Without the bench's credentials the client port refuses the calls; with them (what the driver threads get)
      // the admin writes and reads.
      const anonymous = await connect(cluster.addresses[0]!, { ca: benchTls()!.ca });
      await assert.rejects(anonymous.get('bench', 'k'), /UNAUTHENTICATED/);
      await anonymous.close();
      const client = await connect(cluster.addresses[0]!, benchConnectOptions());
      assert.equal(client.user, 'root');
      await client.transaction((tx) => tx.put('bench', 'k', 1), { retries: 20 });
      await client.close();
      const pool = await ClientPool.open('basalt', cluster.addresses, 1);
      await pool.close();
    } finally {
      useBenchTls(undefined);
      await cleanup.run();
      rmSync(parent, { recursive: true, force: true });
    }
  });
});
