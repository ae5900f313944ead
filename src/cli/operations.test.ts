/**
 * Operations endpoints and logs of `basalt start`: `/health` turns 200 once the node knows a metastorage leader,
 * `/metrics` is Prometheus text with the node label and the node's figures, structured logs are JSON lines naming the
 * node. A metrics server without a node answers 503 and `basalt_up 0`.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { connect } from '../client/remote.js';
import { estimateQuantile } from '../core/histogram.js';
import { histogramOf, parseMetrics } from './admin.js';
import { ChildNode } from './child-node.js';
import { freePort } from './free-ports.js';
import { MetricsServer } from './metrics-http.js';

/** The value of the sample `name{labels}` in a Prometheus text body. */
function sample(body: string, series: string): number | undefined {
  const line = body.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** The commit latency histogram: cumulative buckets by `le`, `+Inf` equal to a positive count, a plausible sum. */
function assertCommitLatency(body: string): void {
  assert.match(body, /# TYPE basalt_raft_commit_latency_ms histogram/);
  const buckets = [...body.matchAll(/^basalt_raft_commit_latency_ms_bucket\{node="n1",le="([^"]+)"\} (\S+)$/gm)];
  assert.deepEqual(
    buckets.map((b) => b[1]),
    ['0.5', '1', '2', '5', '10', '20', '50', '100', '200', '500', '1000', '+Inf'],
  );
  const counts = buckets.map((b) => Number(b[2]));
  assert.ok(
    counts.every((c, i) => i === 0 || c >= counts[i - 1]!),
    `cumulative: ${counts.join(' ')}`,
  );
  const count = sample(body, 'basalt_raft_commit_latency_ms_count{node="n1"}') ?? 0;
  const sum = sample(body, 'basalt_raft_commit_latency_ms_sum{node="n1"}') ?? -1;
  assert.ok(count > 0, 'the leader timed its proposals (metastorage, leases, the write)');
  assert.equal(counts.at(-1), count);
  assert.ok(sum >= 0 && sum / count < 10_000, `sum ${sum} over ${count}`);
  // What `basalt status` reads back: the same histogram, and quantiles within the bucket range.
  const parsed = histogramOf(parseMetrics(body), 'basalt_raft_commit_latency_ms');
  assert.equal(parsed?.count, count);
  assert.deepEqual(parsed?.bounds, [0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]);
  const p50 = estimateQuantile(parsed!, 0.5)!;
  const p99 = estimateQuantile(parsed!, 0.99)!;
  assert.ok(0 <= p50 && p50 <= p99 && p99 <= 1000, `p50 ${p50} p99 ${p99}`);
}

test('basalt start --metrics-port: /health 200 once ready, /metrics in Prometheus text, JSON logs with the node name', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'basalt-ops-'));
  const logFile = join(dir, 'n1.log');
  const child = new ChildNode([
    'start',
    '--name',
    'n1',
    '--port',
    String(await freePort()),
    '--memory',
    '--table',
    'kv:2:1',
    '--client-port',
    '0',
    '--metrics-port',
    '0',
    '--log-file',
    logFile,
  ]);
  try {
    const url = (await child.waitFor(/metrics of n1: (http:\/\/[^/]+)\/metrics/))[1]!;
    await child.waitFor(/basalt: node n1 ready/);
    const health = await fetch(`${url}/health`);
    assert.equal(health.status, 200);
    assert.deepEqual(await health.json(), { ok: true, metastorageLeader: 'n1' });

    const address = (await child.waitFor(/connect\('([^']+)'\)/))[1]!;
    const client = await connect(address);
    await client.transaction((tx) => tx.put('kv', 'a', 1), { retries: 20 });
    await client.close();

    const response = await fetch(`${url}/metrics`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    // The ready line waits for the table, not for both partitions' elections: the one node leads all three groups soon.
    let body = await response.text();
    const deadline = Date.now() + 15_000;
    const settled = (b: string) =>
      sample(b, 'basalt_raft_leaderships{node="n1"}') === 3 && sample(b, 'basalt_primary_partitions{node="n1"}') === 2;
    while (!settled(body) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      body = await (await fetch(`${url}/metrics`)).text();
    }
    assert.equal(sample(body, 'basalt_up{node="n1"}'), 1);
    assert.equal(sample(body, 'basalt_healthy{node="n1"}'), 1);
    assert.equal(sample(body, 'basalt_hosted_partitions{node="n1"}'), 2);
    assert.equal(sample(body, 'basalt_raft_groups{node="n1"}'), 3, 'metastorage and two partitions');
    assert.equal(sample(body, 'basalt_raft_leaderships{node="n1"}'), 3);
    assert.ok((sample(body, 'basalt_meta_revision{node="n1"}') ?? 0) > 0);
    assert.ok((sample(body, 'basalt_leader_changes_total{node="n1"}') ?? 0) >= 3);
    for (const path of ['local', 'coordinator', 'commit_partition']) {
      assert.notEqual(sample(body, `basalt_resolution_total{node="n1",path="${path}"}`), undefined, path);
    }
    assert.notEqual(sample(body, 'basalt_tx_state_entries{node="n1"}'), undefined);
    assert.notEqual(sample(body, 'basalt_pending_requests{node="n1"}'), undefined);
    // A node alone sends nothing to peers; the counters are there from the start.
    assert.equal(sample(body, 'basalt_peer_messages_sent_total{node="n1"}'), 0);
    assert.equal(sample(body, 'basalt_peer_writes_total{node="n1"}'), 0);
    assert.ok((sample(body, 'process_resident_memory_bytes{node="n1"}') ?? 0) > 1_000_000, 'the resident set');
    assert.ok((sample(body, 'nodejs_heap_size_used_bytes{node="n1"}') ?? 0) > 1_000_000, 'the heap in use');
    assert.ok((sample(body, 'nodejs_external_memory_bytes{node="n1"}') ?? 0) > 0, 'the memory outside the heap');
    assert.ok((sample(body, 'nodejs_array_buffers_bytes{node="n1"}') ?? 0) > 0, 'the memory of Buffers');
    assert.match(body, /# TYPE basalt_resolution_total counter/);
    // Leases: the one node took the first lease of both partitions and lost none.
    assert.equal(sample(body, 'basalt_primary_partitions{node="n1"}'), 2);
    assert.ok((sample(body, 'basalt_lease_changes_total{node="n1"}') ?? 0) >= 2);
    assert.ok((sample(body, 'basalt_leases_acquired_total{node="n1"}') ?? 0) >= 2);
    assert.equal(sample(body, 'basalt_leases_lost_total{node="n1"}'), 0);
    assertCommitLatency(body);
    assert.equal((await fetch(`${url}/nope`)).status, 404);

    child.signal('SIGINT');
    assert.equal((await child.exited).code, 0, child.output);
    const lines = readFileSync(logFile, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { node: string; msg: string; level: number });
    assert.ok(
      lines.every((l) => l.node === 'n1'),
      'every log line names the node',
    );
    const messages = lines.map((l) => l.msg);
    for (const msg of ['node started', 'leader change', 'node ready', 'metrics endpoint open', 'node stopped']) {
      assert.ok(messages.includes(msg), `logged: ${msg}`);
    }
  } finally {
    child.signal('SIGKILL');
    await child.exited;
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a metrics server whose node is not running: /health 503, basalt_up 0', async () => {
  const server = await MetricsServer.start({ host: '127.0.0.1', port: 0, nodeName: 'n9', nodeOf: () => undefined });
  try {
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 503);
    assert.equal(((await health.json()) as { ok: boolean }).ok, false);
    const body = await (await fetch(`${server.url}/metrics`)).text();
    assert.equal(sample(body, 'basalt_up{node="n9"}'), 0);
    assert.equal(sample(body, 'basalt_healthy{node="n9"}'), 0);
  } finally {
    await server.close();
  }
});

test('a metrics server exports the heap in use after the last major GC, once one ran', async () => {
  const server = await MetricsServer.start({ host: '127.0.0.1', port: 0, nodeName: 'n9', nodeOf: () => undefined });
  try {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    gc();
    const series = 'nodejs_heap_used_after_major_gc_bytes{node="n9"}';
    // The GC is reported to observers asynchronously.
    let value: number | undefined;
    for (let i = 0; i < 50 && value === undefined; i++) {
      await new Promise((r) => setTimeout(r, 20));
      value = sample(await (await fetch(`${server.url}/metrics`)).text(), series);
    }
    assert.ok(value !== undefined && value > 1_000_000, `${series} is ${value}`);
  } finally {
    await server.close();
  }
});
